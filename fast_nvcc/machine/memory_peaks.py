"""What each step of a compile is expected to peak at, for the memory budget (:mod:`.memory`):
learned from the history; else a peer's (:class:`.memory_files.PeerPeaks`: the last step of its
kind that ended on the machine, or more if a running one holds more); else, while no step of its
kind has ended, ``GUESS_MARGIN`` times the per-tool guess.  Running steps that grow past it and
steps killed for memory raise it."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from .memory_files import PeerPeaks

RAISE_AT = 1.1  # a claim or a posted peak is raised once a step holds this much more


class ExpectedPeaks:
    """Task -> the bytes its step is expected to reach, and what the steps that run teach."""

    # A kind no step has ended yet is expected at this many times its per-tool guess: CUTLASS's
    # sm_90a ciccs reach 3-5 GB against the 800 MB default (docs/benchmarks.md).
    GUESS_MARGIN = 4

    def __init__(self, directory: str, *, peaks: Sequence[int], kinds: Sequence[tuple[str, str]],
                 learned: Sequence[bool]) -> None:  # fmt: skip
        self.peaks = list(peaks)  # task -> expected peak in bytes
        # task -> (tool, arch), for peers' peaks, as the peak files name them
        self.kinds = [tuple(re.sub(r"[^\w.+-]", "_", part) for part in kind) for kind in kinds]
        self.learned = list(learned)  # task -> whether its peak came from history (our own copy)
        self.peers = PeerPeaks(directory)

    def need(self, task_id: int, *, limit: int) -> int:
        """The peak ``task_id`` is expected to reach: learned; else its peers' (the last one of
        its kind that ended, or more if a running one holds more); else, while no step of its
        kind has ended, ``GUESS_MARGIN`` times the guess (up to a quarter of the ``limit``: in a
        small cgroup the guess alone is near it already), or more if a running one holds more."""
        peak = self.peaks[task_id]
        if self.learned[task_id]:
            return peak
        kind = self.kinds[task_id]
        peer = self.peers.read().get(kind, 0)
        if self.peers.ended(kind):
            return peer
        return max(peer, peak, min(peak * self.GUESS_MARGIN, limit // 4))

    def grown(self, task_id: int, size: int) -> int:
        """What the claim of ``task_id``'s running step, which holds ``size`` bytes now, is to
        be raised to: that, and for a step on a guess its kind's peak, which ``size`` raises
        first when the step holds more than its kind's posted peak."""
        if self.learned[task_id]:
            return size
        kind = self.kinds[task_id]
        if size > max(self.peers.read().get(kind, 0), self.peaks[task_id]) * RAISE_AT:
            self.peers.post(kind, size, live=True)
        return max(size, self.peers.read().get(kind, 0))

    def ended(self, task_id: int, *, rss_kb: int, running: Iterable[tuple[int, int]]) -> None:
        """``task_id``'s step ended at ``rss_kb``: its kind's peak for the peers, though not
        below what a ``running`` step of its kind (task, bytes) holds: a small one ending must
        not tell the next step of the kind to expect less than a big one already holds."""
        kind = self.kinds[task_id]
        holding = [size for t, size in running if self.kinds[t] == kind]
        self.peers.post(kind, max([rss_kb * 1024, *holding]))

    def killed(self, task_id: int, *, rss_kb: int | None) -> None:
        """``task_id``'s step was killed for memory holding ``rss_kb``: it needs more than that."""
        if rss_kb:
            self.peaks[task_id] = max(self.peaks[task_id], rss_kb * 1024 * 5 // 4)
            self.learned[task_id] = True
