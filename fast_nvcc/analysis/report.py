"""Output as text: the analysis as tables, rendered as aligned text or as Markdown."""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from .advice import WORTH
from .records import (
    BOOKKEEPING_TOOLS,
    Advice,
    Analysis,
    Build,
    FailedGuess,
    Job,
    PhaseTotal,
    ProfileRow,
    Waiting,
    WhatIf,
)


@dataclass(frozen=True, slots=True)
class Table:
    """One table of the report, rendered as aligned text or as Markdown."""

    title: str | None  # None: continues the previous table's section
    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    align: str  # 'l' or 'r' per column
    keys: bool = False  # a list of measures: its header is left out of the text


def format_text(analysis: Analysis) -> str:
    lines = [f"fast_nvcc analyze: {_source_line(analysis.build)}"]
    for table in report_tables(analysis):
        if table.title:
            lines += ["", table.title]
        lines += _text_table(table)
    return "\n".join(lines) + "\n"


def format_markdown(analysis: Analysis) -> str:
    lines = [f"# fast_nvcc analyze: {_source_line(analysis.build)}"]
    for table in report_tables(analysis):
        lines.append("")
        if table.title:
            lines += [f"## {table.title[0].upper()}{table.title[1:]}", ""]
        lines += _markdown_table(table)
    return "\n".join(lines) + "\n"


def report_tables(a: Analysis) -> Iterator[Table]:
    """The report's tables, in the order the text shows them: the measures, the jobs over time,
    the long poles, the what-if, the phases, the waits, the failed guesses, the device side and
    what to change."""
    yield _measures_table(a)
    yield _concurrency_table(a)
    yield _long_poles_table(a)
    if a.what_if is not None:
        yield from _what_if_tables(a, a.what_if)
    if a.phases:
        yield _phase_table(
            f"time per phase (fast_nvcc steps of {_plural(len(a.build.records), 'compile')}, added up;"
            " a compile's steps run side by side, so these add to more than its time)",
            a.phases,
        )
    if a.arch_phases:
        yield _phase_table("time per phase and architecture", a.arch_phases)
    if a.waiting is not None:
        yield _waiting_table(a.waiting)
    if a.failed_guesses:
        yield _failed_guesses_table(a.failed_guesses)
    yield from device_tables(a, top=a.top)
    if a.advice is not None:
        yield from advice_tables(a.advice)


def _measures_table(a: Analysis) -> Table:
    """The answer first (how long, how close to the floor, what to change), then the measures
    it comes from, each saying what it is."""
    v = a.advice
    slots_note = f"-j {a.slots}" if a.slots_given else "the most jobs seen running at once; -j N sets it"
    rows = [("took", f"{_seconds(a.wall)}, from the first job's start to the last job's end")]
    if v is not None:
        rows += [
            ("floor", f"{_seconds(v.floor)} = {_floor_terms(v)}: no order of the work ends sooner"),
            ("above the floor", _above_floor(a.wall, v.floor)),
            *([("fast_nvcc's own cpu", _own_cpu_line(own, v.work))] if (own := a.build.own_cpu) else []),
            ("what to change", _change_line(v)),
            *([("idle cores", a.idle.describe())] if a.idle is not None else []),
        ]  # fmt: skip
    worst = a.bound.upper
    rows += [
        ("jobs", _jobs_note(a.build)),
        *([("ran as plain nvcc", unchanged)] if (unchanged := _unchanged_note(a.build)) else []),
        ("sum of job times", f"{_seconds(a.job_seconds)}, the jobs' elapsed times added up"),
        ("effective parallelism", (f"{a.parallelism:.2f} jobs at once on average (sum / wall;"
                                   f" {a.parallelism / a.slots:.0%} of {_plural(a.slots, 'slot')})")),
        ("slots", f"{a.slots} ({slots_note})"),
        ("slot floor", (f"{_seconds(a.bound.lower)} = max(longest job, sum / slots), were each job one slot's work"
                        " (the long poles and the what-if use it)")),
        ("worst order", f"{_seconds(worst)} = (sum - longest) / slots + longest: the latest any order of these jobs"
                        " ends, none waiting for another; the wall is "
                        + (f"{_seconds(a.wall - worst)} over it: dependencies (a link waits for its objects) held"
                           " the build back" if a.wall > worst + 0.005 else "within it")),
    ]  # fmt: skip
    return Table(None, ("measure", "value"), tuple(rows), "ll", keys=True)


