"""benchmarks/split_bound.py, the fluid model of a split build: a compile alone ends on its own
chain, and where one compile's one-thread tail is long, serving it first ends sooner than
sharing the cores alike (made-up FAST_NVCC_LOG records)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import split_bound


def step(tool: str, kind: str, arch: str | None, start: float, cpu: float, **extra) -> dict:
    return {"tool": tool, "kind": kind, "arch": arch, "start": start, "end": start + cpu, "seconds": cpu,
            "cpu_seconds": cpu, "max_rss_kb": 1, "exit_code": 0, "state": "done", "critical": False, "command": True,
            **extra}  # fmt: skip


def record(source: str, *, cicc: tuple[float, float], ptxas: float, host: float, probe: float = 2.0) -> dict:
    """A compile: 1 s of preprocessing and cudafe++, a split cicc of ``cicc`` (cpu, one-thread
    seconds), an unsplit ptxas of ``ptxas`` seconds, a host compile of ``host`` seconds."""
    cpu, serial = cicc
    return {"version": 1, "time": 99.0, "host": "h", "pid": 1, "cwd": "/b", "nvcc": "nvcc", "args": [],
            "outputs": [source + ".o"], "exit_code": 0, "mode": "dag", "jobs": 4, "critical_path_seconds": 1.0 + cpu + ptxas,
            "sources": [source], "run_start": 100.0, "wall_seconds": 1.0 + cpu + ptxas,
            "steps": [step("g++ -E", "preprocess", "compute_90", 0.0, 0.5), step("g++ -E", "preprocess", None, 0.0, 0.4),
                      step("cudafe++", "cudafe++", None, 0.5, 0.5),
                      step("cicc stub", "cicc", "compute_90", 0.5, probe),
                      step("cicc", "cicc", "compute_90", 1.0, cpu, serial_seconds=serial, cores=4),
                      step("ptxas", "ptxas", "sm_90", 1.0 + cpu, ptxas),
                      step("cc1plus", "host-compile", None, 1.0, host)]}  # fmt: skip


def test_a_compile_alone_ends_on_its_chain_its_split_part_on_every_thread():
    compile_, = split_bound.compiles_of([record("a.cu", cicc=(40.0, 10.0), ptxas=2.0, host=5.0)])
    # front min(11, 30% of 10 s), 30 s on up to 16 threads, the tail, then the unsplit ptxas
    assert compile_.chain == [(False, 1.0), (False, 3.0), (True, 30.0), (False, 7.0), (False, 2.0)]
    assert compile_.filler == 5.0  # the host compile (the stub probe is no work the build needs)
    found = split_bound.bounds([compile_], cores=16, threads=16, dt=0.01)
    assert found["alike"] == pytest.approx(1 + 3 + 30 / 16 + 7 + 2, abs=0.05)
    assert found["ordered"] == pytest.approx(found["alike"], abs=0.05)


def test_a_long_tail_served_first_ends_sooner_than_cores_alike():
    # On 8 cores both have 100 s of parallel work; heavy.cu then 14.7 s in one thread (its front
    # end 6.3 s, light.cu's 0.3 s).  Alike, light.cu takes 7 cores while heavy.cu's front end
    # runs, then each 4: heavy.cu's parallel part ends at 27.05 s, its tail at 41.75 s.  heavy.cu
    # first (7 cores from 7.3 s) ends at 36.3 s, light.cu in heavy.cu's tail, before it.
    # Most work first and the probes' order (heavy.cu's front end alone took longer) serve it first.
    heavy = record("heavy.cu", cicc=(121.0, 21.0), ptxas=0.0, host=0.0, probe=4.0)
    light = record("light.cu", cicc=(101.0, 1.0), ptxas=0.0, host=0.0, probe=2.0)
    compiles = split_bound.compiles_of([light, heavy])
    found = split_bound.bounds(compiles, cores=8, threads=16, dt=0.01)
    assert found["alike"] == pytest.approx(41.75, abs=0.1)
    assert found["ordered"] == pytest.approx(36.3, abs=0.1)
    assert found["order"][0] == "heavy.cu"
    assert found["work"] == pytest.approx(36.3, abs=0.1) and found["probe"] == pytest.approx(36.3, abs=0.1)
    # The learned rule evens the two paths out: heavy.cu's, with its one-thread tail, gets more
    # cores than light.cu's, not all of them.
    assert found["ordered"] < found["paths"] < found["alike"]


def test_the_table_puts_the_build_and_the_model_over_its_floor(tmp_path, capsys):
    log = tmp_path / "log.jsonl"
    log.write_text("".join(json.dumps(record(f"{n}.cu", cicc=(30.0, 6.0), ptxas=4.0, host=3.0)) + "\n" for n in "ab"))
    assert split_bound.main([str(log), "--cores", "4"]) == 0
    out = capsys.readouterr().out
    assert "| floor (cpu / cores, longest own path) |" in out
    assert "| model, split steps' cores alike (a first build) |" in out
    assert "| model, most work first (the costs known) |" in out
    assert "| the build, measured | 35.0 |" in out
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert split_bound.main([str(empty)]) == 1
    assert "split_bound: error: no records" in capsys.readouterr().err
