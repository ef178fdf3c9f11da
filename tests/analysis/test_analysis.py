"""fast_nvcc analyze: ninja logs (v5, v6, v7, several builds), FAST_NVCC_LOG, the bound and its
what-if, the reports, and a real CMake + Ninja build of examples/cmake."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fast_nvcc import analysis
from fast_nvcc.analysis import advice
from fast_nvcc.plan.split_option import matches, settings, with_split
from fast_nvcc.analysis import (
    Bound,
    Job,
    NinjaEntry,
    WhatIfRule,
    analyze,
    apply_what_if,
    assign_slots,
    build_jobs,
    load_build,
    max_concurrency,
    nice_interval,
    parse_fast_nvcc_log,
    parse_ninja_log,
    split_builds,
    trace_events,
    wall_bound,
)

DATA = Path(__file__).parent.parent / "data" / "ninja_logs"
EXAMPLE = Path(__file__).parent.parent.parent / "examples" / "cmake"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def ninja_log(entries, *, version: int = 5) -> str:
    """A .ninja_log of (start_ms, end_ms, output[, hash]) in the order given."""
    lines = [f"# ninja log v{version}"]
    for number, (start, end, output, *rest) in enumerate(entries):
        command_hash = rest[0] if rest else f"{number:016x}"
        mtime = 1_700_000_000_000_000_000 + end
        lines.append(f"{start}\t{end}\t{mtime}\t{output}\t{command_hash}")
    return "\n".join(lines) + "\n"


def log_record(time, wall, outputs, steps=(), *, cwd="/b"):
    """A FAST_NVCC_LOG line as fast_nvcc writes it (reports.log_record)."""
    return {
        "version": 1, "time": time, "host": "h", "pid": 1, "cwd": cwd, "nvcc": "nvcc", "args": [],
        "sources": [], "outputs": list(outputs), "exit_code": 0, "wall_seconds": wall, "mode": "dag",
        "jobs": 4, "critical_path_seconds": wall,
        "steps": [
            {"index": i, "tool": tool, "kind": kind, "arch": arch, "start": start, "end": start + seconds,
             "seconds": seconds, "cpu_seconds": seconds, "max_rss_kb": 1, "exit_code": 0,
             "state": "done", "critical": False}
            for i, (tool, kind, arch, start, seconds) in enumerate(steps)
        ],
    }  # fmt: skip


def write_jsonl(path: Path, records) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def run_main(capsys, *argv):
    code = analysis.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def check_trace(events) -> list[dict]:
    """What Perfetto and chrome://tracing need, and that each lane's spans nest."""
    for event in events:
        assert {"name", "ph", "pid", "tid"} <= set(event)
        assert isinstance(event["pid"], int) and isinstance(event["tid"], int)
        if event["ph"] == "X":
            assert isinstance(event["ts"], (int, float)) and event["ts"] >= 0
            assert isinstance(event["dur"], (int, float)) and event["dur"] >= 0
        else:
            assert event["ph"] == "M" and event["name"] in (
                "process_name",
                "thread_name",
                "thread_sort_index",
            )
    spans = [e for e in events if e["ph"] == "X"]
    named = {e["tid"] for e in events if e["name"] == "thread_name"}
    by_lane: dict[int, list[dict]] = {}
    for span in spans:
        assert span["tid"] in named
        by_lane.setdefault(span["tid"], []).append(span)
    for lane in by_lane.values():
        open_ends: list[float] = []
        for span in sorted(lane, key=lambda e: (e["ts"], -e["dur"])):
            while open_ends and open_ends[-1] <= span["ts"]:
                open_ends.pop()
            end = span["ts"] + span["dur"]
            assert not open_ends or end <= open_ends[-1], f"{span['name']} overlaps its lane"
            open_ends.append(end)
    return spans


# -- the ninja log -------------------------------------------------------------------------------


@pytest.mark.parametrize("version", [5, 6, 7])
def test_synthetic_log_by_hand(version, capsys):
    # a [0,1] b [0,2] c [0.5,1.5] d [2,4] (d.o and d.h: one edge).  wall 4, sum 1+2+1+2 = 6.
    path = DATA / f"v{version}.ninja_log"
    build = load_build([str(path)])
    assert build.ninja_version == version and (build.index, build.count) == (1, 1)
    assert sorted(job.name for job in build.jobs) == ["a.o", "b.o", "c.o", "d.o, d.h"]
    result = analyze(build, interval=1.0)
    assert result.wall == 4.0 and result.job_seconds == 6.0 and result.parallelism == 1.5
    # a, b and c overlap in [0.5, 1): three at once, so three slots when -j is not given.
    assert (result.max_concurrency, result.slots, result.slots_given) == (3, 3, False)
    # At t=1 a has just ended; at t=2 b has ended and d started.  Means: [0,1] a+b+half of c.
    assert [(r.time, r.running, r.mean) for r in result.profile] == [
        (0.0, 2, 2.5), (1.0, 2, 1.5), (2.0, 1, 1.0), (3.0, 1, 1.0),
    ]  # fmt: skip
    assert result.bound == Bound(lower=max(2.0, 6 / 3), upper=(6 - 2) / 3 + 2)
    assert analyze(build, slots=2).bound == Bound(lower=3.0, upper=4.0)

    code, out, _ = run_main(capsys, path, "--format", "json", "-j", "2", "--interval", "1")
    report = json.loads(out)
    assert code == 0
    assert (report["wall_seconds"], report["job_seconds"], report["parallelism"]) == (4.0, 6.0, 1.5)
    assert (report["slots"], report["slots_source"], report["parallelism_share"]) == (
        2,
        "option",
        0.75,
    )
    assert [row["running"] for row in report["profile"]["rows"]] == [2, 2, 1, 1]


@pytest.mark.parametrize(
    ("build", "wall", "jobs"),
    [
        (-1, 9.0, {"a.o": 9.0}),  # a.o again: a new build, though its end time went up
        (3, 9.0, {"a.o": 9.0}),
        (-2, 1.7, {"a.o": 1.5, "app": 0.2}),  # an end time went down: the incremental build
        (2, 1.7, {"a.o": 1.5, "app": 0.2}),
        (1, 4.0, {"a.o": 1.0, "b.o": 3.0, "app": 1.0}),
    ],
)
def test_several_builds_in_one_log(build, wall, jobs):
    result = analyze(load_build([str(DATA / "builds.ninja_log")], build=build))
    assert result.build.count == 3
    assert result.wall == pytest.approx(wall)
    assert {job.name: round(job.seconds, 6) for job in result.build.jobs} == jobs


def test_split_builds_keeps_the_newest_entry_of_each_output():
    entries = [
        NinjaEntry(0, 10, "a", "1"),
        NinjaEntry(0, 20, "b", "2"),
        NinjaEntry(0, 30, "a", "3"),
    ]
    builds = split_builds(entries)
    assert [[e.output for e in b] for b in builds] == [["a", "b"], ["a"]]
    assert builds[-1][0].command_hash == "3"


def test_outputs_of_one_edge_are_one_job():
    entries = [
        NinjaEntry(5, 10, "x.h", "h"),
        NinjaEntry(5, 10, "x.cc", "h"),
        NinjaEntry(5, 10, "y", "other"),
    ]
    jobs = build_jobs(entries)
    assert sorted(job.outputs for job in jobs) == [("x.h", "x.cc"), ("y",)]
    assert all(job.start == 0 and job.end == 0.005 for job in jobs)


@pytest.mark.parametrize(
    ("text", "outputs"),
    [
        ("# ninja log v5\n0\t1\t0\ta b\th\n", ["a b"]),  # spaces in an output
        (
            "# ninja log v5\n0\t1\t0\ta\th\n# ninja log v5\n1\t2\t0\tb\th2\n",
            ["a", "b"],
        ),  # a header again
        (
            "# ninja log v5\n0\t1\t0\ta\th\n\n1\t2\t0\tb\th2",
            ["a", "b"],
        ),  # no newline at the end, but whole
        ("# ninja log v5\n0\t1\t0\ta\th\n1\t2", ["a"]),  # a last line cut short
        ("# ninja log v6\r\n0\t1\t0\ta\th\r\n", ["a"]),
    ],
)
def test_parse_ninja_log(text, outputs):
    _, entries = parse_ninja_log(io.StringIO(text, newline=""))
    assert [e.output for e in entries] == outputs