def _floor_terms(v: Advice) -> str:
    return (f"max(longest compile's own path {_seconds(v.longest)}, cpu work {_seconds(v.work)} / {_plural(v.cores, 'core')}"
            f" = {_seconds(v.share)})")  # fmt: skip


def _own_cpu_line(own_cpu: tuple[float, int], work: float) -> str:
    own, compiles = own_cpu
    return (f"{_seconds(own)} over {_plural(compiles, 'compile')} ({own / work:.1%} of the cpu work): its start-up"
            " and scheduling, on the cores beside the steps (not in the floor's work)") if work > 0 else _seconds(own)


def _above_floor(wall: float, floor: float) -> str:
    if floor <= 0:
        return "no floor: the jobs took no time"
    if wall < floor:  # a job without fast_nvcc's log counts its elapsed time, which may have shared a core
        return f"none: the build ended {_seconds(floor - wall)} before it (a job without a log counts its elapsed time)"
    return f"{_seconds(wall - floor)}: the build took {wall / floor:.2f} × its floor"


def _change_line(v: Advice) -> str:
    """The advice in one line; the last table holds the detail."""
    if not v.poles:
        return ("nothing to split (work-bound: no compile outlasts the cpu work's share of the cores); more cores,"
                " --cache or fewer template instantiations lower the floor")  # fmt: skip
    first = v.poles[0].source
    if v.split_floor is not None:
        expect = "" if v.expected is None else f", expect about {_seconds(v.expected)}"
        line = (f"split {_plural(len(v.sources), 'source')} {v.threads} ways: floor -> {_seconds(v.split_floor)}"
                f"{expect} ({v.setting}; the last table)")  # fmt: skip
    elif v.halves_floor is not None and v.halves_floor < v.floor * (1 - WORTH):
        line = f"{first} sets the floor; cut it into two sources: floor -> {_seconds(v.halves_floor)} (the last table)"
    else:
        line = f"{first} sets the floor, and neither split nor cutting it in two lowers it much (the last table)"
    if v.late_start is not None:
        line += f"; {first} started {_seconds(v.late_start)} late: give ninja a -j above the compile count"
    return line


def _concurrency_table(a: Analysis) -> Table:
    scale = 40 / max(a.slots, a.max_concurrency, 1)
    cores = a.profile[0].cores is not None if a.profile else False
    rows = []
    for first, last in _runs(a.profile):
        end = min(last.time + a.interval, a.wall)
        when = f"{first.time:.2f}" if first is last else f"{first.time:.2f}-{end:.2f}"
        busy = (f"{first.cores:.1f}",) if cores else ()
        rows.append((when, str(first.running), f"{first.mean:.1f}", *busy, "#" * round(first.running * scale)))
    return Table(
        f"concurrency (jobs running at each instant, every {a.interval:g} s, and the mean until the next;"
        + (" cores: busy on average until the next, the steps' cpu spread over their runs;" if cores else "")
        + " a span of instants alike is one row)",
        ("t (s)", "running", "mean", *(("cores",) if cores else ()), ""),
        tuple(rows),
        "rrrrl" if cores else "rrrl",
    )


def _runs(profile: Sequence[ProfileRow]) -> Iterator[tuple[ProfileRow, ProfileRow]]:
    """The first and last row of each run of rows that read alike (same count, same mean)."""
    start = 0
    for index in range(1, len(profile) + 1):
        if index == len(profile) or not _alike(profile[index], profile[start]):
            yield profile[start], profile[index - 1]
            start = index


