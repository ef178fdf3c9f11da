#!/usr/bin/env python3
"""A premise, measured: do large ptxas runs spend more cpu side by side than alone?

TransformerEngine's seven long sources split (``te_split.sh seven-split``) spent 28% more ptxas
cpu in a learned build, whose ciccs end together, than in a first build, whose ptxas ran
staggered behind the ciccs (docs/benchmarks.md, round 22).  This runs the same ptxas commands on
the same PTX in turns, nothing else on the machine:

* ``alone[:NAME+...]``: one at a time, every core theirs (all of them, or the ones named);
* ``together[:NAME+...]``: all at once (all of them, or the ones named);
* ``held:K``: all at once, each held to K cores of its own (CPU affinity), as fast_nvcc holds a
  split step to the cores it grants (a grant can be narrower than the threads).

Each ptxas's cpu (user + sys, from wait4) and wall; the table gives each one's cpu in every run
over its cpu alone (the mean of the ``alone`` runs: put one first and one last, and the spread
between them is the machine's own drift).  The PTX comes from ``--stage``: nvcc ``-ptx`` of TE's
sources (te_build.py's tree, TE's own flags from its CMake, sm_90), a tarball of a few hundred MB
of PTX (14 MB compressed for the seven) in ``.ptx/`` (ignored by git; carry it to the device):

    python3 benchmarks/ptxas_together.py --stage            # here, once: minutes of cicc
    python3 benchmarks/ptxas_together.py --runs alone:gelu_grouped,together,held:2,alone:gelu_grouped
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from common import ROOT, find_nvcc, machine, today, tool_versions

STAGED = ROOT / ".ptx" / "ptx.tar.xz"
# te_split.sh's seven long sources (te_build.py patterns).
SEVEN = ("_grouped.cu", "scaled_activation.cu", "quantize_transpose_vector_blockwise_fp4.cu",
         "fused_topk_with_score_function.cu")  # fmt: skip


def ptxas_command(ptxas: str, ptx: Path, cubin: Path, *, arch: str, split: int) -> list[str]:
    """ptxas as nvcc --split-compile N runs it (the option twice: docs/nvcc-facts.md)."""
    options = [f"-split-compile={split}"] if split else []
    return [ptxas, *options, f"-arch={arch}", "-m64", *options, str(ptx), "-o", str(cubin)]


def run_mode(mode: str, names: Sequence[str], *, ptx_dir: Path, out_dir: Path, ptxas: str, arch: str,
             split: int) -> dict:  # fmt: skip
    """One run: {"mode", "wall", "steps": {name: {"cpu", "wall", "start"}}}."""
    cpus = sorted(os.sched_getaffinity(0))
    kind, _, argument = mode.partition(":")
    if kind not in ("alone", "together", "held"):
        raise SystemExit(f"ptxas_together: unknown run {mode!r} (alone[:NAME+...], together[:NAME+...], held:K)")
    chosen = argument.split("+") if argument and kind != "held" else list(names)  # runs are comma-separated
    unknown = [n for n in chosen if n not in names]
    if unknown:
        raise SystemExit(f"ptxas_together: no PTX named {', '.join(unknown)} (have {', '.join(names)})")
    batches = [[n] for n in chosen] if kind == "alone" else [chosen]
    width = int(argument) if kind == "held" else 0
    steps: dict[str, dict] = {}
    start = time.perf_counter()
    for batch in batches:
        running = {}
        for i, name in enumerate(batch):
            held = cpus[(i * width) % len(cpus):][:width] if width else None
            command = ptxas_command(ptxas, ptx_dir / f"{name}.ptx", out_dir / f"{name}.cubin", arch=arch, split=split)
            if held:  # taskset execs ptxas: its threads inherit the affinity
                command = ["taskset", "-c", ",".join(map(str, held)), *command]
            process = subprocess.Popen(command)
            running[process.pid] = (name, time.perf_counter())
        while running:
            pid, status, usage = os.wait4(-1, 0)
            if pid not in running:
                continue
            name, began = running.pop(pid)
            if os.waitstatus_to_exitcode(status) != 0:
                raise SystemExit(f"ptxas_together: ptxas failed on {name}.ptx (exit {os.waitstatus_to_exitcode(status)})")
            steps[name] = {"cpu": usage.ru_utime + usage.ru_stime, "wall": time.perf_counter() - began,
                           "start": began - start}  # fmt: skip
            print(f"{mode}: {name} cpu {steps[name]['cpu']:.1f} s, wall {steps[name]['wall']:.1f} s", file=sys.stderr,
                  flush=True)  # fmt: skip
    return {"mode": mode, "wall": time.perf_counter() - start, "steps": steps}


def report(runs: Sequence[dict], info: dict) -> str:
    alone: dict[str, list[float]] = {}
    for run in runs:
        if run["mode"].startswith("alone"):
            for name, step in run["steps"].items():
                alone.setdefault(name, []).append(step["cpu"])
    names = sorted({name for run in runs for name in run["steps"]})
    lines = [f"## ptxas side by side: {len(names)} PTX files, {info['command']}",
             f"{info['machine']['cores']} cores ({info['machine']['cpu']}); {info['ptxas']}; {info['date']}", "",
             "| run | wall s | cpu s | " + " | ".join(names) + " |",
             "|---|---:|---:|" + "---:|" * len(names)]  # fmt: skip
    for run in runs:
        cells = []
        for name in names:
            step = run["steps"].get(name)
            base = sum(alone[name]) / len(alone[name]) if alone.get(name) else None
            cells.append("" if step is None else f"{step['cpu']:.1f}" + (f" ({step['cpu'] / base:.2f}x)" if base else ""))
        total = sum(s["cpu"] for s in run["steps"].values())
        lines.append(f"| {run['mode']} | {run['wall']:.1f} | {total:.1f} | " + " | ".join(cells) + " |")
    lines += ["", "cpu s (Nx): a ptxas's cpu in that run, and over its mean cpu in the alone runs"]
    spread = {n: max(v) / min(v) for n, v in alone.items() if len(v) > 1}
    if spread:
        lines.append("alone twice, the machine's own drift: "
                     + ", ".join(f"{n} {s:.2f}x" for n, s in sorted(spread.items())))  # fmt: skip
    return "\n".join(lines)


def stage(patterns: Sequence[str], *, work: Path, nvcc: str, target: Path) -> None:
    """nvcc -ptx of TE's sources matching ``patterns`` with TE's own flags (te_build.py's tree and
    CMake), into ``target`` (a .tar.xz of NAME.ptx)."""
    import te_build

    root = te_build.unpack_sources(te_build.STAGED, work)
    sources = te_build.prepare_sources(root, nvcc)
    directory = work / "build-ptx"
    env = te_build.build_environment(state=work / "state", log=work / "log.jsonl", tmp=Path(tempfile.gettempdir()))
    te_build.configure(directory, te_build.BUILDS["nvcc"], sources=sources, archs="90", nvcc=nvcc, env=env)
    objects = te_build.list_cuda_objects(directory)
    out = work / "ptx"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    for source in te_build.select_sources(list(objects), patterns):
        line = subprocess.run(["ninja", "-C", str(directory), "-t", "commands", objects[source]], capture_output=True,
                              text=True, check=True).stdout.strip().splitlines()[-1]  # fmt: skip
        argv = [a for a in shlex.split(line.split("&&")[-1]) if a != "-c"]
        argv[argv.index("-o") + 1] = str(out / f"{Path(source).stem}.ptx")
        print(f"ptxas_together: {source} -> PTX", file=sys.stderr, flush=True)
        subprocess.run([*argv, "-ptx", "--split-compile", "16"], cwd=directory, check=True, capture_output=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(target, "w:xz") as archive:
        for ptx in sorted(out.glob("*.ptx")):
            archive.add(ptx, arcname=ptx.name)
    shutil.rmtree(out)
    print(f"ptxas_together: {target} ({target.stat().st_size >> 20} MiB)", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stage", action="store_true", help="make the PTX from TE's sources (te_build.py's tree)")
    parser.add_argument("--sources", nargs="+", default=list(SEVEN), help="--stage: te_build.py patterns")
    parser.add_argument("--ptx", default=str(STAGED), help="a .tar.xz of NAME.ptx, or a folder of them")
    parser.add_argument("--runs", default="alone,together,alone", help="alone[:NAME+...], together[:NAME+...], held:K, comma-separated, in turn")
    parser.add_argument("--arch", default="sm_90")
    parser.add_argument("--split", type=int, default=16, help="ptxas -split-compile=N (0: unsplit)")
    parser.add_argument("--work", default="/tmp/ptxas-together")
    parser.add_argument("--nvcc", default=None)
    parser.add_argument("--json", default=None)
    options = parser.parse_args(argv)
    nvcc = find_nvcc(options.nvcc)
    work = Path(options.work)
    if options.stage:
        stage(options.sources, work=work, nvcc=nvcc, target=Path(options.ptx))
        return 0
    ptx = Path(options.ptx)
    if ptx.is_file():
        unpacked = work / "ptx"
        shutil.rmtree(unpacked, ignore_errors=True)
        unpacked.mkdir(parents=True)
        with tarfile.open(ptx) as archive:
            archive.extractall(unpacked, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
        ptx = unpacked
    names = sorted(p.stem for p in ptx.glob("*.ptx"))
    if not names:
        raise SystemExit(f"ptxas_together: no PTX in {ptx} (run --stage first)")
    ptxas = str(Path(nvcc).resolve().parent / "ptxas")
    runs = []
    with tempfile.TemporaryDirectory(dir=work if work.is_dir() else None) as out:
        for mode in options.runs.split(","):
            runs.append(run_mode(mode, names, ptx_dir=ptx, out_dir=Path(out), ptxas=ptxas, arch=options.arch,
                                 split=options.split))  # fmt: skip
            print(f"{mode:24s} {runs[-1]['wall']:8.1f} s", file=sys.stderr, flush=True)
    info = {"machine": machine(), "ptxas": tool_versions(nvcc).get("nvcc", ""), "date": today(),
            "command": shlex.join(ptxas_command("ptxas", Path("NAME.ptx"), Path("NAME.cubin"), arch=options.arch,
                                                split=options.split))}  # fmt: skip
    print(report(runs, info))
    if options.json:
        Path(options.json).write_text(json.dumps({"info": info, "runs": runs}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
