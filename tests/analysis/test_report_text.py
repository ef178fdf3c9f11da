"""analyze's text on a small build (issue 41): its first rows answer how long, how close to the
floor and what to change; rows alike collapse; a floor is never above the measured wall because
steps shared a core; counts agree with their nouns."""

from __future__ import annotations

import re
from itertools import pairwise

from test_analysis import example_build, log_record, run_main, write_jsonl

from fast_nvcc.analysis import analyze, load_build


def test_the_first_rows_answer_how_long_how_close_and_what_to_change(tmp_path, capsys):
    build_dir = example_build(tmp_path)  # examples/cmake at -j 2: a 5 s build
    code, out, _ = run_main(capsys, build_dir, tmp_path / "log.jsonl")
    assert code == 0
    keys = [line.split("  ")[1] for line in out.splitlines()[1:5]]
    assert keys == ["took", "floor", "above the floor", "what to change"]
    took, floor, above = (
        float(re.search(r"(\d+\.\d+) s", line)[1]) for line in out.splitlines()[1:4]
    )
    assert floor <= took and above == round(took - floor, 2)
    assert "worst order" in out and "list-scheduling bound" not in out


def test_a_small_builds_concurrency_rows_are_few_and_never_alike(tmp_path, capsys):
    build_dir = example_build(tmp_path)
    _, out, _ = run_main(capsys, build_dir, tmp_path / "log.jsonl")
    table = out.split("\nconcurrency")[1].split("\n\n")[0].splitlines()[2:]
    rows = [line.split()[1:4] for line in table]  # running, mean, cores
    assert 1 < len(rows) <= 20
    assert all(a != b for a, b in pairwise(rows)), table
    # one row per span of instants alike, each span saying where it starts and ends
    assert any("-" in line.split()[0] for line in table)


def test_steps_sharing_cores_do_not_put_the_floor_above_the_wall(tmp_path, capsys):
    """Two compiles of 10 s side by side on a pool of 2 cores, each running two steps at once: four
    steps of 10 s elapsed on two cores, 5 s of cpu each.  Their elapsed times (40 s / 2 cores)
    would put the floor at 20 s over a 10 s build; their cpu (20 s / 2) puts it at the wall."""
    steps = [("cicc", "cicc", "compute_80", 0.0, 10.0), ("cicc", "cicc", "compute_90", 0.0, 10.0)]
    records = [log_record(1000.0, 10.0, [f"/b/{n}.o"], steps) for n in "ab"]
    for record in records:
        record["jobs"] = 2
        for step in record["steps"]:
            step["cpu_seconds"] = 5.0
    log = write_jsonl(tmp_path / "log.jsonl", records)
    a = analyze(load_build([str(log)]))
    assert (a.wall, a.advice.work, a.advice.cores, a.advice.floor) == (10.0, 20.0, 2, 10.0)
    _, out, _ = run_main(capsys, log)
    assert "above the floor        0.00 s: the build took 1.00 × its floor" in out


def test_counts_agree_with_their_nouns(tmp_path, capsys):
    one = log_record(1000.0, 100.0, ["/b/long.cu.o"], [("cicc", "cicc", "compute_90", 0.0, 100.0)])
    short = [
        log_record(1000.0 + i, 5.0, [f"/b/s{i}.o"], [("cicc", "cicc", "compute_90", 0.0, 5.0)])
        for i in range(3)
    ]
    log = write_jsonl(tmp_path / "log.jsonl", [one, *short])
    _, out, _ = run_main(capsys, log, "-j", "4")
    assert "1 compile takes longer than the share" in out
    assert not re.search(r"\b1 (compiles|steps|cores|slots|sources)\b", out), out


def test_a_log_of_one_compile_says_compile(tmp_path, capsys):
    one = log_record(1000.0, 10.0, ["/b/one.cu.o"], [("cicc", "cicc", "compute_90", 0.0, 10.0)])
    _, out, _ = run_main(capsys, write_jsonl(tmp_path / "log.jsonl", [one]))
    assert "1 fast_nvcc compile (0 fast_nvcc records of other builds)" in out, out