def _alike(row: ProfileRow, other: ProfileRow) -> bool:
    return row.running == other.running and f"{row.mean:.1f}" == f"{other.mean:.1f}" \
        and f"{row.cores or 0:.1f}" == f"{other.cores or 0:.1f}"


def _long_poles_table(a: Analysis) -> Table:
    with_steps = any(p.job.record is not None for p in a.long_poles)
    return Table(
        f"long poles (top {len(a.long_poles)}; floor if 0 s: the slot floor were that job to take no time)",
        ("#", "start (s)", "end (s)", "elapsed (s)", "floor if 0 s", "floor drop")
        + (("longest step",) if with_steps else ()) + ("output",),
        tuple(
            (str(rank), f"{p.job.start:.2f}", f"{p.job.end:.2f}", f"{p.job.seconds:.2f}", f"{p.floor_without:.2f}",
             f"{a.bound.lower - p.floor_without:.2f}")
            + ((_longest_step(p.job),) if with_steps else ()) + (p.job.name,)
            for rank, p in enumerate(a.long_poles, start=1)
        ),
        "rrrrrr" + ("ll" if with_steps else "l"),
    )  # fmt: skip


def _what_if_tables(a: Analysis, w: WhatIf) -> Iterator[Table]:
    yield Table(
        f"what-if (same {a.slots} slots)",
        ("pattern", "seconds", "jobs matched"),
        tuple((rule.pattern, f"{rule.seconds:g}", str(n)) for rule, n in w.rules),
        "lrr",
    )
    yield Table(
        None,
        ("", "measured", "what-if"),
        (
            ("sum of job times", _seconds(a.job_seconds), _seconds(w.job_seconds)),
            ("slot floor", _seconds(a.bound.lower), _seconds(w.bound.lower)),
            ("worst order", _seconds(a.bound.upper), _seconds(w.bound.upper)),
            ("measured wall", _seconds(a.wall), ""),
        ),
        "lrr",
    )


def _waiting_table(w: Waiting) -> Table:
    seconds, name = w.worst_first_step
    rows = [
        ("compiles starved (waited for a first step while another compile ran two or more)",
         str(len(w.starved))),
        ("compiles' waits before their first step, added up", _seconds(w.first_step_seconds)),
        ("the longest wait before a first step", f"{_seconds(seconds)} ({_short(name)})"),
        ("ready steps' waits for a core, added up over all steps (they overlap: not time lost)",
         _seconds(w.slot_seconds)),
    ]  # fmt: skip
    rows += [(f"  starved: {_short(n)}", _seconds(s)) for s, n in w.starved[:5]]
    for why, over in w.over_pool:
        reason = {"first": "to start a compile while others ran extra steps (rule 1)",
                  "drain": "for the compiles nearest their end (rule 3)",
                  "short": "as short steps (fatbinary, as: they never wait for long ones)"}[why]  # fmt: skip
        rows.append((f"over the pool {reason}: {_plural(over.steps, 'step')} of {_plural(over.compiles, 'compile')}",
                     _seconds(over.seconds)))  # fmt: skip
    if w.memory_steps:
        rows.append((f"held back by the memory budget: {_plural(w.memory_steps, 'step')} of {_plural(w.memory_compiles, 'compile')}",
                     _seconds(w.memory_seconds)))  # fmt: skip
    if w.yielded_steps:
        rows.append((f"stopped for split steps' cores: {_plural(w.yielded_steps, 'step')}", _seconds(w.yielded_seconds)))
    if w.stopped_steps:
        rows.append((f"stopped while memory ran short: {_plural(w.stopped_steps, 'step')}", _seconds(w.stopped_seconds)))
    if w.oom_reruns:
        rows.append(("killed for memory and run again", _plural(w.oom_reruns, "step")))
    return Table(f"waiting for cores ({_plural(w.compiles, 'compile')} with fast_nvcc's wait times)", ("", "seconds"),
                 tuple(rows), "ll")  # fmt: skip


