"""What became of the steps fast_nvcc sent to sccache (:mod:`.sccache`).

What sccache did with each step is not in its reply, only in its statistics: after each step
the runner reads ``sccache --show-stats`` and charges the change to the steps that finished
since the last reading, when it can (one step, or one cicc and one ptxas; any other compile on
the same sccache server in between makes it "sccache", unattributed).
"""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..graph.tasks import Task
from ..plan.dryrun import Kind

TOOLS = {Kind.CICC: "PTX", Kind.PTXAS: "CUBIN"}  # sccache's language names in its statistics


class Outcome:
    """What became of a step sent to sccache (strings: they go into reports as they are)."""

    REMOTE = "remote"  # compiled on a build server
    CACHED = "sccache-hit"  # served from sccache's cache
    SCCACHE_LOCAL = "sccache-local"  # a miss that sccache compiled on this machine
    FALLBACK = "local-fallback"  # sccache failed; fast_nvcc ran the step itself
    UNATTRIBUTED = "sccache"  # went through sccache; its statistics cannot say how


@dataclass(frozen=True, slots=True)
class Counts:
    """The parts of sccache's statistics that say what became of compiles."""

    requests: int = 0
    hits: tuple[tuple[str, int], ...] = ()  # per language
    misses: tuple[tuple[str, int], ...] = ()
    distributed: int = 0
    dist_errors: int = 0

    def minus(self, earlier: Counts) -> Counts:
        return self._combine(earlier, -1)

    def plus(self, other: Counts) -> Counts:
        return self._combine(other, 1)

    def _combine(self, other: Counts, sign: int) -> Counts:
        def per(mine, theirs):
            total = dict(mine)
            for key, value in theirs:
                total[key] = total.get(key, 0) + sign * value
            return tuple(sorted((k, v) for k, v in total.items() if v))

        return Counts(self.requests + sign * other.requests, per(self.hits, other.hits),
                      per(self.misses, other.misses), self.distributed + sign * other.distributed,
                      self.dist_errors + sign * other.dist_errors)  # fmt: skip


def parse_stats(text: str) -> Counts:
    stats = json.loads(text)["stats"]
    return Counts(
        requests=int(stats.get("compile_requests", 0)),
        hits=tuple(sorted(stats.get("cache_hits", {}).get("counts", {}).items())),
        misses=tuple(sorted(stats.get("cache_misses", {}).get("counts", {}).items())),
        distributed=sum(stats.get("dist_compiles", {}).values()),
        dist_errors=int(stats.get("dist_errors", 0)),
    )


def attribute(delta: Counts, tools: Sequence[str]) -> list[str]:
    """What became of each of ``tools`` (languages, one per finished step) given the change in
    sccache's statistics over the time they finished in; UNATTRIBUTED where it cannot say."""
    unknown = [Outcome.UNATTRIBUTED] * len(tools)
    if delta.requests != len(tools):
        return unknown  # some other compile went through the same sccache server meanwhile
    hits, misses = dict(delta.hits), dict(delta.misses)
    result = []
    for language in tools:
        share = tools.count(language)
        if hits.get(language, 0) == share:
            result.append(Outcome.CACHED)
        elif misses.get(language, 0) == share and delta.distributed == sum(misses.values()):
            result.append(Outcome.REMOTE)
        elif misses.get(language, 0) == share and delta.distributed == 0:
            result.append(Outcome.SCCACHE_LOCAL)
        else:
            result.append(Outcome.UNATTRIBUTED)
    return result


class StatsLedger:
    """What became of each step sent to sccache, from its statistics read around the steps."""

    def __init__(self, sccache_path: str, *, env: Mapping[str, str], timeout: float) -> None:
        self.sccache_path = sccache_path
        self.env = env
        self.timeout = timeout  # seconds for one reading
        self._lock = threading.Lock()  # statistics are read one at a time
        self._finished: list[tuple[int, str]] = []  # (task id, language) since the last reading
        self._last: Counts | None = None
        self._change = Counts()  # since the last attribution
        self._in_flight = 0  # our steps at sccache now
        self.outcomes: dict[int, str] = {}
        self.dist_errors = 0  # sccache's own fallbacks to compiling here, seen in its statistics

    def begin(self) -> None:
        """A step goes to sccache: read the statistics first if nothing of ours is there."""
        with self._lock:
            if self._in_flight == 0 and not self._finished:
                self._last = self._read_counts()
                self._change = Counts()
            self._in_flight += 1

    def settle(self, task: Task, *, fell_back: bool) -> None:
        """A step left sccache: read the statistics, and charge their change since the last
        reading to the steps that finished since.  Two steps ending together can land in one
        reading, or one's compile in the reading of the other: the change is carried until
        the count of compiles it holds matches the steps that have finished."""
        with self._lock:
            self._in_flight -= 1
            self._finished.append((task.id, TOOLS[task.step.kind]))
            if fell_back:
                self.outcomes[task.id] = Outcome.FALLBACK
            now = self._read_counts()
            if now is None or self._last is None:
                self._give_up()
                self._last = now
                return
            change = now.minus(self._last)
            self._last = now
            self.dist_errors += max(0, change.dist_errors)
            self._change = self._change.plus(change)
            if self._change.requests == len(self._finished):
                outcomes = attribute(self._change, [language for _, language in self._finished])
                for (task_id, _), outcome in zip(self._finished, outcomes):
                    self.outcomes.setdefault(task_id, outcome)
                self._finished, self._change = [], Counts()
            elif self._in_flight == 0:
                self._give_up()  # another client's compiles are in the change

    def conclude(self) -> None:
        """The run is over: steps whose share of the statistics never added up stay unattributed."""
        with self._lock:
            self._give_up()

    def _give_up(self) -> None:
        for task_id, _ in self._finished:
            self.outcomes.setdefault(task_id, Outcome.UNATTRIBUTED)
        self._finished, self._change = [], Counts()

    def _read_counts(self) -> Counts | None:
        try:
            out = subprocess.run([self.sccache_path, "--show-stats", "--stats-format", "json"], env=self.env,
                                 capture_output=True, text=True, timeout=self.timeout, check=False)  # fmt: skip
            return parse_stats(out.stdout) if out.returncode == 0 else None
        except (OSError, subprocess.TimeoutExpired, ValueError, KeyError, TypeError):
            return None
