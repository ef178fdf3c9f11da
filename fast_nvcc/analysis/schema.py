"""Output as JSON: ``--format json``, its whole schema in one place (documented in
docs/analyze.md; bump JSON_SCHEMA_VERSION when a field changes meaning or goes away)."""

from __future__ import annotations

from typing import Any, TypedDict

from .model import sum_phases
from .records import BOOKKEEPING_TOOLS, Analysis, Job, PhaseTotal

JSON_SCHEMA_VERSION = 1


class PhaseJson(TypedDict):
    kind: str
    arch: str | None
    seconds: float
    cpu_seconds: float
    steps: int


class LongPoleJson(TypedDict):
    outputs: list[str]
    start: float
    end: float
    seconds: float
    floor_without_seconds: float
    floor_drop_seconds: float
    fast_nvcc: bool


class CompileJson(TypedDict):
    outputs: list[str]
    start: float
    end: float
    seconds: float
    fast_nvcc_wall_seconds: float
    exit_code: int | None
    mode: str
    reason: str
    steps: int
    phases: dict[str, float]


class AnalysisJson(TypedDict):
    """``--format json``; documented in docs/analyze.md."""

    version: int
    sources: dict[str, Any]
    build: dict[str, int]
    jobs: int
    joined: int
    unjoined_records: int
    slots: int
    slots_source: str
    max_concurrency: int
    wall_seconds: float
    job_seconds: float
    fast_nvcc_own_cpu_seconds: float | None
    parallelism: float
    parallelism_share: float
    bound: dict[str, float]
    profile: dict[str, Any]
    long_poles: list[LongPoleJson]
    what_if: dict[str, Any] | None
    phases: list[PhaseJson]
    phases_by_arch: list[PhaseJson]
    waiting: dict[str, Any] | None
    compiles: list[CompileJson]
    device: dict[str, Any] | None
    failed_guesses: list[dict[str, Any]]
    advice: dict[str, Any] | None
    idle_cores: dict[str, Any] | None


def json_report(a: Analysis) -> AnalysisJson:
    build = a.build
    what_if = None
    if a.what_if is not None:
        what_if = {
            "rules": [
                {"pattern": r.pattern, "seconds": r.seconds, "matched": n}
                for r, n in a.what_if.rules
            ],
            "job_seconds": _r(a.what_if.job_seconds),
            "lower_seconds": _r(a.what_if.bound.lower),
            "upper_seconds": _r(a.what_if.bound.upper),
        }
    return {
        "version": JSON_SCHEMA_VERSION,
        "sources": {
            "ninja_log": build.ninja_log,
            "ninja_log_version": build.ninja_version,
            "build_dir": build.build_dir,
            "fast_nvcc_logs": list(build.fast_nvcc_logs),
        },
        "build": {"index": build.index, "count": build.count},
        "jobs": len(build.jobs),
        "joined": len(build.records) if build.ninja_log else 0,
        "unjoined_records": build.unjoined,
        "slots": a.slots,
        "slots_source": "option" if a.slots_given else "max_concurrency",
        "max_concurrency": a.max_concurrency,
        "wall_seconds": _r(a.wall),
        "job_seconds": _r(a.job_seconds),
        "fast_nvcc_own_cpu_seconds": None if (own := build.own_cpu) is None else _r(own[0]),
        "parallelism": _r(a.parallelism),
        "parallelism_share": _r(a.parallelism / a.slots),
        "bound": {"lower_seconds": _r(a.bound.lower), "upper_seconds": _r(a.bound.upper)},
        "profile": {
            "interval_seconds": a.interval,
            "rows": [
                {"time": _r(r.time), "running": r.running, "mean": _r(r.mean), "cores": _r_or_none(r.cores)}
                for r in a.profile
            ],
        },
        "long_poles": [
            {
                "outputs": list(p.job.outputs),
                "start": _r(p.job.start),
                "end": _r(p.job.end),
                "seconds": _r(p.job.seconds),
                "floor_without_seconds": _r(p.floor_without),
                "floor_drop_seconds": _r(a.bound.lower - p.floor_without),
                "fast_nvcc": p.job.record is not None,
            }
            for p in a.long_poles
        ],
        "what_if": what_if,
        "phases": [_phase_json(p) for p in a.phases],
        "phases_by_arch": [_phase_json(p) for p in a.arch_phases],
        "waiting": None if a.waiting is None else {
            "compiles": a.waiting.compiles,
            "first_step_seconds": _r(a.waiting.first_step_seconds),
            "slot_seconds": _r(a.waiting.slot_seconds),
            "longest_first_step": {"seconds": _r(a.waiting.worst_first_step[0]),
                                   "output": a.waiting.worst_first_step[1]},
            "starved": [{"seconds": _r(s), "output": n} for s, n in a.waiting.starved],
            "over_pool": {why: {"steps": o.steps, "seconds": _r(o.seconds), "compiles": o.compiles}
                          for why, o in a.waiting.over_pool},
            "memory": {"seconds": _r(a.waiting.memory_seconds), "steps": a.waiting.memory_steps,
                       "compiles": a.waiting.memory_compiles, "oom_reruns": a.waiting.oom_reruns,
                       "stopped_steps": a.waiting.stopped_steps, "stopped_seconds": _r(a.waiting.stopped_seconds)},
            "yielded": {"steps": a.waiting.yielded_steps, "seconds": _r(a.waiting.yielded_seconds)},
        },
        "compiles": [_compile_json(job) for job in build.jobs if job.record is not None],
        "device": _device_json(a),
        "failed_guesses": [
            {"what": f.what, "why": f.why, "steps": f.steps, "lost_seconds": _r(f.lost),
             "compiles": [{"output": n, "lost_seconds": _r(s)} for s, n in f.compiles]}
            for f in a.failed_guesses
        ],
        "advice": _advice_json(a),
        "idle_cores": a.idle.json() if a.idle is not None else None,
    }


