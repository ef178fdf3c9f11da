"""What the build ran twice because a guess of fast_nvcc's failed (fast_nvcc.guess.decisions): a cicc
stopped and run as printed when its own module_id proved wrong, a host compile run again when
its split did not hold.  From the FAST_NVCC_LOG step fields ``guess_failed`` and
``guess_lost``."""

from __future__ import annotations

from collections.abc import Sequence

from .records import FailedGuess, Job


def sum_failed_guesses(jobs: Sequence[Job]) -> tuple[FailedGuess, ...]:
    """One row per kind of work and reason, the costliest first."""
    rows: dict[tuple[str, str], list[tuple[float, str]]] = {}
    for job in jobs:
        if job.record is None:
            continue
        for step in job.record.steps:
            if step.guess_failed:
                what = "host compile ran twice" if step.kind == "host-compile" else f"{step.tool} ran twice"
                rows.setdefault((what, step.guess_failed), []).append((step.guess_lost, job.name))
    found = []
    for (what, why), lost in rows.items():
        per_job: dict[str, float] = {}
        for seconds, name in lost:
            per_job[name] = per_job.get(name, 0.0) + seconds
        compiles = tuple(sorted(((s, n) for n, s in per_job.items()), key=lambda c: (-c[0], c[1])))
        found.append(FailedGuess(what, why, len(lost), sum(s for s, _ in lost), compiles))
    return tuple(sorted(found, key=lambda f: (-f.lost, f.what, f.why)))
