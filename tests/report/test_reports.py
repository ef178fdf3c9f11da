"""--graph, --table, --trace, --verbose, --save, --summary and FAST_NVCC_LOG, on real compiles."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import networkx as nx
import pytest

from fast_nvcc.graph.build import build_dag
from fast_nvcc.plan.dryrun import parse_plan, run_dryrun
from fast_nvcc.report.table import TABLE_COLUMNS

from helpers import fast_nvcc_command, run_tool

pytestmark = [pytest.mark.nvcc, pytest.mark.side_by_side]  # compares outputs only: scripts/test runs it beside other tests (pyproject.toml)

ARGS = ["-c", "kernel.cu", "-Iinclude", "-MD",
        "-gencode", "arch=compute_75,code=sm_75", "-gencode", "arch=compute_80,code=sm_80"]  # fmt: skip
REPORT_OPTIONS = ["--graph", "g.dot", "--table", "t.csv", "--trace", "t.json", "--verbose", "plan.txt",
                  "--save", "saved", "--summary"]  # fmt: skip


def run_with_reports(nvcc, sources, tmp_path, args, options=REPORT_OPTIONS, env=None):
    return run_tool(fast_nvcc_command(nvcc, args, options), cwd=sources, tmpdir=tmp_path / "tmp", env=env)


def read_table(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert rows and list(rows[0]) == list(TABLE_COLUMNS)
    return rows


def check_trace(path: Path) -> list[dict]:
    document = json.loads(path.read_text())
    events = document["traceEvents"]
    for event in events:
        # What Perfetto and chrome://tracing need of each event.
        assert {"name", "ph", "pid", "tid"} <= set(event)
        assert isinstance(event["pid"], int) and isinstance(event["tid"], int)
        if event["ph"] == "X":
            assert isinstance(event["ts"], (int, float)) and event["ts"] >= 0
            assert isinstance(event["dur"], (int, float)) and event["dur"] > 0
        else:
            assert event["ph"] == "M" and "name" in event["args"] or "sort_index" in event["args"]
    return [e for e in events if e["ph"] == "X"]


def test_reports_of_a_successful_compile(nvcc, sources, tmp_path):
    outcome = run_with_reports(nvcc, sources, tmp_path, ARGS)
    assert outcome.returncode == 0, outcome.stderr
    rows = read_table(sources / "t.csv")

    # The DOT reads back with the same nodes and edges as the DAG of the same plan.
    graph = nx.nx_pydot.read_dot(str(sources / "g.dot"))
    assert {n for n in graph.nodes if n.isdigit()} == {r["task"] for r in rows}
    dryrun = run_dryrun(nvcc, ARGS, cwd=str(sources))
    dag = build_dag(parse_plan(dryrun.stderr, env=os.environ, cwd=str(sources)), speculate=True, workdir="/w")
    assert {(str(u), str(v)) for u, v in dag.edges()} == {(u, v) for u, v, _ in graph.edges}
    assert any("color" in graph.nodes[n] for n in graph.nodes)  # the critical path is marked
    assert nx.is_directed_acyclic_graph(nx.DiGraph(graph))

    # One row per step; the durations add up to the serial time the summary reports.
    serial = sum(float(r["seconds"]) for r in rows)
    summary = outcome.stderr.decode()
    assert f"steps {serial:.2f} s" in summary and "critical path" in summary and "longest:" in summary
    assert all(r["state"] == "done" and r["exit_code"] == "0" for r in rows)
    assert {r["tool"] for r in rows} >= {"gcc -E", "cudafe++", "cicc", "ptxas", "fatbinary", "gcc -c", "depfile"}
    critical = [r for r in rows if r["critical"] == "1"]
    assert critical and any(r["tool"] == "gcc -c" for r in critical)
    cicc = next(r for r in rows if r["tool"] == "cicc")
    assert int(cicc["bytes_read"]) > 0 and int(cicc["bytes_written"]) > 0
    assert float(cicc["cpu_seconds"]) > 0 and int(cicc["max_rss_kb"]) > 0

    spans = check_trace(sources / "t.json")
    assert len(spans) == len(rows)
    slots = {e["tid"] for e in spans if e["tid"] != 0}
    assert len(slots) >= 2  # two architectures ran side by side

    plan = (sources / "plan.txt").read_text()
    assert "# 0 gcc -E compute_75" in plan and "\n-arch\ncompute_80\n" in plan

    saved = sorted(p.name for p in (sources / "saved").iterdir())
    assert any("cicc_compute_80" in name for name in saved)
    cicc_dir = next(p for p in (sources / "saved").iterdir() if "cicc_compute_80" in p.name)
    assert any(p.suffix == ".ptx" for p in cicc_dir.iterdir())
    assert (sources / "kernel.o").exists()


def test_reports_of_a_failed_compile(nvcc, sources, tmp_path):
    outcome = run_with_reports(nvcc, sources, tmp_path, ["-c", "syntax_error.cu", "-arch=sm_80", "-MD"])
    plain = run_tool([nvcc, "-c", "syntax_error.cu", "-arch=sm_80", "-MD"], cwd=sources, tmpdir=tmp_path / "p")
    assert outcome.returncode == plain.returncode != 0
    rows = read_table(sources / "t.csv")
    assert any(r["state"] == "failed" for r in rows)
    assert any(r["state"] in ("skipped", "killed") for r in rows)  # the host compile never ran
    check_trace(sources / "t.json")
    nx.nx_pydot.read_dot(str(sources / "g.dot"))
    assert f"(exit {plain.returncode})".encode() in outcome.stderr  # nvcc's own: 11.8's 1, 2 later


def test_every_node_of_the_graph_has_a_label(nvcc, sources, tmp_path):
    """A stub probe dropped before it started (one job: no idle core for it) is no step, but
    the host compile's edge from it stays: it is drawn with its label, not as a bare number
    (the demo's PNG showed a box labelled only "14")."""
    import pydot

    outcome = run_with_reports(nvcc, sources, tmp_path, ARGS, ["-j", "1", "--graph", "g.dot"])
    assert outcome.returncode == 0, outcome.stderr
    (graph,) = pydot.graph_from_dot_file(str(sources / "g.dot"))
    labels = {node.get_name(): node.get("label") or "" for node in graph.get_nodes() if node.get_name().isdigit()}
    ends = {end for edge in graph.get_edges() for end in (edge.get_source(), edge.get_destination())}
    assert ends <= set(labels), f"edges to undeclared nodes {sorted(ends - set(labels))}"
    assert "stub only" in str(labels), labels  # the probe the dropped node is
    assert not [name for name, label in labels.items() if not label.strip('"').split(" ", 1)[1:]]


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed")
@pytest.mark.parametrize("ext", ["svg", "png", "pdf"])
def test_rendered_graph(nvcc, sources, tmp_path, ext):
    outcome = run_with_reports(nvcc, sources, tmp_path, ARGS, [f"--graph=g.{ext}"])
    assert outcome.returncode == 0
    data = (sources / f"g.{ext}").read_bytes()
    assert data.startswith({"svg": b"<?xml", "png": b"\x89PNG", "pdf": b"%PDF"}[ext])


def test_missing_dot_is_one_line(nvcc, sources, tmp_path):
    env = {"PATH": os.path.dirname(sys.executable)}  # no Graphviz there
    outcome = run_with_reports(nvcc, sources, tmp_path, ARGS, ["--graph", "g.svg"], env=env)
    assert outcome.returncode == 2
    lines = outcome.stderr.decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fast_nvcc: error: --graph g.svg needs Graphviz")
    assert not (sources / "kernel.o").exists()


def test_reports_do_not_change_the_outputs(nvcc, sources, tmp_path):
    from helpers import assert_same, compare

    result = compare(nvcc, ARGS, cwd=sources, options=["--table", "../t.csv", "--trace", "../t.json"])
    assert_same(result)


@pytest.mark.one_toolchain  # the log's locking is fast_nvcc's, not nvcc's
def test_concurrent_compiles_share_one_log(nvcc, sources, tmp_path):
    log = tmp_path / "build.jsonl"
    env = {**os.environ, "FAST_NVCC_LOG": str(log), "TMPDIR": str(tmp_path)}

    def compile_one(i: int) -> int:
        args = ["-ptx", "warning.cu", "-arch=sm_80", "-o", f"out{i}.ptx"]
        return subprocess.run(fast_nvcc_command(nvcc, args), cwd=sources, env=env, capture_output=True).returncode

    with ThreadPoolExecutor(20) as pool:
        assert list(pool.map(compile_one, range(20))) == [0] * 20
    lines = log.read_text().splitlines()
    assert len(lines) == 20
    records = [json.loads(line) for line in lines]
    assert sorted(r["outputs"][0] for r in records) == sorted(str(sources / f"out{i}.ptx") for i in range(20))
    for record in records:
        assert record["version"] == 1 and record["exit_code"] == 0 and record["mode"] == "dag"
        assert record["sources"] == ["warning.cu"] and record["cwd"] == str(sources)
        assert {s["tool"] for s in record["steps"]} >= {"gcc -E", "cicc"}
        assert all(s["end"] >= s["start"] for s in record["steps"])


def test_passthrough_is_logged(nvcc, sources, tmp_path):
    log = tmp_path / "build.jsonl"
    outcome = run_tool(fast_nvcc_command(nvcc, ["--version"]), cwd=sources, tmpdir=tmp_path / "t",
                       env={"FAST_NVCC_LOG": str(log)})  # fmt: skip
    assert outcome.returncode == 0 and b"Cuda compilation tools" in outcome.stdout
    (record,) = [json.loads(line) for line in log.read_text().splitlines()]
    assert record["mode"] == "passthrough" and record["reason"] == "prints nvcc's version"
    assert record["own_cpu_seconds"] > 0


def test_log_counts_the_split_host_compile_as_commands(nvcc, sources, tmp_path):
    """cc1plus and as of the split host compile are tool processes: analyze's busy spans and
    slot accounting read the log's ``command`` flag."""
    log = tmp_path / "build.jsonl"
    outcome = run_tool(fast_nvcc_command(nvcc, ARGS), cwd=sources, tmpdir=tmp_path / "t", env={"FAST_NVCC_LOG": str(log)})
    assert outcome.returncode == 0, outcome.stderr
    (record,) = [json.loads(line) for line in log.read_text().splitlines()]
    host = [s for s in record["steps"] if s["kind"] == "host-compile" and s["tool"] != "learned stub"]
    assert len(host) == 2, host  # the front (cc1plus) and the back (as)
    assert all(s["command"] for s in host)
    assert not any(s["command"] for s in record["steps"] if s["tool"] in ("check module_id", "learned stub"))
    # fast_nvcc's own cpu, apart from its tools': the compile's steps took several times more.
    steps_cpu = sum(s["cpu_seconds"] or 0 for s in record["steps"])
    assert 0 < record["own_cpu_seconds"] < steps_cpu / 2, (record["own_cpu_seconds"], steps_cpu)
