"""FAST_NVCC_LOG: one JSON line per invocation, appended under a lock
by every compile of a build; `fast_nvcc analyze` reads it.  Its schema: docs/options.md."""

from __future__ import annotations

import fcntl
import json
import os
import resource
import socket
from collections.abc import Mapping, Sequence
from typing import Any

from ..graph.tasks import RUNS_TOOL
from ..run.task_records import Narrowed, Refused
from .run_report import RunReport, StepReport


LOG_SCHEMA_VERSION = 1


def log_record(
    *,
    nvcc: str,
    args: Sequence[str],
    cwd: str,
    sources: Sequence[str],
    outputs: Sequence[str],
    exit_code: int,
    wall_seconds: float,
    started: float,
    mode: str,
    reason: str | None = None,
    report: RunReport | None = None,
) -> dict[str, Any]:
    """One invocation's line: what it ran and how that ended; with the ``report`` of a run, the
    run's own fields too."""
    record: dict[str, Any] = {
        "version": LOG_SCHEMA_VERSION,
        "time": started,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "cwd": cwd,
        "nvcc": nvcc,
        "args": list(args),
        "sources": list(sources),
        "outputs": list(outputs),
        "exit_code": exit_code,
        "wall_seconds": round(wall_seconds, 6),
        # fast_nvcc's own cpu, its threads' and its in-process steps', its start-up included; not
        # its children's (the steps' cpu_seconds): what it costs a build whose cores are full.
        "own_cpu_seconds": round(_own_cpu(), 6),
        "mode": mode,
    }
    if reason:
        record["reason"] = reason
    if report is not None:
        record.update(_run_fields(report))
    return record


def _own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _run_fields(report: RunReport) -> dict[str, Any]:
    """What the run adds to the line: its job bound and waits, what the cache and sccache did,
    the work failed guesses lost, and one entry per step."""
    fields: dict[str, Any] = {
        "jobs": report.jobs,
        "run_start": report.started_at,
        "critical_path_seconds": round(report.critical_path_seconds, 6),
        "first_step_wait_seconds": round(report.first_step_wait_seconds, 6),
        "slot_wait_seconds": round(report.slot_wait_seconds, 6),
        "memory_wait_seconds": round(report.memory_wait_seconds, 6),
        "memory_stopped_seconds": round(report.memory_stopped_seconds, 6),
    }
    counts = report.cache_counts()
    if counts:
        fields["cache"] = {
            "hits": sum(h for h, _ in counts.values()),
            "misses": sum(m for _, m in counts.values()),
            "tools": {tool: {"hits": h, "misses": m} for tool, (h, m) in counts.items()},
        }
    remote = report.remote_counts()
    if remote:
        sent = [s for s in report.steps if s.remote is not None]
        fields["remote"] = {
            "launcher": "sccache",
            "outcomes": remote,
            "seconds": round(sum(s.seconds for s in sent), 6),
            "waited_seconds": round(sum(s.waited for s in sent), 6),
        }
    failed = report.failed_guesses()
    if failed:
        fields["failed_guesses"] = {"steps": len(failed), "lost_seconds": round(sum(s.guess_lost for s in failed), 6)}
    fields["steps"] = [_step_fields(s) for s in report.steps]
    return fields


def _step_fields(s: StepReport) -> dict[str, Any]:
    """One step's entry; the fields of what did not happen to it are left out."""
    return {
        "index": s.index,
        "tool": s.tool,
        "kind": s.kind,
        "arch": s.arch,
        "start": _round(s.start),
        "end": _round(s.end),
        "seconds": round(s.seconds, 6),
        "cpu_seconds": _round(s.cpu_seconds),
        "max_rss_kb": s.max_rss_kb,
        "exit_code": s.exit_code,
        "state": s.state,
        "critical": s.critical,
        "wait": _round(s.waited if s.start is not None else None),
        "command": s.action in RUNS_TOOL,
        "cached": s.cached,
        **({"remote": s.remote} if s.remote is not None else {}),
        **({"remote_note": s.remote_note} if s.remote_note else {}),
        **({"over_pool": s.over_pool} if s.over_pool else {}),
        **({"nice": s.nice} if s.nice else {}),
        **({"memory_wait": round(s.memory_waited, 6)} if s.memory_waited else {}),
        **({"memory_stopped": round(s.memory_stopped, 6)} if s.memory_stopped else {}),
        **({"memory_evicted": True} if s.memory_evicted else {}),
        **({"yielded": round(s.yielded, 6)} if s.yielded else {}),
        **({"stops_at": [[round(a, 6), round(b, 6)] for a, b in s.stops]} if s.stops else {}),
        **({"went_on": [[round(t, 6), why, round(rank, 3), _round(ask), _round(left)]
                        for t, why, rank, ask, left in s.went_on]} if s.went_on else {}),
        **({"oom_rerun": True} if s.oom_rerun else {}),
        **({"guess_failed": s.guess_failed, "guess_lost": round(s.guess_lost, 6)} if s.guess_failed else {}),
        **({"cores": s.cores, "cores_at": [[round(t, 6), n] for t, n in s.core_timeline],
            "serial_seconds": round(s.serial_seconds, 3), "cores_idle_seconds": round(s.cores_idle, 3)} if s.cores else {}),
        **({"narrowed": [narrowed_entry(n) for n in s.narrowed]} if s.narrowed else {}),
        **({"refused": [refused_entry(r) for r in s.refused]} if s.refused else {}),
        **({"longest": True} if s.longest else {}),
    }


def narrowed_entry(narrowed: Narrowed) -> list[Any]:
    """``[seconds, why]``, and for a core given to the pool's waiter (``rank``) that waiter's
    rank and process: ``[seconds, "rank", its rank, its pid]`` (docs/options.md)."""
    when, why, waiter = narrowed
    entry: list[Any] = [round(when, 6), why]
    return entry if waiter is None else [*entry, round(waiter.rank, 3), waiter.pid]


def refused_entry(refused: Refused) -> list[Any]:
    """``[seconds, why, rank]``: a split step's threads wanted a core it did not get, at that
    rank, for want of a local slot ("jobs") or a shared one ("slot"), and for the pool's
    ``[..., ahead, free, over]`` (docs/options.md)."""
    when, why, pool, rank = refused
    entry: list[Any] = [round(when, 6), why, round(rank, 3)]
    return entry if pool is None else [*entry, *pool]


def append_log(path: str, record: Mapping[str, Any]) -> None:
    """Append one JSON line.  One write(2) of the whole line on an O_APPEND descriptor, under an
    exclusive lock: lines from concurrent compiles never interleave or get lost."""
    line = (json.dumps(record, separators=(",", ":")) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        view = memoryview(line)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 6)