def _failed_guesses_table(failed: Sequence[FailedGuess]) -> Table:
    rows = []
    for f in failed:
        rows.append((f"{f.what}: {f.why} ({_plural(f.steps, 'step')} of {_plural(len(f.compiles), 'compile')})",
                     _seconds(f.lost)))  # fmt: skip
        rows += [(f"  {_short(name)}", _seconds(seconds)) for seconds, name in f.compiles[:5]]
    return Table("failed guesses: work thrown away and run again (fast_nvcc learns not to guess there)",
                 ("", "seconds"), tuple(rows), "ll")  # fmt: skip


def advice_tables(v: Advice) -> Iterator[Table]:
    """What to change (advice.py): the compiles that set the floor, and what split gives."""
    title = f"what to change (floor now {_seconds(v.floor)} = {_floor_terms(v)})"
    if not v.poles:
        yield Table(title, ("",), ((
            ("work-bound: no compile takes longer than the cpu work's share of the cores, so split would only add"
             " work; more cores, the cache (--cache) or fewer template instantiations lower the floor"),),), "l")  # fmt: skip
        return
    yield Table(
        title + f"; {_plural(len(v.poles), 'compile')} {'takes' if len(v.poles) == 1 else 'take'} longer than the share",
        ("#", "start (s)", "own path (s)", "cicc (s)", "ptxas (s)", "host (s)", f"split {v.threads} (s)", "source"),
        tuple(
            (str(rank), f"{p.start:.1f}", f"{p.seconds:.1f}", f"{p.cicc:.1f}", f"{p.ptxas:.1f}", f"{p.host:.1f}",
             "already split" if p.already_split else "no log" if p.split_seconds is None else f"{p.split_seconds:.1f}",
             p.source)
            for rank, p in enumerate(v.poles, start=1)
        ),
        "rrrrrrrl",
    )  # fmt: skip
    rows: list[tuple[str]] = []
    if v.split_floor is not None:
        rows += [(f"split these compiles {v.threads} ways: floor {_seconds(v.floor)} -> {_seconds(v.split_floor)}"
                  f" ({v.split_floor / v.floor:.2f} of now), {_seconds(v.split_extra_cpu)} more cpu:",),
                 (f"  {v.setting}",),
                 (f"  or fast_nvcc --split {v.threads} --split-sources '{','.join(v.sources)}'",),
                 (f"  (objects then are nvcc's with --split-compile {v.threads}; serial shares "
                  + ", ".join(f"{t} {s:.2f}, {how}" for t, s, how in v.serial) + ")",)]  # fmt: skip
        rows += _measured_rows(v)
        rows.append((_expected_row(v),))
    else:
        why = ("the longest compile is split already" if v.poles[0].already_split
               else "no log of the longest compile's steps" if v.poles[0].split_seconds is None
               else "their host side or the cpu share would still set it")  # fmt: skip
        rows.append((f"split would not lower the floor by {WORTH:.0%} or more: {why}",))
    if v.halves_floor is not None:
        rows.append((f"cutting {v.poles[0].source} into two sources instead: floor -> {_seconds(v.halves_floor)}",))
    if v.late_start is not None:
        rows.append((f"{v.poles[0].source} started {_seconds(v.late_start)} into the build and ended it: give ninja"
                     " a -j above the compile count, so that fast_nvcc sees every compile and starts the longest first",))
    if rows:
        yield Table(None, ("",), tuple(rows), "l")


