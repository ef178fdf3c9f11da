"""Reading: the only place that opens the logs.  ``load_build`` finds the ninja log and the
FAST_NVCC_LOG files among the paths, reads them with ``readers.py`` and picks one build."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import replace

from .readers import (
    NINJA_HEADER,
    build_jobs,
    jobs_of_records,
    join_records,
    parse_device_sidecar,
    parse_fast_nvcc_log,
    parse_ninja_log,
    split_builds,
    split_sessions,
)
from .advice import source_serial_shares
from .records import AnalysisError, Build, CompileRecord, Job, NinjaEntry


def load_build(paths: Sequence[str], *, build: int = -1) -> Build:
    """Read the ninja log (a file or a build directory holding one) and the FAST_NVCC_LOG files
    among ``paths``; return the jobs of build number ``build`` (1 the first, -1 the last)."""
    ninja_logs: list[str] = []
    fast_nvcc_logs: list[str] = []
    for path in paths or (".",):
        if not os.path.exists(path):
            raise AnalysisError(f"{path}: No such file or directory{_where_else(path, paths)}")
        kind, file = _classify_path(path)
        (ninja_logs if kind == "ninja" else fast_nvcc_logs).append(file)
    if len(ninja_logs) > 1:
        raise AnalysisError(
            f"one .ninja_log at a time, not {len(ninja_logs)}: {', '.join(ninja_logs)}"
        )
    records = [record for path in fast_nvcc_logs for record in _read_fast_nvcc_log(path)]
    if ninja_logs:
        found = _load_ninja_build(ninja_logs[0], records, tuple(fast_nvcc_logs), build=build)
        return replace(found, split_shares=source_serial_shares(records),
                       split_builds=_split_builds(split_sessions(records)))
    sessions = split_sessions(records)
    if not sessions:
        raise AnalysisError(f"{', '.join(fast_nvcc_logs)}: no compiles in the log")
    chosen = _choose(sessions, build, what=", ".join(fast_nvcc_logs))
    return Build(
        jobs=tuple(jobs_of_records(sessions[chosen])),
        fast_nvcc_logs=tuple(fast_nvcc_logs),
        index=chosen + 1,
        count=len(sessions),
        unjoined=len(records) - len(sessions[chosen]),
        split_shares=source_serial_shares(records),
        split_builds=_split_builds(sessions),
    )


def _split_builds(sessions: Sequence[Sequence[CompileRecord]]) -> tuple[tuple[Job, ...], ...]:
    """The jobs of each build in the FAST_NVCC_LOG files (``split_sessions``) that ran a split
    step (a step given cores), oldest first: what a split build's schedule left above its floor
    is measured there."""
    return tuple(tuple(jobs_of_records(session)) for session in sessions
                 if any(step.cores > 0 for record in session for step in record.steps))  # fmt: skip


def _load_ninja_build(
    path: str, records: list[CompileRecord], logs: tuple[str, ...], *, build: int
) -> Build:
    with _open_text(path) as handle:
        version, entries = parse_ninja_log(handle, name=path)
    builds = split_builds(entries)
    if not builds:
        raise AnalysisError(f"{path}: the log holds no build")
    chosen = _choose(builds, build, what=path)
    build_dir = os.path.dirname(os.path.realpath(path))
    jobs, unjoined = _join_build(builds, chosen, records, build_dir=build_dir)
    return Build(
        jobs=tuple(jobs),
        ninja_log=path,
        ninja_version=version,
        build_dir=build_dir,
        fast_nvcc_logs=logs,
        index=chosen + 1,
        count=len(builds),
        unjoined=unjoined,
    )


def _join_build(
    builds: Sequence[Sequence[NinjaEntry]],
    chosen: int,
    records: list[CompileRecord],
    *,
    build_dir: str,
) -> tuple[list[Job], int]:
    """The jobs of build ``chosen`` joined with their records, and the count left over.

    A log appended across builds holds a record for each time an output was compiled, and the
    newest is a later build's where that build rebuilt it.  The builds after the chosen one are
    joined first, newest first: each one's records all start after the build before it ended, so
    the earliest of them bounds the records the build before may take.
    """
    jobs = build_jobs(builds[chosen])
    if not records:
        return jobs, 0
    before = math.inf
    for later in range(len(builds) - 1, chosen, -1):
        jobs_later = build_jobs(builds[later])
        joined, _ = join_records(jobs_later, records, build_dir=build_dir, before=before)
        before = min((job.record.time for job in joined if job.record is not None), default=before)
    return join_records(jobs, records, build_dir=build_dir, before=before)


def _choose(builds: Sequence[object], build: int, *, what: str) -> int:
    count = len(builds)
    if not (1 <= build <= count or -count <= build <= -1):
        raise AnalysisError(
            f"--build {build}: {what} holds {count} build{'s' if count != 1 else ''}"
        )
    return build - 1 if build > 0 else count + build


def _where_else(path: str, paths: Sequence[str]) -> str:
    """Where a missing relative log may be: a build directory among ``paths`` holding it, as a
    FAST_NVCC_LOG that fast_nvcc could not place where the build started (no /proc) lands in
    each compile's working directory."""
    if os.path.isabs(path):
        return ""
    for other in paths:
        found = os.path.join(other, path)
        if os.path.isdir(other) and os.path.isfile(found):
            return (f" (but {found} is: a relative FAST_NVCC_LOG that fast_nvcc could not place"
                    " where the build started is written in each compile's working directory)")  # fmt: skip
    return ""


def _classify_path(path: str) -> tuple[str, str]:
    """('ninja' or 'fast_nvcc', the file): a build directory stands for its .ninja_log."""
    if os.path.isdir(path):
        log = os.path.join(path, ".ninja_log")
        if not os.path.isfile(log):
            raise AnalysisError(
                f"{path}: a directory without a .ninja_log (not a ninja build directory?)"
            )
        return "ninja", log
    with _open_text(path) as handle:
        first = handle.readline()
    if first.startswith(NINJA_HEADER):
        return "ninja", path
    if first.lstrip().startswith("{"):
        return "fast_nvcc", path
    if not first:
        raise AnalysisError(f"{path}: empty file")
    raise AnalysisError(f"{path}: neither a .ninja_log nor a FAST_NVCC_LOG (JSON lines)")


def _read_fast_nvcc_log(path: str) -> list[CompileRecord]:
    with _open_text(path) as handle:
        records = list(parse_fast_nvcc_log(handle, name=path))
    return _with_device_costs(records)


def _with_device_costs(records: list[CompileRecord]) -> list[CompileRecord]:
    """Attach each record's --device-trace costs from the sidecar its log line names; a sidecar
    that is gone leaves the record without them."""
    sidecars: dict[str, dict] = {}
    result = []
    for record in records:
        if record.device_trace is not None:
            file, key = record.device_trace
            if file not in sidecars:
                try:
                    with _open_text(file) as handle:
                        sidecars[file] = parse_device_sidecar(handle, name=file)
                except AnalysisError:
                    if os.path.exists(file):
                        raise
                    sidecars[file] = {}
            record = replace(record, device=sidecars[file].get(key, ()))
        result.append(record)
    return result


def _open_text(path: str):
    """open() for reading, OSError as one line; surrogateescape keeps odd bytes in paths."""
    try:
        return open(path, encoding="utf-8", errors="surrogateescape", newline="")
    except OSError as exc:
        raise AnalysisError(f"{path}: {exc.strerror or exc}") from None
