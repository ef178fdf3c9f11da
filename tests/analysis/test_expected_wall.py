"""analyze's split advice says what the advised build should take, not only its floor (issue 39,
item 2): a split build ends above its floor by what its schedule leaves (serial parts, the
build's end, fast_nvcc's own cpu), 1.04-1.05 on FlashAttention's advised builds, so the advice
multiplies its split floor by how far the split builds of the logs ended above theirs, and says
where the logs hold none."""

from __future__ import annotations

import json

import pytest
from test_analysis import _pole_build, log_record, ninja_log, run_main, write_jsonl

from fast_nvcc.analysis import advice, analyze, load_build
from fast_nvcc.analysis.readers import jobs_of_records, record_of
from fast_nvcc.analysis.records import Job


def _split_build(time: float) -> dict:
    """relu_grouped.cu built split alone: 120 s, its cicc 100 s on up to 4 cores (200 s of cpu,
    40 s of it one thread at a time), then its ptxas 20 s.  Its own path: the cicc at 40 s + 160 s
    / 4 cores = 80 s, plus the ptxas: 100 s, above its cpu / 4 cores (55 s): the floor, which the
    build ended 1.2 times."""
    record = log_record(time, 120.0, ["/b/relu_grouped.cu.o"], [
        ("cicc", "cicc", "compute_90", 0.0, 100.0), ("ptxas", "ptxas", "sm_90", 100.0, 20.0)])  # fmt: skip
    record["sources"] = ["/src/activation/relu_grouped.cu"]
    record["steps"][0].update(cpu_seconds=200.0, cores=4, serial_seconds=40.0, critical=True)
    record["steps"][1].update(critical=True)
    return record


def test_a_split_builds_overrun_is_its_wall_over_its_floor():
    (job,) = jobs_of_records([record_of(_split_build(5000.0))])
    assert advice.build_floor([job], cores=4) == pytest.approx(100.0)
    assert advice.schedule_overrun([[job]], cores=4) == (pytest.approx(1.2), 1)
    # A build that ended at its floor: 1.0; of three builds, the middle ratio.
    at_floor = Job("/b/x.o", 0.0, 50.0, None)
    assert advice.schedule_overrun([[job], [at_floor], [job]], cores=4) == (pytest.approx(1.2), 3)
    assert advice.schedule_overrun([], cores=4) is None


def test_the_advice_expects_its_floor_times_the_logged_split_builds_overrun(tmp_path, capsys):
    """The exact build of _pole_build, then relu_grouped.cu split alone (ended 1.2 x its floor),
    appended: analyzing the exact build, the advised build is expected at 1.2 x the split floor.
    The exact build alone: no split build measured, the floor only, and the report says so."""
    exact = [json.loads(line) for line in _pole_build(tmp_path).read_text().splitlines()]
    both = write_jsonl(tmp_path / "both.jsonl", [*exact, _split_build(100_000.0)])
    v = analyze(load_build([str(both)], build=1), slots=4).advice
    assert v.split_floor is not None and v.overrun == (pytest.approx(1.2), 1)
    assert v.expected == pytest.approx(v.split_floor * 1.2)
    code, out, _ = run_main(capsys, both, "--build", "1", "-j", "4")
    assert code == 0
    assert f"expect about {v.expected:.2f} s" in out
    assert "the split build of these logs ended 1.20 × its floor" in out
    code, out, _ = run_main(capsys, both, "--build", "1", "-j", "4", "--format", "json")
    report = json.loads(out)["advice"]
    assert report["split_expected_seconds"] == pytest.approx(v.expected, abs=0.01)
    assert report["overrun"] == {"ratio": 1.2, "split_builds": 1}
    written = tmp_path / "split.txt"
    run_main(capsys, both, "--build", "1", "-j", "4", "--write-split", written)
    assert f"expect about {v.expected:.1f} s" in written.read_text().splitlines()[0]

    alone = analyze(load_build([str(write_jsonl(tmp_path / "exact.jsonl", exact))]), slots=4).advice
    assert alone.overrun is None and alone.expected is None
    code, out, _ = run_main(capsys, tmp_path / "exact.jsonl", "-j", "4")
    assert "expect a build somewhat above that floor: no split build in these logs yet" in out
    assert "expect about" not in out


def test_beside_a_ninja_log_the_split_builds_come_from_the_fast_nvcc_logs(tmp_path):
    """analyze of a build directory (its .ninja_log) and FAST_NVCC_LOG files: the split builds
    are the logs' sessions with split steps, whichever build the ninja log picks; here two of them
    (ended 1.2 and 1.5 x their floors) and an exact one: the middle of two is the upper, 1.5."""
    build_dir = tmp_path / "b"
    build_dir.mkdir()
    (build_dir / ".ninja_log").write_text(ninja_log([(0, 180_000, "relu_grouped.cu.o")]))
    slower = _split_build(200_000.0)  # its cicc waited 30 s for a core: the same floor, 150 s
    slower["wall_seconds"] = 150.0
    slower["steps"][0].update(start=30.0, end=130.0, wait=30.0)
    slower["steps"][1].update(start=130.0, end=150.0)
    exact = [json.loads(line) for line in _pole_build(tmp_path).read_text().splitlines()]
    log = write_jsonl(tmp_path / "all.jsonl", [*exact, _split_build(100_000.0), slower])
    build = load_build([str(build_dir), str(log)])
    assert len(build.split_builds) == 2
    assert advice.schedule_overrun(build.split_builds, cores=4) == (pytest.approx(1.5), 2)
