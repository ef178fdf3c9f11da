"""--fdevice-time-trace in the graph (the file nvcc writes, where nvcc writes it, with nvcc's
structure) and --device-trace (the tools' traces of every compile, outputs unchanged)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from helpers import assert_same, compare, fast_nvcc_command, mask, require_option, run_tool

from fast_nvcc.plan.tool_traces import merged_trace_path
from fast_nvcc.report.device_trace import summarize_tool_events

pytestmark = pytest.mark.side_by_side  # compares outputs only: scripts/test runs it beside other tests (pyproject.toml)

TEMPLATES = Path(__file__).parent.parent / "data" / "templates"
TWO_ARCHS = ["-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=[sm_90,compute_90]"]
# Temp names, and the random part of cicc's own bitcode name (k-d5b9bb..lgenfe.bc).
_VOLATILE = re.compile(r"tmpxft_[0-9a-f]{8}_[0-9a-f]{8}-\d+|-[0-9a-f]{6}\.\.lgenfe")


@pytest.fixture
def templates(tmp_path: Path) -> Path:
    return Path(shutil.copytree(TEMPLATES, tmp_path / "src"))


# Spans whose enclosing span may differ between two cicc runs of one source (see below): a swap
# counts twice; ``expensive.cu`` for two architectures has about 7,900 spans.
PLACED_DIFFERENTLY = 8


def structure(document: dict) -> dict:
    """What must match nvcc's trace when timings differ: the header, each process's name and
    thread name, and per tool process every span's name, detail and enclosing span's name."""
    events = document["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    threads = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    processes = Counter((names[pid], threads[pid]) for pid in names)
    spans: dict[int, list[dict]] = {}
    for event in events:
        if event.get("ph") == "X":
            spans.setdefault(event["pid"], []).append(event)
    tools = Counter()
    steps = set()
    for pid, found in spans.items():
        if names[pid] not in ("cicc", "ptxas"):
            steps.add(names[pid])
            continue
        stack: list[tuple[int, str]] = []
        for event in sorted(found, key=lambda e: (e["ts"], -e["dur"])):
            while stack and stack[-1][0] <= event["ts"] and event["dur"] > 0:
                stack.pop()
            args = event.get("args") or {}
            detail = _VOLATILE.sub("X", str(args.get("detail", args.get("name", ""))))
            parent = stack[-1][1] if stack else ""
            tools[(names[pid], threads[pid], event["name"], detail, parent)] += 1
            stack.append((event["ts"] + event["dur"], event["name"]))
    other = dict(document["otherData"])
    return {"otherData": other, "processes": processes, "tool_spans": tools, "step_spans": steps,
            "first": events[0]}  # fmt: skip


@pytest.mark.nvcc
def test_merged_trace_has_nvcc_structure(nvcc, templates):
    require_option(nvcc, "--fdevice-time-trace")
    args = ["-c", "expensive.cu", "-o", "e.o", *TWO_ARCHS, "--fdevice-time-trace", "-"]
    result = compare(nvcc, args, cwd=templates)
    assert "e.o.json" in result.fast.files, result.fast.stderr
    plain, fast = (json.loads(o.files.pop("e.o.json")) for o in (result.plain, result.fast))
    assert_same(result)  # the object is nvcc's, and no trace file stays in $TMPDIR
    theirs, ours = structure(plain), structure(fast)
    assert ours["otherData"] == theirs["otherData"]
    assert ours["first"] == theirs["first"] == {}
    assert ours["processes"] == theirs["processes"]
    # nvcc leaves out some preprocessing spans of its own (measured: one of two architectures').
    assert ours["step_spans"] >= theirs["step_spans"]
    # The per-function optimiser passes vary in number with nothing we control: compare the rest
    # exactly, and OptFunction by the functions it names.
    def stable(spans: Counter) -> Counter:
        return Counter({k: v for k, v in spans.items() if k[2] != "OptFunction"})

    def functions(spans: Counter) -> dict:
        found: dict = {}
        for k in spans:
            if k[2] == "OptFunction":
                found.setdefault((k[0], k[1]), set()).add(k[3])
        return found

    # Every span, by name and detail, as nvcc's; its enclosing span as nvcc's but for a few: two
    # cicc runs round span edges to whole microseconds, so a span that starts as its neighbour
    # ends may land inside it (os_defines.h's 1 µs header span inside a function body's scan,
    # in one run of four of nvcc 13.0 itself on a loaded machine, 2026-11-29).
    def unplaced(spans: Counter) -> Counter:
        return Counter(k[:4] for k in stable(spans).elements())

    assert unplaced(ours["tool_spans"]) == unplaced(theirs["tool_spans"])
    mine, nvccs = stable(ours["tool_spans"]), stable(theirs["tool_spans"])
    moved = (mine - nvccs) + (nvccs - mine)
    assert sum(moved.values()) <= PLACED_DIFFERENTLY, moved
    # Which functions get a span of their own varies too: cicc leaves out the ones it optimised
    # fastest, and heavy<N>'s instantiations sit near that line (two plain nvcc runs named
    # different ones, 2026-11-25), and so does whether one nests in another.  The same tools
    # and threads name mostly the same functions.
    ours_functions, their_functions = functions(ours["tool_spans"]), functions(theirs["tool_spans"])
    assert ours_functions.keys() == their_functions.keys()
    for where, names in their_functions.items():
        assert len(names & ours_functions[where]) >= len(names | ours_functions[where]) / 2, where


@pytest.mark.nvcc
@pytest.mark.parametrize(
    ("trace_args", "created"),
    [
        (["--fdevice-time-trace", "tt.json"], None),  # 13.0: tt.json.json, 13.5: tt.json
        (["-fdevice-time-trace=tt", "-o", "x.o"], "tt.json"),
        (["--fdevice-time-trace", "-"], "trace.json"),
        (["--fdevice-time-trace", "-", "-o", "sub/x.o"], "sub/x.o.json"),
    ],
)
def test_merged_trace_goes_where_nvcc_puts_it(nvcc, templates, trace_args, created):
    require_option(nvcc, "--fdevice-time-trace")
    (templates / "sub").mkdir()
    result = compare(nvcc, ["-c", "light.cu", "-arch=sm_80", *trace_args], cwd=templates)
    created = created or next(name for name in result.plain.files if name.startswith("tt.json"))
    assert created in result.plain.files
    for outcome in (result.plain, result.fast):
        json.loads(outcome.files.pop(created))
    assert_same(result)


@pytest.mark.nvcc
def test_unwritable_trace_is_nvccs_error(nvcc, templates):
    require_option(nvcc, "--fdevice-time-trace")
    result = compare(nvcc, ["-c", "light.cu", "-arch=sm_80", "--fdevice-time-trace", "nodir/tt"], cwd=templates)
    assert result.plain.returncode == result.fast.returncode == 1
    assert result.fast.stderr == result.plain.stderr == b"nvcc fatal   : Failed to open trace file 'nodir/tt.json'\n"


@pytest.mark.parametrize(
    ("value", "args", "path"),
    [("tt", [], "tt.json"), ("a/tt.json", ["-o", "x.o"], "a/tt.json.json"), ("-", ["-o", "o/x.o"], "o/x.o.json"),
     ("-", ["--output-file=y.ptx"], "y.ptx.json"), ("-", ["-c", "k.cu"], "trace.json")],
)  # fmt: skip
def test_merged_trace_path(value, args, path):
    assert merged_trace_path(value, args) == path
    newer = path.removesuffix(".json") if path.endswith(".json.json") and value != "-" else path
    assert merged_trace_path(value, args, version=(13, 5)) == newer


def test_summary_counts_nested_instantiations_once_in_time():
    def span(name, ts, dur, detail):
        return {"name": name, "ph": "X", "ts": ts, "dur": dur, "pid": 7, "tid": 0, "args": {"detail": detail}}

    cls, fn = "Instantiating Template Class", "Instantiating Template Function"
    events = [
        span("CUDA C++ Front-End", 0, 100, "x.ii"),
        span(cls, 10, 50, "Chain [Chain<1, 2>]"),
        span(cls, 20, 30, "Chain [Chain<1, 1>]"),  # inside itself: counted, its time is not
        span(fn, 25, 5, "twice [twice<int>(int)]"),
        span(fn, 70, 4, "twice [twice<float>(float)]"),
        span("Processing Header File", 1, 8, "a.h"),
        span("NVVM Optimizer", 200, 20, ""),
        span("OptFunction", 201, 3, "_Z1kv"),
        span("NVVM CodeGen", 230, 10, ""),
        span("OptFunction", 231, 6, "_Z1kv"),
        span("NVVM Module Linker", 300, 10, ""),
        span("OptFunction", 301, 9, "_Z1kv"),  # neither optimiser nor code generator
    ]
    summary = summarize_tool_events(events)
    assert summary["templates"] == {"Chain": [50, 2], "twice": [9, 2]}
    assert summary["headers"] == {"a.h": 8}
    assert summary["phases"] == {"front_end": 100, "optimizer": 20, "codegen": 10}
    assert summary["optimize"] == {"_Z1kv": 3} and summary["codegen"] == {"_Z1kv": 6}


@pytest.mark.nvcc
def test_device_trace_collects_without_changing_outputs(nvcc, templates, tmp_path):
    require_option(nvcc, "--fdevice-time-trace")
    log = tmp_path / "build.jsonl"
    args = ["-c", "expensive.cu", "-o", "e.o", "-arch=sm_80"]
    result = compare(nvcc, args, cwd=templates, options=["--device-trace", "--trace", "../t.json"],
                     env={"FAST_NVCC_LOG": str(log)})  # fmt: skip
    assert_same(result)
    (record,) = [json.loads(line) for line in log.read_text().splitlines() if '"mode":"dag"' in line]
    sidecar = Path(record["device_trace"]["file"])
    assert sidecar == tmp_path / "build.device.jsonl"
    (line,) = [json.loads(x) for x in sidecar.read_text().splitlines()]
    assert line["id"] == record["device_trace"]["id"]
    cicc = next(s for s in line["steps"] if s["tool"] == "cicc")
    assert cicc["arch"] == "compute_80" and cicc["templates"]["heavy"][1] == 40
    assert cicc["templates"]["Chain"][1] == 40 * 61
    assert max(cicc["templates"].items(), key=lambda kv: kv[1][0])[0] == "heavy"
    assert set(cicc["phases"]) == {"front_end", "optimizer", "codegen"}
    ptxas = next(s for s in line["steps"] if s["tool"] == "ptxas")
    assert "_Z16expensive_kernelPf" in ptxas["codegen"]
    # In fast_nvcc's own trace, the tools' spans nest inside their step, on its lane.
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    (step,) = [e for e in events if e.get("cat") == "cicc" and "check" not in e["name"]]
    inner = [e for e in events if e.get("name") == "CUDA C++ Front-End"]
    assert len(inner) == 1 and inner[0]["tid"] == step["tid"]
    assert step["ts"] <= inner[0]["ts"] and inner[0]["ts"] + inner[0]["dur"] <= step["ts"] + step["dur"] + 1000


@pytest.mark.quick
@pytest.mark.nvcc
def test_device_trace_without_nvccs_trace_option_compiles_as_nvcc(nvcc, templates, tmp_path):
    """An nvcc without --fdevice-time-trace (11.8, 12.4, 12.5): its cicc rejects the trace
    options --device-trace would add. fast_nvcc compiles without them, with nvcc's outputs, and
    says so in one line (this failed the compile with cicc's "invalid option" before)."""
    help_text = subprocess.run([nvcc, "--help"], capture_output=True, text=True, check=True).stdout
    if "--fdevice-time-trace" in help_text:
        pytest.skip("this nvcc has --fdevice-time-trace (the test above collects its traces)")
    args = ["-c", "light.cu", "-o", "l.o", "-arch=sm_80"]
    result = compare(nvcc, args, cwd=templates, options=["--device-trace"])
    warning = (f"fast_nvcc: warning: --device-trace: {nvcc} has no --fdevice-time-trace: compiling"
               " without device traces\n")  # fmt: skip
    assert result.fast.stderr == warning.encode() + result.plain.stderr
    result.fast.stderr = result.plain.stderr
    assert_same(result)


@pytest.mark.one_toolchain  # the report reads the logs
@pytest.mark.nvcc
def test_analyze_finds_the_expensive_template(nvcc, templates, tmp_path, capsys):
    from fast_nvcc import analysis

    require_option(nvcc, "--fdevice-time-trace")
    log = tmp_path / "build.jsonl"
    for name in ("expensive", "light"):
        outcome = run_tool(fast_nvcc_command(nvcc, ["-c", f"{name}.cu", "-o", f"{name}.o", "-arch=sm_80"],
                                             ["--device-trace"]),
                           cwd=templates, tmpdir=tmp_path / "t", env={"FAST_NVCC_LOG": str(log)})  # fmt: skip
        assert outcome.returncode == 0, outcome.stderr
    plot = tmp_path / "templates.png"
    code = analysis.main([str(log), "--format", "json", "--what-if-template", "heavy", "--template-plot", str(plot)])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and plot.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    device = report["device"]
    assert device["compiles"] == 2
    top = device["templates"][0]
    assert (top["name"], top["instantiations"], top["compiles"]) == ("heavy", 40, 1)
    templates_by_name = {t["name"]: t for t in device["templates"]}
    assert templates_by_name["Chain"]["instantiations"] == 40 * 61
    assert (templates_by_name["twice"]["instantiations"], templates_by_name["twice"]["compiles"]) == (3, 2)
    assert {s["compile"] for s in device["splits"]} == {"expensive.o", "light.o"}
    assert all(s["front_end_seconds"] > 0 for s in device["splits"])
    (what_if,) = device["what_if_templates"]
    assert what_if["matched"] == ["heavy"] and what_if["compiles"] == 1
    assert what_if["lower_seconds"] < report["bound"]["lower_seconds"]
    assert any(f["name"] == "_Z16expensive_kernelPf" and f["tool"] == "ptxas" for f in device["functions"])
    for fmt, title in (("text", "templates by total instantiation time"), ("markdown", "## Templates by total")):
        assert analysis.main([str(log), "--format", fmt]) == 0
        assert title in capsys.readouterr().out


def test_what_if_template_without_device_costs_is_one_line(tmp_path, capsys):
    from fast_nvcc import analysis

    log = tmp_path / "b.jsonl"
    log.write_text(json.dumps({"version": 1, "time": 1.0, "cwd": "/b", "outputs": ["/b/a.o"], "wall_seconds": 1.0,
                               "steps": []}) + "\n")  # fmt: skip
    assert analysis.main([str(log), "--what-if-template", "heavy"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fast_nvcc: error: --what-if-template needs") and err.count("\n") == 1


@pytest.mark.nvcc
def test_failed_compile_still_writes_the_trace(nvcc, templates):
    require_option(nvcc, "--fdevice-time-trace")
    (templates / "bad.cu").write_text("__global__ void k() { int x = ; }\n")
    result = compare(nvcc, ["-c", "bad.cu", "-arch=sm_80", "--fdevice-time-trace", "tt"], cwd=templates)
    assert result.plain.returncode == result.fast.returncode != 0
    assert "tt.json" in result.plain.files and "tt.json" in result.fast.files
    # nvcc's own file is cut short there (13.0: not JSON); ours holds what ran, whole.
    events = json.loads(result.fast.files.pop("tt.json"))["traceEvents"]
    assert any(e.get("name") == "cicc" or e.get("args", {}).get("name") == "cicc" for e in events)
    result.plain.files.pop("tt.json")
    assert_same(result)


@pytest.mark.one_toolchain  # the host side is clang's
@pytest.mark.nvcc
@pytest.mark.skipif(shutil.which("clang++") is None, reason="no clang++ (apt-get install clang)")
def test_clang_host_templates_join_the_report(nvcc, templates, tmp_path, capsys):
    from fast_nvcc import analysis

    require_option(nvcc, "--fdevice-time-trace")
    log = tmp_path / "build.jsonl"
    args = ["-ccbin", "clang++", "-c", "host_heavy.cu", "-o", "h.o", "-arch=sm_80"]
    result = compare(nvcc, args, cwd=templates, options=["--device-trace"], env={"FAST_NVCC_LOG": str(log)})
    assert_same(result)  # the same object, and clang's h.json does not stay behind
    assert analysis.main([str(log), "--format", "json"]) == 0
    device = json.loads(capsys.readouterr().out)["device"]
    host = {t["name"]: t for t in device["templates"] if t["side"] == "host"}
    assert host["host_heavy"]["instantiations"] == 24
    assert host["HostChain"]["instantiations"] == 24 * 41
    # cicc's front end sees the whole translation unit and instantiates host-only templates too.
    device_side = {t["name"]: t for t in device["templates"] if t["side"] == "device"}
    assert device_side["host_heavy"]["instantiations"] == 24
    assert any(s["arch"] == "host" and s["front_end_seconds"] > 0 for s in device["splits"])


@pytest.mark.nvcc
def test_module_id_rerun_keeps_one_trace(nvcc, templates):
    require_option(nvcc, "--fdevice-time-trace")
    # No external definition: cudafe++'s module_id has a random part, so fast_nvcc's
    # speculative cicc always differs and is rerun as printed, trace options included.
    (templates / "internal.cu").write_text("static __global__ void k(int* p) { p[0] = 1; }\n")
    args = ["-c", "internal.cu", "-o", "i.o", "-arch=sm_80", "--fdevice-time-trace", "-"]
    result = compare(nvcc, args, cwd=templates)
    plain, fast = (json.loads(o.files.pop("i.o.json")) for o in (result.plain, result.fast))
    # cicc's warning (#177 here) once, as nvcc prints it: the rerun's, not the speculative run's too.
    assert result.fast.returncode == result.plain.returncode == 0
    assert mask(result.fast.stderr) == mask(result.plain.stderr) and b"#177" in result.plain.stderr
    assert mask(result.fast.files["i.o"]) == mask(result.plain.files["i.o"])
    assert result.fast.leftovers == []
    front_ends = [e for e in fast["traceEvents"] if e.get("name") == "CUDA C++ Front-End"]
    assert len(front_ends) == 1
    assert structure(fast)["processes"] == structure(plain)["processes"]


def test_device_costs_and_template_what_if_from_a_log(tmp_path, capsys):
    """The sums and the what-if's arithmetic on a log written by hand: a compile's
    architectures run side by side, so it shortens by its costliest cicc's share."""
    from fast_nvcc import analysis

    log, sidecar = tmp_path / "b.jsonl", tmp_path / "b.device.jsonl"

    def record(time, wall, output, key):
        return {"version": 1, "time": time, "cwd": "/b", "outputs": [f"/b/{output}"], "wall_seconds": wall,
                "steps": [], "device_trace": {"file": str(sidecar), "id": key}}

    def cicc(arch, templates, headers=None):
        return {"tool": "cicc", "arch": arch, "phases": {"front_end": 4_000_000}, "templates": templates,
                "headers": headers or {}, "optimize": {}, "codegen": {}}

    log.write_text(json.dumps(record(100.0, 10.0, "a.o", "1-a")) + "\n" + json.dumps(record(100.0, 4.0, "b.o", "1-b")) + "\n")
    sidecar.write_text("\n".join(json.dumps(line) for line in [
        {"version": 1, "id": "1-a", "steps": [cicc("compute_80", {"heavy": [3_000_000, 40], "twice": [1000, 1]}, {"h.h": 500_000}),
                                              cicc("compute_90", {"heavy": [5_000_000, 40]}, {"h.h": 700_000})]},
        {"version": 1, "id": "1-b", "steps": [cicc("compute_80", {"heavy": [1_000_000, 2], "twice": [2000, 2]}, {"h.h": 100_000})]},
    ]) + "\n")  # fmt: skip
    assert analysis.main([str(log), "-j", "1", "--format", "json", "--what-if-template", "he*"]) == 0
    report = json.loads(capsys.readouterr().out)
    device = report["device"]
    assert device["templates"][0] == {"side": "device", "name": "heavy", "seconds": 9.0, "instantiations": 82,
                                      "compiles": 2}  # fmt: skip
    assert device["headers"] == [{"side": "device", "name": "h.h", "seconds": 1.3, "compiles": 2}]
    (what_if,) = device["what_if_templates"]
    # Measured: 14 s of jobs on one slot.  Without heavy: a.o 10 - max(3, 5), b.o 4 - 1.
    assert report["bound"]["lower_seconds"] == 14.0
    assert (what_if["job_seconds"], what_if["lower_seconds"], what_if["seconds"]) == (8.0, 8.0, 9.0)
    assert what_if["matched"] == ["heavy"] and what_if["compiles"] == 2
    sidecar.unlink()  # a log whose sidecar is gone reads as one without device costs
    assert analysis.main([str(log), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["device"] is None
