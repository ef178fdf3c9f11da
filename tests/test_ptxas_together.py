"""benchmarks/ptxas_together.py, the premise benchmark of ptxas side by side, on two small PTX
files: each run measures the ptxas it names, as nvcc --split-compile runs them, and the table
puts each one's cpu over its cpu alone."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import ptxas_together

KERNEL = "__global__ void k(float *a, int n) { for (int i = threadIdx.x; i < n; i += 32) a[i] = a[i] * 2.0f + 1.0f; }\n"


@pytest.mark.nvcc
@pytest.mark.one_toolchain
def test_each_run_measures_the_ptxas_it_names_and_the_table_compares_them_with_alone(nvcc, tmp_path, capsys):
    (tmp_path / "k.cu").write_text(KERNEL)
    ptx = tmp_path / "ptx"
    ptx.mkdir()
    for name in ("a", "b"):
        subprocess.run([nvcc, "-ptx", "-arch=sm_80", str(tmp_path / "k.cu"), "-o", str(ptx / f"{name}.ptx")], check=True)
    out = tmp_path / "runs.json"
    code = ptxas_together.main(["--nvcc", nvcc, "--ptx", str(ptx), "--arch", "sm_80", "--split", "2",
                                "--runs", "alone,together,held:1,alone:a,together:b+a", "--json", str(out)])  # fmt: skip
    assert code == 0
    runs = json.loads(out.read_text())["runs"]
    assert [r["mode"] for r in runs] == ["alone", "together", "held:1", "alone:a", "together:b+a"]
    assert [sorted(r["steps"]) for r in runs] == [["a", "b"], ["a", "b"], ["a", "b"], ["a"], ["a", "b"]]
    alone, together = runs[0]["steps"], runs[1]["steps"]
    assert alone["b"]["start"] >= alone["a"]["start"] + alone["a"]["wall"] - 0.01  # one after the other
    assert abs(together["a"]["start"] - together["b"]["start"]) < 1.0  # side by side
    assert all(s["cpu"] >= 0 for r in runs for s in r["steps"].values())
    table = capsys.readouterr().out
    assert "ptxas -split-compile=2 -arch=sm_80 -m64 -split-compile=2 NAME.ptx -o NAME.cubin" in table
    assert "| held:1 |" in table and "alone twice, the machine's own drift: a " in table


def test_a_run_it_does_not_know_or_a_ptx_it_lacks_is_one_line(tmp_path):
    with pytest.raises(SystemExit, match=r"unknown run 'apart'"):
        ptxas_together.run_mode("apart", ["a"], ptx_dir=tmp_path, out_dir=tmp_path, ptxas="ptxas", arch="sm_80", split=2)
    with pytest.raises(SystemExit, match=r"no PTX named c \(have a, b\)"):
        ptxas_together.run_mode("alone:c", ["a", "b"], ptx_dir=tmp_path, out_dir=tmp_path, ptxas="ptxas", arch="sm_80",
                                split=2)  # fmt: skip