def _advice_json(a: Analysis) -> dict[str, Any] | None:
    """What to change (advice.py): the compiles that set the floor and what split gives."""
    v = a.advice
    if v is None:
        return None
    return {
        "floor_seconds": _r(v.floor), "share_seconds": _r(v.share), "work_seconds": _r(v.work),
        "cores": v.cores, "threads": v.threads,
        "poles": [{"output": p.name, "source": p.source, "start": _r(p.start), "seconds": _r(p.elapsed),
                   "own_path_seconds": _r(p.seconds),
                   "cicc_seconds": _r(p.cicc), "ptxas_seconds": _r(p.ptxas), "host_seconds": _r(p.host),
                   "split_seconds": None if p.split_seconds is None else _r(p.split_seconds),
                   "already_split": p.already_split, "measured_split": p.measured} for p in v.poles],
        "split_floor_seconds": None if v.split_floor is None else _r(v.split_floor),
        "split_extra_cpu_seconds": _r(v.split_extra_cpu),
        "split_expected_seconds": None if v.expected is None else _r(v.expected),
        "overrun": None if v.overrun is None else {"ratio": round(v.overrun[0], 4), "split_builds": v.overrun[1]},
        "serial_shares": {tool: {"share": round(share, 4), "from": how} for tool, share, how in v.serial},
        "setting": v.setting,
        "halves_floor_seconds": None if v.halves_floor is None else _r(v.halves_floor),
        "late_start_seconds": None if v.late_start is None else _r(v.late_start),
    }  # fmt: skip


def _device_json(a: Analysis) -> dict[str, Any] | None:
    """--device-trace costs: seconds, all templates and headers, the top functions."""
    d = a.device
    if d is None:
        return None
    return {
        "compiles": d.compiles,
        "templates": [{"side": t.side, "name": t.name, "seconds": _r(t.seconds), "instantiations": t.instantiations,
                       "compiles": t.compiles} for t in d.templates],
        "headers": [{"side": h.side, "name": h.name, "seconds": _r(h.seconds), "compiles": h.compiles} for h in d.headers],
        "functions": [{"phase": f.phase, "tool": f.tool, "arch": f.arch, "name": f.name, "seconds": _r(f.seconds)}
                      for f in d.functions[: a.top * 4]],
        "splits": [{"compile": s.job, "arch": s.arch, "front_end_seconds": _r(s.front_end),
                    "optimizer_seconds": _r(s.optimizer), "codegen_seconds": _r(s.codegen),
                    "ptxas_seconds": _r(s.ptxas)} for s in d.splits],
        "what_if_templates": [{"pattern": w.pattern, "matched": list(w.matched), "seconds": _r(w.seconds),
                               "compiles": w.jobs, "job_seconds": _r(w.job_seconds),
                               "lower_seconds": _r(w.bound.lower), "upper_seconds": _r(w.bound.upper)}
                              for w in d.what_if],
    }  # fmt: skip


def _phase_json(p: PhaseTotal) -> PhaseJson:
    return {
        "kind": p.kind,
        "arch": p.arch,
        "seconds": _r(p.seconds),
        "cpu_seconds": _r(p.cpu_seconds),
        "steps": p.steps,
    }


def _compile_json(job: Job) -> CompileJson:
    record = job.record
    assert record is not None
    return {
        "outputs": list(job.outputs),
        "start": _r(job.start),
        "end": _r(job.end),
        "seconds": _r(job.seconds),
        "fast_nvcc_wall_seconds": _r(record.wall_seconds),
        "exit_code": record.exit_code,
        "mode": record.mode,
        "reason": record.reason,
        "steps": sum(1 for s in record.steps if s.tool not in BOOKKEEPING_TOOLS),
        "phases": {p.kind: _r(p.seconds) for p in sum_phases((record,), by_arch=False)},
    }


def _r(value: float) -> float:
    return round(value, 6)


def _r_or_none(value: float | None) -> float | None:
    return None if value is None else _r(value)