def _measured_rows(v: Advice) -> list[tuple[str]]:
    """Which poles' split times come from their own source's split steps, and which from the
    build's serial shares (not measured split yet: a split build's log, appended, would tell)."""
    modelled = [p for p in v.poles if not p.already_split and p.split_seconds is not None]
    own = [p for p in modelled if p.measured]
    other = [p.source for p in modelled if not p.measured]
    rows = [(f"  measured split on their own source: {', '.join(f'{p.source} ({p.measured})' for p in own)}",)] if own else []
    if other:
        rows.append((f"  not measured split yet (the serial shares above): {', '.join(dict.fromkeys(other))}",))
    return rows


def _expected_row(v: Advice) -> str:
    """What the advised build should take: the split floor times how far the logs' split builds
    ended above theirs; without one, that this is not measured yet."""
    if v.overrun is None or v.expected is None:  # (expected is None exactly when overrun is, here)
        return ("  expect a build somewhat above that floor: no split build in these logs yet to measure how far"
                " (append the advised build's FAST_NVCC_LOG and analyze again)")  # fmt: skip
    ratio, builds = v.overrun
    if builds == 1:
        measured = f"the split build of these logs ended {ratio:.2f} × its floor"
    else:
        measured = f"the {builds} split builds of these logs ended {ratio:.2f} × their floor (median)"
    return f"  expect about {_seconds(v.expected)}: {measured}"


