"""benchmarks/split_advice.py, analyze's advice against the builds it advised: its reading of
analyze (the predicted floor, the sources written for --split-sources @FILE, whether they were
measured split) on logs whose advice is known, and its table."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
pytest.importorskip("psutil")
import split_advice


def record(time: float, wall: float, output: str, source: str, steps) -> dict:
    """A FAST_NVCC_LOG line (jobs 4: analyze's cores)."""
    return {"version": 1, "time": time, "host": "h", "pid": 1, "cwd": "/b", "nvcc": "nvcc", "args": [],
            "sources": [source], "outputs": [output], "exit_code": 0, "wall_seconds": wall, "mode": "dag", "jobs": 4,
            "critical_path_seconds": wall,
            "steps": [{"index": i, "tool": tool, "kind": kind, "arch": arch, "start": start, "end": start + seconds,
                       "seconds": seconds, "cpu_seconds": seconds, "max_rss_kb": 1, "exit_code": 0, "state": "done",
                       "critical": False, **extra}
                      for i, (tool, kind, arch, start, seconds, extra) in enumerate(steps)]}  # fmt: skip


def exact_build(time: float) -> list[dict]:
    """One compile of 180 s (cicc 100 s, ptxas 60 s) among ten of 10 s, on 4 cores."""
    long = record(time, 180.0, "/b/relu_grouped.cu.o", "/src/relu_grouped.cu", [
        ("gcc -E", "preprocess", None, 0.0, 5.0, {}), ("cudafe++", "cudafe++", None, 5.0, 10.0, {}),
        ("cicc", "cicc", "compute_90", 15.0, 100.0, {}), ("ptxas", "ptxas", "sm_90", 115.0, 60.0, {}),
        ("gcc -c", "host-compile", None, 175.0, 5.0, {})])  # fmt: skip
    short = [record(time + i, 10.0, f"/b/s{i}.o", f"/src/s{i}.cu", [("cicc", "cicc", "compute_90", 0.0, 10.0, {})])
             for i in range(10)]  # fmt: skip
    return [long, *short]


def write(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_a_round_reads_analyzes_advice_and_what_the_advised_build_took(tmp_path):
    exact = write(tmp_path / "exact.jsonl", exact_build(1000.0))
    report, sources = split_advice.analyze([exact], written=tmp_path / "split-1.txt", work=tmp_path)
    assert sources == ["relu_grouped.cu"]
    assert 30.0 < report["advice"]["split_floor_seconds"] < 180.0
    assert not any(p["measured_split"] for p in report["advice"]["poles"])
    assert split_advice.took(exact) == (pytest.approx(180.0), pytest.approx(180.0))  # the 180 s compile is its floor
    # The advised build measured relu_grouped.cu split: the next round's advice says so.
    split = {"cores": 4, "cores_at": [[15.0, 1], [40.0, 4]], "serial_seconds": 30.0}
    advised = record(100_000.0, 90.0, "/b/relu_grouped.cu.o", "/src/relu_grouped.cu", [
        ("cicc", "cicc", "compute_90", 15.0, 50.0, {**split, "cpu_seconds": 110.0}),
        ("ptxas", "ptxas", "sm_90", 65.0, 20.0, {**split, "serial_seconds": 5.0, "cpu_seconds": 66.0})])  # fmt: skip
    later = write(tmp_path / "advised-1.jsonl", [advised])
    report, _ = split_advice.analyze([exact, later], written=tmp_path / "split-2.txt", work=tmp_path)
    assert [p["measured_split"] for p in report["advice"]["poles"] if p["source"] == "relu_grouped.cu"] == ["2 split steps"]
    # ... and expects the advised build as far above its floor as that split build ended above its own.
    ratio = report["advice"]["overrun"]["ratio"]
    assert report["advice"]["overrun"]["split_builds"] == 1
    assert ratio == pytest.approx(split_advice.took(later)[0] / split_advice.took(later)[1], abs=1e-3)
    assert report["advice"]["split_expected_seconds"] == pytest.approx(report["advice"]["split_floor_seconds"] * ratio, abs=0.01)


def test_the_table_puts_each_round_beside_its_prediction_and_the_machines_speed():
    info = {"sources": ["a.cu", "b.cu"], "jobs": 18, "cores": "16", "cpu": "Xeon", "nvcc": "release 13.0", "date": "d"}
    rounds = [{"took": 206.9, "floor": 206.9},
              {"sources": ["a.cu", "b.cu"], "predicted": 167.1, "measured": False, "took": 174.4, "same_steps": 0.896},
              {"sources": ["a.cu"], "predicted": 176.7, "measured": True, "took": 179.3, "same_steps": 0.972,
               "floor": 170.8},
              {"sources": ["a.cu"], "predicted": 184.0, "predicted_floor": 176.7, "expected": 184.0, "measured": True,
               "took": 179.3, "same_steps": 0.972, "floor": 170.8},
              {"sources": [], "predicted": None, "measured": False}]  # fmt: skip
    table = split_advice.report(rounds, info)
    assert "| exact | | | 206.9 | | | | 206.9 | 1.000 |" in table
    assert "| round 1 | 2 sources, not measured split | 167.1 | 174.4 | 1.044 | 0.896 | 1.165 |  |  |" in table
    assert "| round 2 | 1 source, measured split | 176.7 | 179.3 | 1.015 | 0.972 | 1.044 | 170.8 | 1.050 |" in table
    assert ("| round 3 | 1 source, measured split, expected from a split build (floor 176.7) | 184.0 | 179.3 | 0.974 |"
            " 0.972 | 1.003 | 170.8 | 1.050 |") in table
    assert "| round 4 | no split advised | | | | | | | |" in table


def fake_builds(monkeypatch, tmp_path) -> list:
    """The FlashAttention build (the device's torch, minutes of nvcc) replaced by one that writes
    the logs above: the exact build, or relu_grouped.cu split; returns what was asked, (variant,
    split) each."""
    asked = []

    def build(variant, *, work, split=(16, ""), **_):
        asked.append((variant, split))
        records = exact_build(1000.0) if variant == "fast_nvcc-cores" else [record(
            100_000.0 * len(asked), 90.0, "/b/relu_grouped.cu.o", "/src/relu_grouped.cu",
            [("cicc", "cicc", "compute_90", 15.0, 50.0, {"cores": 4, "serial_seconds": 30.0, "cpu_seconds": 110.0})])]  # fmt: skip
        write(work / f"{variant}.jsonl", records)
        return {"wall_seconds": 1.0, "cpu_seconds": 2.0}

    monkeypatch.setattr(split_advice.pytorch_extension, "build", build)
    monkeypatch.setattr(split_advice, "unpack", lambda work: work)
    monkeypatch.setattr(split_advice, "STAGED", tmp_path)
    return asked


@pytest.mark.nvcc
@pytest.mark.one_toolchain
def test_each_round_builds_what_analyze_advised_on_every_log_before_it(nvcc, tmp_path, monkeypatch):
    """The rounds' bookkeeping, with the FlashAttention build (the device's torch, minutes of
    nvcc) replaced by one that writes the logs above: round 1 advises relu_grouped.cu from the
    exact build alone, its build is handed that file, and round 2's advice has measured it."""
    asked = fake_builds(monkeypatch, tmp_path)
    out = tmp_path / "advice.json"
    assert split_advice.main(["--nvcc", nvcc, "--rounds", "2", "--work", str(tmp_path / "w"), "--json", str(out)]) == 0
    assert [a[0] for a in asked] == ["fast_nvcc-cores", "fast_nvcc-split", "fast_nvcc-split"]  # (variant, split)
    first = tmp_path / "w" / "logs" / "split-1.txt"
    assert asked[1][1] == (16, f"@{first}") and first.read_text().splitlines()[-1] == "relu_grouped.cu"
    rounds = json.loads(out.read_text())["rounds"]
    assert rounds[0]["took"] == pytest.approx(180.0)
    assert [(r["sources"], r["measured"]) for r in rounds[1:]] == [(["relu_grouped.cu"], False), (["relu_grouped.cu"], True)]
    assert rounds[1]["took"] == pytest.approx(90.0) and rounds[1]["predicted"] > 0


@pytest.mark.nvcc
@pytest.mark.one_toolchain
def test_resume_reads_the_builds_already_logged_and_builds_only_the_rounds_after_them(nvcc, tmp_path, monkeypatch):
    """A device call holds the exact build and round 1, not round 2: the next call resumes from
    the logs the first one kept, and builds round 2 alone, on the advice of both logs."""
    asked = fake_builds(monkeypatch, tmp_path)
    common = ["--nvcc", nvcc, "--work", str(tmp_path / "w"), "--json", str(tmp_path / "advice.json")]
    assert split_advice.main([*common, "--rounds", "1"]) == 0
    assert [a[0] for a in asked] == ["fast_nvcc-cores", "fast_nvcc-split"]
    assert split_advice.main([*common, "--rounds", "2", "--resume"]) == 0
    assert [a[0] for a in asked] == ["fast_nvcc-cores", "fast_nvcc-split", "fast_nvcc-split"]
    rounds = json.loads((tmp_path / "advice.json").read_text())["rounds"]
    assert [r["resumed"] for r in rounds] == [True, True, False]
    assert [(r["sources"], r["measured"]) for r in rounds[1:]] == [(["relu_grouped.cu"], False), (["relu_grouped.cu"], True)]
    assert rounds[1]["took"] == pytest.approx(90.0)