# -- the bound and the what-if ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("durations", "slots", "lower", "upper"),
    [
        ([10.0], 4, 10.0, 10.0),
        ([1.0] * 8, 4, 2.0, 2.75),  # (8 - 1) / 4 + 1
        ([100.0] + [1.0] * 100, 10, 100.0, 110.0),
        ([3.0, 3.0, 3.0], 1, 9.0, 9.0),  # one slot: the sum, both ways
        ([], 4, 0.0, 0.0),
    ],
)
def test_wall_bound(durations, slots, lower, upper):
    assert wall_bound(durations, slots=slots) == Bound(lower, upper)


def long_pole_log(tmp_path: Path) -> Path:
    """One 100 s job and 100 jobs of 1 s on the other 9 of 10 slots, in ninja's end order."""
    entries = [(0, 100_000, "CMakeFiles/te.dir/activation/pole.cu.o")]
    entries += [
        ((k // 9) * 1000, (k // 9) * 1000 + 1000, f"CMakeFiles/te.dir/small/s{k}.cu.o")
        for k in range(100)
    ]
    path = tmp_path / ".ninja_log"
    path.write_text(ninja_log(sorted(entries, key=lambda e: e[1])))
    return path


def test_what_if_on_one_long_pole(tmp_path, capsys):
    build = load_build([str(long_pole_log(tmp_path))])
    rules = [WhatIfRule("activation/*", 0.0)]
    result = analyze(build, slots=10, what_if=rules)
    assert result.wall == 100.0 and result.job_seconds == 200.0
    assert result.bound.lower == 100.0  # max(100, 200 / 10)
    # With the pole at 0 s: max(1, 100 / 10) = 10; list scheduling: (100 - 1) / 10 + 1.
    assert result.what_if.bound == Bound(10.0, 10.9)
    assert result.what_if.rules == ((rules[0], 1),) and result.what_if.job_seconds == 100.0
    pole, second = result.long_poles[:2]
    assert pole.job.seconds == 100.0 and pole.floor_without == 10.0
    assert second.job.seconds == 1.0 and second.floor_without == 100.0  # max(100, 199 / 10)

    code, out, _ = run_main(
        capsys,
        tmp_path,
        "-j",
        "10",
        "--what-if",
        "activation/*=0",
        "--top",
        "3",
        "--format",
        "json",
    )
    report = json.loads(out)
    assert code == 0 and report["bound"]["lower_seconds"] == 100.0
    assert (
        report["what_if"]["lower_seconds"] == 10.0 and report["what_if"]["rules"][0]["matched"] == 1
    )
    assert [p["floor_drop_seconds"] for p in report["long_poles"]] == [90.0, 0.0, 0.0]


@pytest.mark.parametrize(
    ("pattern", "matched"),
    [
        ("activation/*", ["CMakeFiles/te.dir/activation/gelu.cu.o"]),  # after any '/'
        ("*.cu.o", ["CMakeFiles/te.dir/activation/gelu.cu.o", "CMakeFiles/te.dir/norm/ln.cu.o"]),
        ("ln.cu.o", ["CMakeFiles/te.dir/norm/ln.cu.o"]),
        ("CMakeFiles/te.dir/norm/*", ["CMakeFiles/te.dir/norm/ln.cu.o"]),
        ("tivation/*", []),  # whole path components only
        ("/build/libte.so", ["libte.so"]),  # absolute: against the absolute path
    ],
)
def test_what_if_patterns(pattern, matched):
    jobs = [
        Job((name,), 0.0, 1.0)
        for name in (
            "CMakeFiles/te.dir/activation/gelu.cu.o",
            "CMakeFiles/te.dir/norm/ln.cu.o",
            "libte.so",
        )
    ]
    result = apply_what_if(jobs, [WhatIfRule(pattern, 0.0)], slots=1, build_dir="/build")
    assert result.rules[0][1] == len(matched)
    assert result.job_seconds == 3.0 - len(matched)


def test_absolute_patterns_without_a_ninja_log():
    record = parse_fast_nvcc_log(
        [json.dumps(log_record(0.0, 2.0, ["/src/build/k.o"], cwd="/src/build"))]
    ).__next__()
    jobs = [Job(("k.o",), 0.0, 2.0, record)]
    assert apply_what_if(jobs, [WhatIfRule("/src/*/k.o", 0.0)], slots=1).job_seconds == 0.0


def test_the_last_matching_rule_wins():
    jobs = [Job(("a.o",), 0.0, 10.0), Job(("b.o",), 0.0, 10.0)]
    result = apply_what_if(jobs, [WhatIfRule("*.o", 1.0), WhatIfRule("b.o", 5.0)], slots=2)
    assert result.job_seconds == 6.0 and [n for _, n in result.rules] == [2, 1]


@pytest.mark.parametrize(
    ("wall", "interval"),
    [(4.87, 0.5), (6.0, 0.5), (100.0, 5.0), (15706.0, 1000.0), (20.0, 1.0), (0.0, 1.0), (3600.0, 200.0)],
)
def test_nice_interval(wall, interval):
    assert nice_interval(wall) == pytest.approx(interval)


@pytest.mark.parametrize(
    ("spans", "peak", "slots"),
    [
        ([(0, 1), (1, 2), (2, 3)], 1, [0, 0, 0]),  # back to back: one slot
        ([(0, 2), (1, 3), (2, 4)], 2, [0, 1, 0]),
        ([(0, 4), (0, 1), (1, 2), (0, 3)], 3, [0, 2, 2, 1]),  # ties: the longer job first
        ([(0, 0), (0, 0)], 0, [0, 0]),
    ],
)
def test_concurrency_and_slots(spans, peak, slots):
    jobs = [Job((f"j{i}",), float(s), float(e)) for i, (s, e) in enumerate(spans)]
    assert max_concurrency(sorted(j.start for j in jobs), sorted(j.end for j in jobs)) == peak
    assert assign_slots(jobs) == slots


# -- FAST_NVCC_LOG ---------------------------------------------------------------------------------

STEPS = [
    ("gcc -E", "preprocess", "compute_90", 0.0, 1.0),
    ("cicc", "cicc", "compute_90", 1.0, 4.0),
    ("check module_id", "cicc", "compute_90", 5.0, 0.5),  # bookkeeping: left out
    ("ptxas", "ptxas", "sm_90", 5.0, 2.0),
    ("ptxas", "ptxas", "sm_100a", 5.0, 6.0),
    ("cudafe++", "cudafe++", None, 1.0, 3.0),
    ("gcc -c", "host-compile", None, 11.0, 2.0),
]


def test_fast_nvcc_log_alone(tmp_path, capsys):
    # Two compiles of 13 s one build, then, after more than a quiet minute, a second build.
    log = write_jsonl(tmp_path / "log.jsonl", [
        log_record(1000.0, 13.0, ["/b/a.o", "/b/a.o.d"], STEPS),
        log_record(1005.0, 13.0, ["/b/b.o"], STEPS),
        log_record(2000.0, 2.0, ["/b/a.o"], [("gcc -c", "host-compile", None, 0.0, 2.0)]),
    ])  # fmt: skip
    last = analyze(load_build([str(log)]))
    assert (last.build.index, last.build.count, last.build.unjoined) == (2, 2, 2)
    assert last.wall == 2.0 and [job.name for job in last.build.jobs] == ["a.o"]

    first = analyze(load_build([str(log)], build=1))
    assert first.wall == 18.0 and first.job_seconds == 26.0 and first.max_concurrency == 2
    phases = {p.kind: (p.seconds, p.steps) for p in first.phases}
    assert phases == {
        "ptxas": (16.0, 4),
        "cicc": (8.0, 2),
        "cudafe++": (6.0, 2),
        "host-compile": (4.0, 2),
        "preprocess": (2.0, 2),
    }
    by_arch = [(p.kind, p.arch, p.seconds) for p in first.arch_phases]
    assert by_arch == [
        ("ptxas", "sm_100a", 12.0),
        ("cicc", "compute_90", 8.0),
        ("ptxas", "sm_90", 4.0),
        ("preprocess", "compute_90", 2.0),
    ]

    code, out, _ = run_main(capsys, log, "--build", "1")
    assert code == 0
    assert "ptxas       sm_100a       12.00" in out and "a.o, a.o.d" in out


def test_compiles_passed_to_nvcc_whole_are_counted_by_reason(tmp_path, capsys):
    """A Python without psutil passes every compile to nvcc whole (FAST_NVCC_LOG's mode
    passthrough, with its reason): the report says how many and why, the JSON each one's reason."""
    unchanged = [{**log_record(1000.0 + n, 10.0, []), "mode": "passthrough", "steps": [],
                  "reason": "cannot build the graph: ModuleNotFoundError(\"No module named 'psutil'\")"}
                 for n in range(2)]  # fmt: skip
    version = {**log_record(1003.0, 0.1, []), "mode": "passthrough", "steps": [], "reason": "prints nvcc's version"}
    log = write_jsonl(tmp_path / "log.jsonl", [*unchanged, version, log_record(1004.0, 13.0, ["/b/a.o"], STEPS)])
    code, out, _ = run_main(capsys, log)
    assert code == 0
    line = next(line for line in out.splitlines() if "ran as plain nvcc" in line)
    assert ("3 of 4 compiles: cannot build the graph: ModuleNotFoundError(\"No module named 'psutil'\") (2);"
            " prints nvcc's version (1)") in line  # fmt: skip
    code, out, _ = run_main(capsys, log, "--format", "json")
    reasons = [c["reason"] for c in json.loads(out)["compiles"]]
    assert sorted(reasons) == ["", *[unchanged[0]["reason"]] * 2, "prints nvcc's version"]
    code, out, _ = run_main(capsys, write_jsonl(tmp_path / "dag.jsonl", [log_record(1004.0, 13.0, ["/b/a.o"], STEPS)]))
    assert "ran as plain nvcc" not in out  # none did: no line


def test_builds_count_by_time_not_by_file_order(tmp_path, capsys):
    """Logs of two machines given newest first (an exact build's log, then the log of a split
    build run earlier elsewhere): --build 1 is the earlier build, and the banner says when it
    started, so that the choice can be seen."""
    newer = write_jsonl(tmp_path / "exact.jsonl", [log_record(5000.0, 13.0, ["/b/a.o"], STEPS)])
    older = write_jsonl(tmp_path / "split.jsonl", [log_record(1000.0, 2.0, ["/b/a.o"], STEPS[:1])])
    code, out, _ = run_main(capsys, newer, older, "--build", "1")
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(1000.0))
    assert code == 0 and f"(build 1 of 2, started {started})" in out.splitlines()[0]
    assert analyze(load_build([str(newer), str(older)], build=1)).wall == 2.0
    code, out, _ = run_main(capsys, newer)
    assert code == 0 and "(build 1 of 1)" in out.splitlines()[0]


def test_parse_fast_nvcc_log_skips_blank_lines():
    text = "\n" + json.dumps(log_record(1.0, 2.0, ["/x.o"])) + "\n\n"
    records = list(parse_fast_nvcc_log(io.StringIO(text)))
    assert len(records) == 1 and records[0].outputs == ("/x.o",)


# .ninja_log and FAST_NVCC_LOG of builds of examples/cmake with fast_nvcc as the launcher (nvcc
# 13.0, -j 2), by ninja 1.11.1 (log v5) and by ninja 1.13.0 from PyPI (log v7); the build
# directory's path is @EXAMPLE@/build in the log.
EXAMPLES = ["example-v5", "example-v7"]


def example_build(tmp_path: Path, example: str = EXAMPLES[0]) -> Path:
    """The example's logs moved under tmp_path: returns the build directory."""
    build = tmp_path / "example" / "build"
    build.mkdir(parents=True)
    shutil.copy(DATA / example / ".ninja_log", build / ".ninja_log")
    text = (DATA / example / "fast_nvcc_log.jsonl").read_text()
    (tmp_path / "log.jsonl").write_text(
        text.replace("@EXAMPLE@", str(tmp_path.resolve() / "example"))
    )
    return build


@pytest.mark.parametrize("example", EXAMPLES)
def test_join_with_fast_nvcc_log(tmp_path, capsys, example):
    build_dir = example_build(tmp_path, example)
    build = load_build([str(build_dir), str(tmp_path / "log.jsonl")])
    assert build.ninja_version == int(example[-1])
    assert len(build.jobs) == 9 and build.unjoined == 0
    joined = sorted(job.name for job in build.jobs if job.record is not None)
    assert len(joined) == 5 and all(name.endswith(".cu.o") for name in joined)
    for job in build.jobs:
        if job.record is not None:
            assert job.record.outputs[0] == str(build_dir.resolve() / job.outputs[0])
            assert 0 < job.steps_origin < job.seconds

    code, out, _ = run_main(
        capsys,
        build_dir,
        tmp_path / "log.jsonl",
        "--trace",
        tmp_path / "t.json",
        "--format",
        "json",
    )
    assert code == 0
    report = json.loads(out)
    assert report["joined"] == 5 and report["jobs"] == 9
    assert {"cicc", "ptxas", "cudafe++", "host-compile"} <= {p["kind"] for p in report["phases"]}
    spans = check_trace(json.loads((tmp_path / "t.json").read_text())["traceEvents"])
    assert sum(1 for s in spans if s["cat"] == "job") == 9
    assert {s["cat"] for s in spans} >= {"job", "cicc", "ptxas", "cudafe++"}


def test_a_record_of_another_build_is_not_joined(tmp_path):
    build_dir = tmp_path / "b"
    build_dir.mkdir()
    (build_dir / ".ninja_log").write_text(
        ninja_log([(0, 3000, "x.o"), (0, 3000, "y.o"), (0, 3000, "z.o")])
    )
    real = str(build_dir.resolve())
    log = write_jsonl(tmp_path / "log.jsonl", [
        log_record(5000.0, 2.5, [f"{real}/x.o"]),
        log_record(5000.1, 2.5, [f"{real}/y.o"]),
        log_record(10.0, 2.5, [f"{real}/z.o"]),  # hours before: the object's previous compile
        log_record(5000.0, 9.0, [f"{real}/unrelated.o"]),
    ])  # fmt: skip
    build = load_build([str(build_dir), str(log)])
    assert sorted(job.name for job in build.jobs if job.record is not None) == ["x.o", "y.o"]
    assert build.unjoined == 2


def test_trace_nests_overlapping_steps_on_lanes_below():
    record = parse_fast_nvcc_log([json.dumps(log_record(0.0, 13.0, ["/b/a.o"], STEPS))]).__next__()
    jobs = (Job(("a.o",), 0.0, 14.0, record), Job(("b.o",), 0.0, 1.0), Job(("c.o",), 2.0, 3.0))
    events = trace_events(analysis.Build(jobs))
    spans = check_trace(events)
    steps = [s for s in spans if s["cat"] != "job"]
    assert len(steps) == 6  # check module_id left out
    assert all(
        1_000_000 <= s["ts"] and s["ts"] + s["dur"] <= 14_000_000 for s in steps
    )  # 1 s: 14 - 13
    lanes = {e["tid"]: e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert lanes[1] == "slot 1" and lanes[2] == "slot 2"
    assert {lanes[s["tid"]] for s in steps} == {"slot 1", "slot 1 steps 2"}


# -- the reports -----------------------------------------------------------------------------------


def test_text_and_markdown(tmp_path, capsys):
    build_dir = example_build(tmp_path)
    code, text, _ = run_main(
        capsys, build_dir, tmp_path / "log.jsonl", "--top", "3", "--what-if", "saxpy.cu.o=0"
    )
    assert code == 0
    for needle in (
        "wall",
        "effective parallelism",
        "concurrency",
        "long poles (top 3",
        "what-if",
        "time per phase",
        "sm_80",
    ):
        assert needle in text
    code, markdown, _ = run_main(capsys, build_dir, tmp_path / "log.jsonl", "--format", "markdown")
    assert code == 0 and markdown.startswith("# fast_nvcc analyze")
    assert "## Long poles (top 9;" in markdown and "| # | start (s) |" in markdown
    assert "|---:|" in markdown and "## Time per phase and architecture" in markdown


@pytest.mark.parametrize(("suffix", "magic"), [("png", PNG_MAGIC), ("svg", b"<?xml")])
def test_plot(tmp_path, capsys, suffix, magic):
    pytest.importorskip("matplotlib")
    plot = tmp_path / f"jobs.{suffix}"
    code, _, err = run_main(capsys, DATA / "v5.ninja_log", "--plot", plot)
    assert code == 0, err
    data = plot.read_bytes()
    assert data.startswith(magic)
    if suffix == "svg":
        assert b"<svg" in data[:1000]


def test_plot_without_matplotlib(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    code, out, err = run_main(capsys, DATA / "v5.ninja_log", "--plot", tmp_path / "p.png")
    assert (code, out) == (2, "")
    assert err == "fast_nvcc: error: --plot needs matplotlib (pip install 'fast_nvcc[plot]')\n"


# -- errors ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "args", "message"),
    [
        (None, ["missing.log"], "No such file"),
        ("", ["log"], "empty file"),
        ("hello\n", ["log"], "neither a .ninja_log nor a FAST_NVCC_LOG"),
        ("# ninja log v4\n0 1 0 a cmd\n", ["log"], "ninja log v4 is not a format"),
        ("# ninja log v8\n", ["log"], "ninja log v8 is not a format"),
        ("# ninja log vX\n", ["log"], "unreadable ninja log header"),
        ("# ninja log v5\n", ["log"], "no build"),
        (
            "# ninja log v5\n0\t1\t0\ta\th\nnot an entry\n2\t3\t0\tb\th\n",
            ["log"],
            "log:3: not a ninja log entry",
        ),
        ("# ninja log v5\nx\t1\t0\ta\th\n", ["log"], "log:2: not a ninja log entry"),
        ('{"version": 1\n', ["log"], "log:1: not a JSON line"),
        (
            '{"version": 2, "time": 0, "wall_seconds": 1, "outputs": []}\n',
            ["log"],
            "schema version 2",
        ),
        ('{"version": 1, "time": 0}\n', ["log"], "no field 'wall_seconds'"),
        (ninja_log([(0, 1, "a")]), ["log", "--build", "2"], "--build 2: log holds 1 build"),
        (ninja_log([(0, 1, "a")]), ["log", "--build", "0"], "builds count from 1"),
        (ninja_log([(0, 1, "a")]), ["log", "log"], "one .ninja_log at a time"),
        (ninja_log([(0, 1, "a")]), ["log", "-j", "0"], "must be at least 1"),
        (ninja_log([(0, 1, "a")]), ["log", "--what-if", "a.o"], "use PATTERN=SECONDS"),
        (ninja_log([(0, 1, "a")]), ["log", "--what-if", "a.o=soon"], "is not a number of seconds"),
        (ninja_log([(0, 1, "a")]), ["log", "--what-if", "a.o=-1"], "seconds must be 0 or more"),
        (ninja_log([(0, 1, "a")]), ["log", "--interval", "0"], "must be more than 0"),
        (ninja_log([(0, 1000, "a")]), ["log", "--interval", "0.000001"], "take a larger one"),
        (ninja_log([(0, 1, "a")]), ["log", "--format", "html"], "invalid choice"),
        (ninja_log([(0, 1, "a")]), ["log", "--plot", "p.gif"], "use .png, .svg, .pdf"),
        (
            ninja_log([(0, 1, "a")]),
            ["log", "--trace", "no/such/dir/t.json"],
            "cannot write no/such/dir/t.json",
        ),
        (ninja_log([(0, 1, "a")]), ["log", "--write-split", "no/such/dir/s.txt"], "cannot write no/such/dir/s.txt"),
        (ninja_log([(0, 1, "a")]), ["log", "--bogus"], "unrecognized arguments"),
        (None, ["."], "a directory without a .ninja_log"),
    ],
)
def test_errors_are_one_line(tmp_path, monkeypatch, capsys, content, args, message):
    monkeypatch.chdir(tmp_path)
    if content is not None:
        (tmp_path / "log").write_text(content)
    code, out, err = run_main(capsys, *args)
    assert (code, out) == (2, "")
    assert err.startswith("fast_nvcc: error: ") and err.count("\n") == 1 and message in err, err


def test_through_the_fast_nvcc_command(tmp_path):
    ok = subprocess.run(
        [sys.executable, "-m", "fast_nvcc", "analyze", str(DATA / "v6.ninja_log"), "--format", "json"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert ok.returncode == 0 and json.loads(ok.stdout)["wall_seconds"] == 4.0
    bad = subprocess.run(
        [sys.executable, "-m", "fast_nvcc", "analyze", str(tmp_path / "nothing")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert bad.returncode == 2 and bad.stdout == "" and bad.stderr.count("\n") == 1
    assert bad.stderr.startswith("fast_nvcc: error: ") and "Traceback" not in bad.stderr


# -- a large log -----------------------------------------------------------------------------------


def test_a_log_of_100k_entries(tmp_path):
    # 1000 waves of 100 one-second jobs at -j 100, one 50 s job instead in slot 0 of the first
    # 50 waves; written in ninja's end order.
    entries = [(0, 50_000, "pole/p.o")]
    entries += [
        (wave * 1000, wave * 1000 + 1000, f"d{slot % 10}/w{wave}s{slot}.o")
        for wave in range(1000)
        for slot in range(100)
        if not (slot == 0 and wave < 50)
    ]
    assert len(entries) == 100_000 - 49
    path = tmp_path / ".ninja_log"
    path.write_text(ninja_log(sorted(entries, key=lambda e: e[1]), version=7))

    build = load_build([str(path)])
    result = analyze(build, interval=100.0, what_if=[WhatIfRule("pole/*", 1.0)])
    assert len(build.jobs) == len(entries)
    assert result.wall == 1000.0 and result.job_seconds == 100_000 - 50 + 50
    assert result.max_concurrency == result.slots == 100 and result.parallelism == 100.0
    assert [(r.running, r.mean) for r in result.profile] == [(100, 100.0)] * 10
    assert result.bound == Bound(1000.0, (100_000 - 50) / 100 + 50)
    assert (
        result.long_poles[0].job.name == "pole/p.o" and result.long_poles[0].floor_without == 999.5
    )
    assert result.what_if.bound.lower == (100_000 - 49) / 100
    spans = [e for e in trace_events(build) if e["ph"] == "X"]
    assert len(spans) == len(entries) and max(e["tid"] for e in spans) == 100


# -- a real build ----------------------------------------------------------------------------------


def launcher() -> str:
    """The installed console script, as a user would name it; else python -m fast_nvcc (as in
    test_cmake.py)."""
    script = Path(sys.executable).parent / "fast_nvcc"
    return str(script) if script.exists() else f"{sys.executable};-m;fast_nvcc"


@pytest.mark.one_toolchain  # the analysis reads logs, not objects
@pytest.mark.nvcc
@pytest.mark.cmake
def test_analyze_a_real_cmake_ninja_build(nvcc, tmp_path, capsys):
    for tool in ("cmake", "ninja"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed")
    source, build_dir, log = tmp_path / "example", tmp_path / "build", tmp_path / "log.jsonl"
    shutil.copytree(EXAMPLE, source)
    subprocess.run(
        ["cmake", "-S", str(source), "-B", str(build_dir), "-G", "Ninja", f"-DCMAKE_CUDA_COMPILER={nvcc}",
         f"-DCMAKE_CUDA_COMPILER_LAUNCHER={launcher()}"],
        check=True, capture_output=True,
    )  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAST_NVCC_")}
    proc = subprocess.run(
        ["cmake", "--build", str(build_dir), "-j", "2"], env={**env, "FAST_NVCC_LOG": str(log)},
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr

    trace = tmp_path / "trace.json"
    code, out, err = run_main(capsys, build_dir, log, "--format", "json", "--trace", trace)
    assert code == 0, err
    report = json.loads(out)
    assert report["sources"]["ninja_log_version"] in (5, 6, 7)
    assert report["unjoined_records"] == 0
    compiles = report["compiles"]
    assert sorted(Path(c["outputs"][0]).name for c in compiles) == [
        "forces.cu.o", "main.cu.o", "particles.cu.o", "reduce.cu.o", "saxpy.cu.o",
    ]  # fmt: skip
    for compile_ in compiles:
        assert compile_["steps"] > 0 and compile_["exit_code"] == 0
        assert compile_["fast_nvcc_wall_seconds"] <= compile_["seconds"] + 0.005
    assert {"cicc", "ptxas", "cudafe++"} <= {p["kind"] for p in report["phases"]}
    assert all(p["arch"] for p in report["phases_by_arch"])
    assert report["jobs"] > 5 and 0 < report["parallelism"] <= report["max_concurrency"] + 1e-6
    spans = check_trace(json.loads(trace.read_text())["traceEvents"])
    jobs = [s for s in spans if s["cat"] == "job"]
    assert len(jobs) == report["jobs"] and max(s["tid"] for s in jobs) == report["max_concurrency"]


def test_waiting_for_slots_across_the_build(tmp_path, capsys):
    """B waits 3 s for its first step while A runs two steps at once: a starved compile, as the
    build-wide schedule (docs/scheduling.md) should never let happen; C waits alone."""
    two_at_once = [("cicc", "cicc", "compute_80", 0.0, 5.0), ("cicc", "cicc", "compute_90", 0.0, 5.0)]
    a = log_record(1000.0, 5.0, ["/b/a.o"], two_at_once)
    b = log_record(1001.0, 5.0, ["/b/b.o"], [("cicc", "cicc", "compute_80", 3.0, 2.0)])
    c = log_record(1010.0, 3.0, ["/b/c.o"], [("cicc", "cicc", "compute_80", 1.0, 2.0)])
    old = log_record(1011.0, 1.0, ["/b/d.o"], [("cicc", "cicc", "compute_80", 0.0, 1.0)])  # no wait fields
    for record, first, total in ((a, 0.0, 0.0), (b, 3.0, 3.0), (c, 1.0, 1.5)):
        record.update(first_step_wait_seconds=first, slot_wait_seconds=total)
    a["steps"][1]["over_pool"] = "drain"
    b["steps"][0]["over_pool"] = "first"
    c["steps"][0]["over_pool"] = "first"
    log = write_jsonl(tmp_path / "log.jsonl", [a, b, c, old])
    waiting = analyze(load_build([str(log)])).waiting
    assert waiting.compiles == 3 and waiting.first_step_seconds == 4.0 and waiting.slot_seconds == 4.5
    assert waiting.worst_first_step == (3.0, "b.o") and waiting.starved == ((3.0, "b.o"),)
    code, out, _ = run_main(capsys, log, "--format", "json")
    assert code == 0 and json.loads(out)["waiting"]["starved"] == [{"seconds": 3.0, "output": "b.o"}]
    assert json.loads(out)["waiting"]["over_pool"] == {
        "first": {"steps": 2, "seconds": 4.0, "compiles": 2}, "drain": {"steps": 1, "seconds": 5.0, "compiles": 1},
    }  # fmt: skip
    code, out, _ = run_main(capsys, log)
    assert "waiting for cores (3 compiles with fast_nvcc's wait times)" in out and "starved: b.o" in out
    assert "over the pool for the compiles nearest their end (rule 3): 1 step of 1 compile" in out
    # A short step beside A's cicc (a fatbinary: no slot) starves no one.
    a["steps"][1]["over_pool"] = "short"
    log = write_jsonl(tmp_path / "short.jsonl", [a, b, c, old])
    assert analyze(load_build([str(log)])).waiting.starved == ()


def test_failed_guesses_across_the_build(tmp_path, capsys):
    """Two compiles whose ciccs guessed a module_id that carried a pid, one host split that
    failed: what was run twice, summed per kind of work and reason, the costliest first."""
    pid = "its module_id carries the writer's process id (a source with no external definition)"
    a = log_record(1000.0, 9.0, ["/b/a.o"], [("cicc", "cicc", "compute_80", 0.0, 5.0),
                                             ("cicc", "cicc", "compute_90", 0.0, 5.0)])  # fmt: skip
    b = log_record(1001.0, 9.0, ["/b/b.o"], [("cicc", "cicc", "compute_80", 0.0, 5.0),
                                             ("gcc -c", "host-compile", None, 5.0, 3.0)])  # fmt: skip
    a["steps"][0].update(guess_failed=pid, guess_lost=4.0)
    a["steps"][1].update(guess_failed=pid, guess_lost=0.0)  # changed before it started
    b["steps"][0].update(guess_failed=pid, guess_lost=2.5)
    b["steps"][1].update(guess_failed="its stub differs from the one it started from", guess_lost=1.5)
    log = write_jsonl(tmp_path / "log.jsonl", [a, b])
    (ciccs, host) = analyze(load_build([str(log)])).failed_guesses
    assert (ciccs.what, ciccs.why, ciccs.steps, ciccs.lost) == ("cicc ran twice", pid, 3, 6.5)
    assert ciccs.compiles == ((4.0, "a.o"), (2.5, "b.o"))
    assert (host.what, host.steps, host.lost, host.compiles) == ("host compile ran twice", 1, 1.5, ((1.5, "b.o"),))
    code, out, _ = run_main(capsys, log)
    assert code == 0 and "failed guesses" in out and "cicc ran twice: its module_id carries" in out
    code, out, _ = run_main(capsys, log, "--format", "json")
    assert json.loads(out)["failed_guesses"][0]["lost_seconds"] == 6.5


# -- what to change (analysis/advice.py), with made-up builds ---------------------------------------


def _pole_build(tmp_path):
    """One compile of 180 s (cicc 100 s, then ptxas 60 s, beside a 20 s host side) among ten of
    10 s, on 4 slots: the long one sets the floor."""
    long = log_record(1000.0, 180.0, ["/b/relu_grouped.cu.o"], [
        ("gcc -E", "preprocess", None, 0.0, 5.0), ("cudafe++", "cudafe++", None, 5.0, 10.0),
        ("cicc", "cicc", "compute_90", 15.0, 100.0), ("ptxas", "ptxas", "sm_90", 115.0, 60.0),
        ("gcc -c", "host-compile", None, 175.0, 5.0)])  # fmt: skip
    long["sources"] = ["/src/activation/relu_grouped.cu"]
    short = [log_record(1000.0 + i, 10.0, [f"/b/s{i}.o"], [("cicc", "cicc", "compute_90", 0.0, 10.0)])
             for i in range(10)]  # fmt: skip
    return write_jsonl(tmp_path / "log.jsonl", [long, *short])


def test_the_split_model_and_its_serial_share_invert_each_other():
    wall, cpu = advice.split_step(100.0, serial=0.37, cores=16)
    assert wall == pytest.approx(100.0 * (0.37 + 0.63 * 1.1 / 16))
    assert cpu == pytest.approx(100.0 * (1 + 0.1 * 0.63))
    assert advice.serial_share(wall, cpu, cores=16) == pytest.approx(0.37, abs=1e-6)
    assert advice.split_step(100.0, serial=0.37, cores=1)[0] > 100.0  # one core: only the extra work
    assert advice.serial_share(50.0, 50.0, cores=1) is None


def test_analyze_names_the_compile_that_sets_the_floor_and_what_split_gives(tmp_path, capsys):
    log = _pole_build(tmp_path)
    a = analyze(load_build([str(log)]), slots=4)
    v = a.advice
    assert v.floor == 180.0 and v.share == pytest.approx(280.0 / 4)
    (pole,) = v.poles
    assert (pole.source, pole.cicc, pole.ptxas, pole.host) == ("relu_grouped.cu", 100.0, 60.0, 20.0)
    chain = advice.split_step(100.0, serial=0.37, cores=4)[0] + advice.split_step(60.0, serial=0.16, cores=4)[0]
    assert pole.split_seconds == pytest.approx(180.0 - 160.0 + chain)
    extra = advice.split_step(100.0, serial=0.37, cores=4)[1] - 100.0 + advice.split_step(60.0, serial=0.16, cores=4)[1] - 60.0
    assert v.split_floor == pytest.approx(max(pole.split_seconds, (280.0 + extra) / 4))
    assert v.setting == "FAST_NVCC_SPLIT=4 FAST_NVCC_SPLIT_SOURCES='relu_grouped.cu'"
    assert v.halves_floor == pytest.approx(90.0)  # cut in two: 90 s each, above the share (70 s)
    code, out, _ = run_main(capsys, log, "-j", "4")
    assert code == 0
    assert "what to change" in out and "FAST_NVCC_SPLIT=4 FAST_NVCC_SPLIT_SOURCES='relu_grouped.cu'" in out
    assert "fast_nvcc --split 4 --split-sources 'relu_grouped.cu'" in out
    code, out, _ = run_main(capsys, log, "-j", "4", "--format", "json")
    got = json.loads(out)["advice"]
    assert got["setting"] == v.setting and got["poles"][0]["source"] == "relu_grouped.cu"
    assert got["poles"][0]["seconds"] == got["poles"][0]["own_path_seconds"] == 180.0  # nothing waited or stopped
    assert got["split_floor_seconds"] == pytest.approx(v.split_floor, abs=1e-3)


def test_the_share_counts_steps_side_by_side_over_the_pools_cores(tmp_path, capsys):
    """A fast_nvcc compile runs steps side by side (its host compile beside cicc), and its pool
    has the machine's cores, not the build tool's -j: four compiles of 100 s that each keep two
    cores busy, beside one of 200 s, on a pool of 4, are work-bound (1,000 s of work / 4 cores
    = 250 s), though their times (600 s) over the 5 jobs seen at once (120 s) say otherwise."""
    pole = log_record(1000.0, 200.0, ["/b/pole.cu.o"], [("cicc", "cicc", "compute_90", 0.0, 150.0),
                                                        ("ptxas", "ptxas", "sm_90", 150.0, 50.0)])  # fmt: skip
    wide = [log_record(1000.0, 100.0, [f"/b/w{i}.o"], [("cicc", "cicc", "compute_90", 0.0, 100.0),
                                                       ("cc1plus", "host-compile", None, 0.0, 100.0),
                                                       # neither counts: bookkeeping, and work on idle cores only
                                                       ("check module_id", "cicc", "compute_90", 100.0, 0.01),
                                                       ("cicc stub", "cicc", "compute_80", 0.0, 50.0)])
            for i in range(4)]  # fmt: skip
    log = write_jsonl(tmp_path / "log.jsonl", [pole, *wide])
    a = analyze(load_build([str(log)]))
    v = a.advice
    assert a.slots == 5 and (v.cores, v.work, v.share) == (4, 1000.0, 250.0)
    assert v.floor == 250.0 and not v.poles and v.setting == ""
    code, out, _ = run_main(capsys, log)
    assert code == 0 and "/ 4 cores" in out and "work-bound" in out
    v = analyze(load_build([str(log)]), slots=8).advice  # -j names the cores
    assert v.cores == 8 and [p.source for p in v.poles] == ["pole.cu"]


def test_a_work_bound_build_gets_no_split(tmp_path, capsys):
    log = write_jsonl(tmp_path / "log.jsonl", [
        log_record(1000.0 + i, 10.0, [f"/b/s{i}.o"], [("cicc", "cicc", "compute_90", 0.0, 10.0)]) for i in range(12)
    ])  # fmt: skip
    v = analyze(load_build([str(log)]), slots=4).advice
    assert not v.poles and v.split_floor is None and v.setting == ""
    code, out, _ = run_main(capsys, log, "-j", "4")
    assert "work-bound" in out


def test_split_steps_in_the_log_teach_their_serial_share_and_count_as_split(tmp_path):
    wall, cpu = advice.split_step(100.0, serial=0.5, cores=8)
    record = log_record(1000.0, 200.0, ["/b/cast_grouped.cu.o"], [("cicc", "cicc", "compute_90", 0.0, wall)])
    record["steps"][0].update(cpu_seconds=cpu, cores=8)
    short = [log_record(1000.0 + i, 10.0, [f"/b/s{i}.o"], [("cicc", "cicc", "compute_90", 0.0, 10.0)]) for i in range(4)]
    v = analyze(load_build([str(write_jsonl(tmp_path / "log.jsonl", [record, *short]))]), slots=8).advice
    tool, share, how = v.serial[0]
    assert tool == "cicc" and share == pytest.approx(0.5, abs=1e-6) and how == "learned from 1 split step"
    assert v.poles[0].already_split and v.split_floor is None


def test_a_split_steps_serial_share_is_the_time_its_threads_ran_one_at_a_time(tmp_path):
    """FAST_NVCC_LOG's ``serial_seconds`` is what a split step's threads ran one at a time: the
    share is that over its cpu, however few cores the build gave it.  FlashAttention's split
    cicc in a full build (round 23): 125.8 s of cpu in 98.5 s, at most 5 cores, 84.8 s one
    thread at a time, a share of 0.67; fitting the model to its wall on the 5 cores said 0.75.
    A log written before ``serial_seconds`` keeps that fit."""
    record = log_record(1000.0, 200.0, ["/b/flash_fwd.cu.o"], [("cicc", "cicc", "compute_90", 0.0, 98.5)])
    record["sources"] = ["/src/a.cu"]
    record["steps"][0].update(cpu_seconds=125.8, cores=5, serial_seconds=84.8)
    short = [log_record(1000.0 + i, 10.0, [f"/b/s{i}.o"], [("cicc", "cicc", "compute_90", 0.0, 10.0)]) for i in range(4)]
    v = analyze(load_build([str(write_jsonl(tmp_path / "log.jsonl", [record, *short]))]), slots=8).advice
    assert v.serial[0] == ("cicc", pytest.approx(84.8 / 125.8), "learned from 1 split step")
    (entry,) = load_build([str(tmp_path / "log.jsonl")]).split_shares
    assert entry[:4] == ("/src/a.cu", "cicc", pytest.approx(84.8 / 125.8), 1)
    del record["steps"][0]["serial_seconds"]
    v = analyze(load_build([str(write_jsonl(tmp_path / "old.jsonl", [record, *short]))]), slots=8).advice
    assert v.serial[0][1] == pytest.approx(advice.serial_share(98.5, 125.8, cores=5)) != pytest.approx(84.8 / 125.8, abs=0.05)
    # A step of a few looks (a tenth of a second apart) measured nothing: it teaches no share.
    tiny = log_record(1000.0, 1.0, ["/b/tiny.cu.o"], [("cicc", "cicc", "compute_90", 0.0, 0.21)])
    tiny["steps"][0].update(cpu_seconds=0.21, cores=1, serial_seconds=0.0)
    v = analyze(load_build([str(write_jsonl(tmp_path / "tiny.jsonl", [tiny, *short]))]), slots=8).advice
    assert v.serial[0] == ("cicc", advice.SERIAL_SHARE["cicc"], "measured (TE cast_grouped.cu, 2026-11-25)")


def test_the_floor_counts_a_compiles_own_path_not_its_waits_and_stops(tmp_path, capsys):
    """Where every core is busy, steps wait for cores and stop for split steps, and every compile
    ends near the wall: its elapsed time is no floor.  FlashAttention's advised build (round 24)
    "took 1.00 x its floor" (186.7 s, a compile stopped 54.5 s and waiting 19.3 s) where its cpu
    work / 16 cores was 178.0 s.  A compile's own path is its critical steps' time less their
    waits and stops, a split step at its serial seconds plus the rest of its cpu on every core."""
    def critical(record, **extra):
        for step in record["steps"]:
            step["critical"] = True
        record["steps"][0].update(extra)
        return record

    pole = critical(log_record(1000.0, 150.0, ["/b/pole.cu.o"], [("cicc", "cicc", "compute_90", 0.0, 120.0),
                                                                ("ptxas", "ptxas", "sm_90", 120.0, 20.0)]),
                    cpu_seconds=200.0, cores=4, serial_seconds=40.0)  # fmt: skip
    light = critical(log_record(1000.0, 150.0, ["/b/light.cu.o"], [("cicc", "cicc", "compute_90", 0.0, 110.0),
                                                                  ("ptxas", "ptxas", "sm_90", 140.0, 10.0)]),
                     cpu_seconds=60.0, yielded=50.0)  # fmt: skip
    light["steps"][1]["wait"] = 30.0
    others = [critical(log_record(1000.0, 100.0, [f"/b/o{i}.o"], [("cicc", "cicc", "compute_90", 0.0, 100.0)]))
              for i in range(2)]  # fmt: skip
    log = write_jsonl(tmp_path / "log.jsonl", [pole, light, *others])
    v = analyze(load_build([str(log)]), slots=4).advice
    assert v.share == pytest.approx((200 + 20 + 60 + 10 + 200) / 4)  # 122.5 s: the floor, not the 150 s wall
    assert v.longest == pytest.approx(150.0 - (120.0 - (40.0 + 160.0 / 4)))  # the split cicc on 4 cores: 80 s
    assert v.floor == pytest.approx(122.5) and not v.poles  # work-bound: split would only add work
    code, out, _ = run_main(capsys, log, "-j", "4")
    assert code == 0 and "the build took 1.22 × its floor" in out
    for step in light["steps"]:  # the run's critical path unknown (an older log): the elapsed time
        step["critical"] = False
    v = analyze(load_build([str(write_jsonl(tmp_path / "old.jsonl", [pole, light, *others]))]), slots=4).advice
    assert v.floor == 150.0


def test_the_report_says_what_fast_nvcc_itself_spent_beside_its_steps(tmp_path, capsys):
    """Item 5 of issue 39: a build's cpu, not only its wall.  FAST_NVCC_LOG's own_cpu_seconds
    (fast_nvcc's start-up and scheduling) is summed, as a share of the steps' cpu work, in the
    text and the JSON; where no record tells it (an older log), neither says anything."""
    records = [log_record(1000.0, 100.0, [f"/b/o{i}.o"], [("cicc", "cicc", "compute_90", 0.0, 100.0)]) for i in range(4)]
    for i, record in enumerate(records):
        record["own_cpu_seconds"] = 0.5 + i  # 8 s in all, of 400 s of steps' cpu
    code, out, _ = run_main(capsys, write_jsonl(tmp_path / "log.jsonl", records), "-j", "4")
    assert code == 0 and "fast_nvcc's own cpu    8.00 s over 4 compiles (2.0% of the cpu work)" in out
    code, out, _ = run_main(capsys, tmp_path / "log.jsonl", "-j", "4", "--format", "json")
    assert json.loads(out)["fast_nvcc_own_cpu_seconds"] == 8.0
    for record in records:
        del record["own_cpu_seconds"]
    code, out, _ = run_main(capsys, write_jsonl(tmp_path / "old.jsonl", records), "-j", "4")
    assert "own cpu" not in out
    code, out, _ = run_main(capsys, tmp_path / "old.jsonl", "-j", "4", "--format", "json")
    assert json.loads(out)["fast_nvcc_own_cpu_seconds"] is None


def test_the_concurrency_table_says_how_many_cores_were_busy(tmp_path, capsys):
    """Issue 39, item 1: the busy cores over time from FAST_NVCC_LOG.  Each step's cpu is spread
    over its run, a split step's by the cores it held (its cores_at): here a split cicc of 40 s
    of cpu on 1 core for 10 s then 3 cores for 10 s, beside a 20 s step of 10 s of cpu (half a
    core all along)."""
    split = log_record(1000.0, 20.0, ["/b/split.o"], [("cicc", "cicc", "compute_90", 0.0, 20.0)])
    split["steps"][0].update(cpu_seconds=40.0, cores=3, cores_at=[[0.0, 1], [10.0, 3]])
    half = log_record(1000.0, 20.0, ["/b/half.o"], [("cicc", "cicc", "compute_90", 0.0, 20.0)])
    half["steps"][0]["cpu_seconds"] = 10.0
    build = load_build([str(write_jsonl(tmp_path / "log.jsonl", [split, half]))])
    rows = analyze(build, slots=4, interval=10).profile
    assert [r.cores for r in rows] == [pytest.approx(1.0 + 0.5), pytest.approx(3.0 + 0.5)]
    _, out, _ = run_main(capsys, tmp_path / "log.jsonl", "-j", "4", "--interval", "10", "--format", "json")
    assert [r["cores"] for r in json.loads(out)["profile"]["rows"]] == [1.5, 3.5]
    _, out, _ = run_main(capsys, tmp_path / "log.jsonl", "-j", "4", "--interval", "10")
    assert "cores: busy on average" in out and "  3.5  " in out
    stopped = log_record(1000.0, 20.0, ["/b/stopped.o"], [("cc1plus", "host-compile", None, 0.0, 20.0)])
    stopped["steps"][0].update(cpu_seconds=10.0, yielded=10.0, stops_at=[[10.0, 20.0]])  # ran 0-10 s only
    build = load_build([str(write_jsonl(tmp_path / "stops.jsonl", [split, half, stopped]))])
    rows = analyze(build, slots=4, interval=10).profile
    assert [r.cores for r in rows] == [pytest.approx(1.0 + 0.5 + 1.0), pytest.approx(3.0 + 0.5)]
    # a split step stopped for memory after it narrowed: the core it held then, once it goes on
    narrowed = log_record(1000.0, 20.0, ["/b/narrowed.o"], [("cicc", "cicc", "compute_90", 0.0, 20.0)])
    narrowed["steps"][0].update(cpu_seconds=20.0, cores=3, cores_at=[[0.0, 3], [5.0, 1]], stops_at=[[10.0, 15.0]])
    rows = analyze(load_build([str(write_jsonl(tmp_path / "narrowed.jsonl", [narrowed]))]), slots=4, interval=10).profile
    assert [r.cores for r in rows] == [pytest.approx(20 * 20 / 25 / 10), pytest.approx(20 * 5 / 25 / 10)]
    (tmp_path / "build").mkdir()
    (tmp_path / "build" / ".ninja_log").write_text(ninja_log([(0, 20000, "a.o")]))  # no fast_nvcc log: no cores
    assert all(r.cores is None for r in analyze(load_build([str(tmp_path / "build")])).profile)


def test_a_split_step_held_to_one_core_is_split_not_the_unsplit_cpu_it_is_compared_with(tmp_path):
    """A split step the build never gave a second core ran split all the same (its threads, its
    extra work): its compile is already split, and its cpu is not the unsplit cpu that a split
    step of the same source is compared with."""
    held = log_record(1000.0, 200.0, ["/b/relu_grouped.cu.o"], [("cicc", "cicc", "compute_90", 0.0, 150.0)])
    held["sources"] = ["/src/activation/relu_grouped.cu"]
    held["steps"][0].update(cpu_seconds=150.0, cores=1, serial_seconds=100.0)
    wide = log_record(100_000.0, 60.0, ["/b/relu_grouped.cu.o"], [("cicc", "cicc", "compute_90", 0.0, 60.0)])
    wide["sources"] = ["/src/activation/relu_grouped.cu"]
    wide["steps"][0].update(cpu_seconds=160.0, cores=4, serial_seconds=50.0)
    short = [log_record(1000.0 + i, 10.0, [f"/b/s{i}.o"], [("cicc", "cicc", "compute_90", 0.0, 10.0)]) for i in range(4)]
    build = load_build([str(write_jsonl(tmp_path / "log.jsonl", [held, *short, wide]))], build=1)
    (entry,) = build.split_shares
    assert entry == ("/src/activation/relu_grouped.cu", "cicc", pytest.approx(100.0 / 150.0), 2, None)  # the upper median
    assert analyze(build, slots=4).advice.poles[0].already_split


def test_only_the_compiles_that_would_still_end_after_the_new_floor_are_split(tmp_path):
    """The 180 s compile split ends near 98 s; a 95 s one ends before that unsplit, and its
    split would only add work: it is not advised."""
    records = [json.loads(line) for line in _pole_build(tmp_path).read_text().splitlines()]
    middle = log_record(1000.0, 95.0, ["/b/adam.cu.o"], [("cicc", "cicc", "compute_90", 0.0, 95.0)])
    middle["sources"] = ["/src/multi_tensor/adam.cu"]
    v = analyze(load_build([str(write_jsonl(tmp_path / "two.jsonl", [*records, middle]))]), slots=4).advice
    assert [p.source for p in v.poles] == ["relu_grouped.cu", "adam.cu"]
    assert v.sources == ("relu_grouped.cu",)
    assert v.split_floor == pytest.approx(v.poles[0].split_seconds)


def test_write_split_writes_the_advised_sources_for_split_sources_to_read(tmp_path, capsys):
    """The build above: relu_grouped.cu is advised, adam.cu not.  The file, read back as
    ``--split-sources @FILE``, splits the one and not the other."""
    records = [json.loads(line) for line in _pole_build(tmp_path).read_text().splitlines()]
    middle = log_record(1000.0, 95.0, ["/b/adam.cu.o"], [("cicc", "cicc", "compute_90", 0.0, 95.0)])
    middle["sources"] = ["/src/multi_tensor/adam.cu"]
    log = write_jsonl(tmp_path / "two.jsonl", [*records, middle])
    v = analyze(load_build([str(log)]), slots=4).advice
    written = tmp_path / "split-sources.txt"
    code, out, err = run_main(capsys, log, "-j", "4", "--write-split", written)
    assert (code, err) == (0, "") and "what to change" in out
    lines = written.read_text().splitlines()
    assert lines[0].startswith("# written by fast_nvcc analyze --write-split: split these 4 ways,")
    assert f"floor 180.0 s -> {v.split_floor:.1f} s" in lines[0]
    assert lines[1] == ("# use: fast_nvcc --split 4 --split-sources @FILE"
                        " (or FAST_NVCC_SPLIT=4 FAST_NVCC_SPLIT_SOURCES=@FILE)")  # fmt: skip
    assert lines[2:] == ["relu_grouped.cu"]
    split, patterns = settings(4, f"@{written}", {})
    assert (split, patterns) == (4, v.sources)
    assert any(matches(p, "/src/activation/relu_grouped.cu") for p in patterns)
    assert not any(matches(p, "/src/multi_tensor/adam.cu") for p in patterns)
    env = {"FAST_NVCC_SPLIT": "4", "FAST_NVCC_SPLIT_SOURCES": f"@{written}"}
    split, patterns = settings(None, None, env)
    relu = with_split(["-c", "relu_grouped.cu"], split, patterns, env={}, cwd="/src/activation")
    assert relu == ["-c", "relu_grouped.cu", "--split-compile", "4"]
    adam = with_split(["-c", "adam.cu"], split, patterns, env={}, cwd="/src/multi_tensor")
    assert adam == ["-c", "adam.cu"]


def test_write_split_without_advice_writes_a_header_that_splits_nothing(tmp_path, capsys):
    log = write_jsonl(tmp_path / "log.jsonl", [
        log_record(1000.0 + i, 10.0, [f"/b/s{i}.o"], [("cicc", "cicc", "compute_90", 0.0, 10.0)]) for i in range(12)
    ])  # fmt: skip
    written = tmp_path / "split-sources.txt"
    code, out, _ = run_main(capsys, log, "-j", "4", "--write-split", written)
    assert code == 0 and "work-bound" in out
    (line,) = written.read_text().splitlines()
    assert line.startswith("# written by fast_nvcc analyze --write-split: no split advised (floor 30.0 s)")
    assert settings(4, f"@{written}", {}) == (None, ())


def test_a_sources_own_split_steps_give_the_cpu_its_split_adds(tmp_path):
    """The split's extra cpu, where the source's split cicc ran in a later build and its unsplit
    one in this: what that cicc spent over its unsplit cpu (1.3 here), not the model's fixed
    overhead at its serial share (FlashAttention's ciccs, round 7: 1.08-1.18 measured, 1.00-1.02
    modelled, and the advised build's cpu floor came out 12 s above the predicted floor)."""
    records = [json.loads(line) for line in _pole_build(tmp_path).read_text().splitlines()]
    later = log_record(100_000.0, 60.0, ["/b/relu_grouped.cu.o"], [("cicc", "cicc", "compute_90", 0.0, 60.0)])
    later["sources"] = ["/src/activation/relu_grouped.cu"]
    later["steps"][0].update(cpu_seconds=130.0, cores=4)
    v = analyze(load_build([str(write_jsonl(tmp_path / "both.jsonl", [*records, later]))], build=1), slots=4).advice
    assert v.poles[0].chosen
    ptxas_default = advice.split_step(60.0, serial=0.16, cores=4)[1] - 60.0  # not measured split: the model's
    assert v.split_extra_cpu == pytest.approx(100.0 * 0.3 + ptxas_default)
    # Without an unsplit run of that cicc to compare with, the model's overhead stays.
    alone = write_jsonl(tmp_path / "alone.jsonl", [later])
    (entry,) = load_build([str(alone)]).split_shares
    assert entry[:2] == ("/src/activation/relu_grouped.cu", "cicc") and entry[4] is None


def test_a_sources_own_split_steps_in_a_later_build_give_its_serial_share(tmp_path, capsys):
    """An exact build (relu_grouped.cu sets the floor, adam.cu too), then relu_grouped.cu alone
    built split, appended to the same log: analyzing the exact build models relu_grouped.cu's
    split with the serial share its own split cicc showed (0.6, not the default 0.37), and says
    that adam.cu was not measured split yet."""
    records = [json.loads(line) for line in _pole_build(tmp_path).read_text().splitlines()]
    middle = log_record(1000.0, 170.0, ["/b/adam.cu.o"], [("cicc", "cicc", "compute_90", 0.0, 170.0)])
    middle["sources"] = ["/src/multi_tensor/adam.cu"]
    wall, cpu = advice.split_step(100.0, serial=0.6, cores=4)
    later = log_record(100_000.0, wall, ["/b/relu_grouped.cu.o"], [("cicc", "cicc", "compute_90", 0.0, wall)])
    later["sources"] = ["/src/activation/relu_grouped.cu"]
    later["steps"][0].update(cpu_seconds=cpu, cores=4)
    both = write_jsonl(tmp_path / "both.jsonl", [*records, middle, later])
    v = analyze(load_build([str(both)], build=1), slots=4).advice
    relu, adam = v.poles
    assert (relu.source, relu.measured, adam.source, adam.measured) == ("relu_grouped.cu", "1 split step", "adam.cu", "")
    # relu_grouped.cu: cicc 100 s and ptxas 60 s (cpu 50 and 30: the log's halves) on 4 cores,
    # its cicc at its own share, its ptxas at the default.
    own = advice.split_step(100.0, serial=0.6, cores=4)[0] + advice.split_step(60.0, serial=0.16, cores=4)[0]
    assert relu.split_seconds == pytest.approx(180.0 - 160.0 + own)
    without = analyze(load_build([str(write_jsonl(tmp_path / "one.jsonl", [*records, middle]))]), slots=4).advice
    assert without.poles[0].measured == "" and without.poles[0].split_seconds < relu.split_seconds
    code, out, _ = run_main(capsys, both, "--build", "1", "-j", "4")
    assert code == 0
    assert "measured split on their own source: relu_grouped.cu (1 split step)" in out
    assert "not measured split yet (the serial shares above): adam.cu" in out