def _plural(count: int, noun: str) -> str:
    """``1 compile``, ``2 compiles``."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _short(name: str) -> str:
    """A job's file name without its directories (CMake's object paths run to 200 characters
    and would widen the whole table); the object names the job."""
    return os.path.basename(name.split(", ")[0])


def device_tables(a: Analysis, *, top: int) -> Iterator[Table]:
    """The build-wide --device-trace report: templates, headers, functions, per-compile split."""
    d = a.device
    if d is None:
        return
    yield Table(
        f"templates by total instantiation time ({_plural(d.compiles, 'compile')} with --device-trace; top {top})",
        ("seconds", "instantiations", "compiles", "side", "template"),
        tuple((f"{t.seconds:.3f}", str(t.instantiations), str(t.compiles), t.side, t.name) for t in d.templates[:top]),
        "rrrll",
    )
    yield Table(
        f"headers by total time (seconds over every compile that includes them; top {top})",
        ("seconds", "compiles", "side", "header"),
        tuple((f"{h.seconds:.3f}", str(h.compiles), h.side, h.name) for h in d.headers[:top]),
        "rrll",
    )
    for phase, title in (("optimize", "to optimise"), ("codegen", "to generate code for")):
        rows = [f for f in d.functions if f.phase == phase][:top]
        if rows:
            yield Table(
                f"functions costliest {title}, per architecture (top {top})",
                ("seconds", "tool", "arch", "function"),
                tuple((f"{f.seconds:.3f}", f.tool, f.arch or "", f.name) for f in rows),
                "rlll",
            )
    yield Table(
        "each compile's split (seconds: front end, optimiser, code generation; ptxas)",
        ("compile", "arch", "front end", "optimiser", "codegen", "ptxas"),
        tuple((s.job, s.arch or "", f"{s.front_end:.3f}", f"{s.optimizer:.3f}", f"{s.codegen:.3f}", f"{s.ptxas:.3f}")
              for s in d.splits),
        "llrrrr",
    )  # fmt: skip
    for w in d.what_if:
        yield Table(
            f"what-if: the instantiations of {w.pattern!r} gone (same {a.slots} slots)",
            ("", "measured", "what-if"),
            (
                ("templates matched", "", ", ".join(w.matched) or "none"),
                ("instantiation time removed", "", f"{w.seconds:.3f} s in {_plural(w.jobs, 'compile')}"),
                ("sum of job times", _seconds(a.job_seconds), _seconds(w.job_seconds)),
                ("slot floor", _seconds(a.bound.lower), _seconds(w.bound.lower)),
                ("worst order", _seconds(a.bound.upper), _seconds(w.bound.upper)),
            ),
            "lrr",
        )


def _phase_table(title: str, phases: Sequence[PhaseTotal]) -> Table:
    total = sum(p.seconds for p in phases) or 1.0
    with_arch = any(p.arch for p in phases)
    return Table(
        title,
        ("phase",)
        + (("arch",) if with_arch else ())
        + ("seconds", "cpu seconds", "steps", "share"),
        tuple(
            (p.kind,)
            + ((p.arch or "",) if with_arch else ())
            + (f"{p.seconds:.2f}", f"{p.cpu_seconds:.2f}", str(p.steps), f"{p.seconds / total:.0%}")
            for p in phases
        ),
        ("ll" if with_arch else "l") + "rrrr",
    )


def _source_line(build: Build) -> str:
    parts = []
    if build.ninja_log:
        parts.append(
            f"{build.ninja_log} (ninja log v{build.ninja_version}, build {build.index} of {build.count}{_started(build)})"
        )
        if build.fast_nvcc_logs:
            parts.append(f"joined with {', '.join(build.fast_nvcc_logs)}")
    else:
        parts.append(f"{', '.join(build.fast_nvcc_logs)} (build {build.index} of {build.count}{_started(build)})")
    return " ".join(parts)


def _started(build: Build) -> str:
    """When the chosen build's first compile started, where the logs hold several builds: builds
    are numbered by time, not by their place in the files (logs of two machines appended)."""
    times = [record.time for record in build.records]
    if build.count < 2 or not times:
        return ""
    return f", started {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(min(times)))}"


def _jobs_note(build: Build) -> str:
    others = _plural(build.unjoined, 'fast_nvcc record')
    if build.ninja_log and build.fast_nvcc_logs:
        return f"{len(build.jobs)} ({len(build.records)} with fast_nvcc steps; {others} not in this build)"
    if build.ninja_log:
        return str(len(build.jobs))
    return f"{_plural(len(build.jobs), 'fast_nvcc compile')} ({others} of other builds)"


def _unchanged_note(build: Build) -> str | None:
    """The compiles fast_nvcc passed to nvcc whole, by reason (None: none did): deliberate ones
    (a --version, FAST_NVCC_DISABLE) and failures alike (a Python without psutil: every compile
    of the build at nvcc's speed, and only FAST_NVCC_LOG saying so)."""
    reasons = Counter(r.reason or "no reason logged" for r in build.records if r.mode == "passthrough")
    if not reasons:
        return None
    total = sum(reasons.values())
    return (f"{total} of {_plural(len(build.records), 'compile')}: "
            + "; ".join(f"{reason} ({count})" for reason, count in reasons.most_common()))  # fmt: skip


def _longest_step(job: Job) -> str:
    if job.record is None or not job.record.steps:
        return ""
    steps = [s for s in job.record.steps if s.tool not in BOOKKEEPING_TOOLS]
    if not steps:
        return ""
    step = max(steps, key=lambda s: s.seconds)
    return f"{step.tool}{' ' + step.arch if step.arch else ''} {step.seconds:.2f} s"


def _seconds(value: float) -> str:
    if value < 120:
        return f"{value:.2f} s"
    minutes, seconds = divmod(round(value), 60)
    hours, minutes = divmod(minutes, 60)
    clock = f"{hours}h{minutes:02d}m{seconds:02d}s" if hours else f"{minutes}m{seconds:02d}s"
    return f"{value:.2f} s ({clock})"


def _text_table(table: Table) -> Iterator[str]:
    rows = table.rows if table.keys else (table.headers, *table.rows)
    widths = [max(len(row[i]) for row in rows) for i in range(len(table.align))]
    for row in rows:
        cells = (
            c.rjust(w) if a == "r" else c.ljust(w) for c, w, a in zip(row, widths, table.align)
        )
        yield ("  " + "  ".join(cells)).rstrip()


def _markdown_table(table: Table) -> Iterator[str]:
    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"

    yield line(table.headers)
    yield "|" + "|".join("---:" if a == "r" else "---" for a in table.align) + "|"
    yield from (line(row) for row in table.rows)
