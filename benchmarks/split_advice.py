#!/usr/bin/env python3
"""``fast_nvcc analyze``'s split advice against the builds it advised, as a user follows it
(issue 39, item 2): FlashAttention's kernel files (benchmarks/pytorch_extension.py's build,
-j cores + 2) built exact, then in rounds: analyze on every log so far (``--build 1``: the exact
build, with the split steps the advised builds measured), ``--write-split FILE``, and the
``--split 16 --split-sources @FILE`` build that file asks for, sharing the exact build's cost
history.  Round 1's advice has measured no split of these sources; later rounds have.

For each round: the advice, what analyze predicted (its split floor, times the overrun of the
split builds logged before where there is one: round 2 on), what the advised build took (analyze's
wall of its log), their ratio, and the same unsplit steps' cpu against the exact build's (the
machine's speed between the two builds; the ratio at the exact build's speed beside it).  Needs
torch with CUDA, ninja and nvcc (the device), ``.fa`` carried (``sh benchmarks/fa_stage.sh``):

    python3 benchmarks/split_advice.py --rounds 2 --json out.json --logs logs/

A device call lasts at most 10 minutes and the exact build with two rounds takes 9-10: with
``--resume``, the builds whose logs are already in ``--logs`` (exact.jsonl, advised-N.jsonl) are
read, not built again, so one call runs the exact build and round 1 and the next (on the same warm
machine: the cost history lives in ``--work``) round 2.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytorch_extension
from common import ROOT, machine, read_log, today, tool_versions, write_json
from cutlass_build import analyze_log, same_steps_cpu
from pytorch_extension import SOURCES, STAGED, unpack


def _analyze_json(*args: str) -> dict:
    """``fast_nvcc analyze --format json ARGS``'s report."""
    done = subprocess.run([sys.executable, "-m", "fast_nvcc", "analyze", *args, "--format", "json"],
                          capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                          check=False)  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"split_advice: analyze failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout)


def analyze(logs: Sequence[Path], *, written: Path, work: Path) -> tuple[dict, list[str]]:
    """analyze's JSON report of the first build in ``logs`` (joined in one file), and the
    sources its advice wrote to ``written``."""
    joined = work / "joined.jsonl"
    joined.write_text("".join(log.read_text() for log in logs))
    report = _analyze_json(str(joined), "--build", "1", "--write-split", str(written))
    sources = [line.strip() for line in written.read_text().splitlines() if line.strip() and not line.startswith("#")]
    return report, sources


def took(log: Path) -> tuple[float, float]:
    """analyze's wall of one build's log (its first job's start to its last job's end), and the
    floor analyze finds in it (no order of that build's work ends sooner)."""
    report = _analyze_json(str(log))
    return float(report["wall_seconds"]), float(report["advice"]["floor_seconds"])


def report(rounds: Sequence[dict], info: dict) -> str:
    exact = rounds[0]
    lines = [(f"## analyze's split advice against the builds it advised: FlashAttention, {len(info['sources'])} "
              f"kernel files, -j{info['jobs']}"),
             f"{info['cores']} cores ({info['cpu']}), {info['nvcc']}, {info['date']}", "",
             ("| build | advice | predicted s | took s | took / predicted | same steps' cpu vs exact | at the exact build's "
              "speed | its own floor s | took / its floor |"),
             "|---|---|---:|---:|---:|---:|---:|---:|---:|",
             f"| exact | | | {exact['took']:.1f} | | | | {_floor(exact)} |"]  # fmt: skip
    for number, row in enumerate(rounds[1:], 1):
        if not row["sources"]:
            lines.append(f"| round {number} | no split advised | | | | | | | |")
            continue
        measured = "measured split" if row["measured"] else "not measured split"
        if row.get("expected"):
            measured += f", expected from a split build (floor {row['predicted_floor']:.1f})"
        ratio = row["took"] / row["predicted"]
        same = row.get("same_steps")
        count = f"{len(row['sources'])} source{'s' if len(row['sources']) != 1 else ''}"
        lines.append(f"| round {number} | {count}, {measured} | {row['predicted']:.1f} | "
                     f"{row['took']:.1f} | {ratio:.3f} | {f'{same:.3f}' if same else ''} | "
                     f"{f'{ratio / same:.3f}' if same else ''} | {_floor(row)} |")  # fmt: skip
    lines += ["", ("predicted: analyze's split floor on the logs so far (the exact build's, with the split steps "
                   "measured before), times how far the split builds among them ended above their floors where they "
                   "hold one (its 'expect about'); took: analyze's wall of the advised build's log; its own floor: "
                   "analyze's floor of that log (its cpu work / the cores, or a compile's own path), and took over "
                   "it: how far that build's schedule ended above it")]  # fmt: skip
    return "\n".join(lines)


def _floor(row: dict) -> str:
    """A build's own floor and its wall over it (two cells; empty from a JSON written before)."""
    return f"{row['floor']:.1f} | {row['took'] / row['floor']:.3f}" if row.get("floor") else " | "


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2, help="advised builds after the exact one")
    parser.add_argument("--sources", default=",".join(SOURCES), help="kernel files of csrc/flash_attn/src")
    parser.add_argument("--work", default="/tmp/fa-advice", help="build here (one fixed path)")
    parser.add_argument("--nvcc", default=None)
    parser.add_argument("--json", default=None)
    parser.add_argument("--logs", default=None, help="keep every build's FAST_NVCC_LOG here")
    parser.add_argument("--resume", action="store_true", help="read the builds whose logs --logs holds, build the rest")
    options = parser.parse_args(argv)
    if not STAGED.exists():
        raise SystemExit(f"split_advice: no {STAGED}: run sh benchmarks/fa_stage.sh here first")
    nvcc = options.nvcc
    if nvcc is None:
        from torch.utils import cpp_extension

        nvcc = os.path.join(cpp_extension.CUDA_HOME or "/usr/local/cuda", "bin", "nvcc")
    work = Path(options.work)
    work.mkdir(parents=True, exist_ok=True)
    logs = Path(options.logs) if options.logs else work / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    src, sources = unpack(work), options.sources.split(",")
    cores = len(os.sched_getaffinity(0))
    info = {**machine(), **tool_versions(nvcc), "date": today(), "sources": sources, "jobs": cores + 2}
    def build(variant: str, log: Path, **split) -> dict:
        """Build ``variant`` and keep its log as ``log``; with --resume, a log kept before is the build."""
        if options.resume and log.exists():
            print(f"split_advice: {log.name} kept before, not built again", file=sys.stderr)
            return {"wall_seconds": None, "cpu_seconds": None, "resumed": True}
        run = pytorch_extension.build(variant, src=src, work=work, sources=sources, nvcc=nvcc, sccache=None,
                                      logs=None, **split)  # fmt: skip
        shutil.copy(work / f"{variant}.jsonl", log)
        return run

    kept = [logs / "exact.jsonl"]
    run = build("fast_nvcc-cores", kept[0])
    exact_log = analyze_log(read_log(kept[0]), cores=cores)
    exact_took, exact_floor = took(kept[0])
    rounds = [{"took": exact_took, "floor": exact_floor, "wall": run["wall_seconds"], "cpu": run["cpu_seconds"], "resumed": "resumed" in run}]
    for number in range(1, options.rounds + 1):
        written = logs / f"split-{number}.txt"
        report_json, advised = analyze(kept, written=written, work=work)
        advice = report_json["advice"]
        expected = advice.get("split_expected_seconds")
        row = {"sources": advised, "predicted": expected or advice.get("split_floor_seconds"),
               "predicted_floor": advice.get("split_floor_seconds"), "expected": expected,
               "measured": any(p.get("measured_split") for p in advice["poles"] if p.get("source") in advised)}
        rounds.append(row)
        if not advised:
            break
        log = logs / f"advised-{number}.jsonl"
        run = build("fast_nvcc-split", log, split=(16, f"@{written}"))
        kept.append(log)
        same = same_steps_cpu(analyze_log(read_log(log), cores=cores), exact_log)
        wall_of_log, floor_of_log = took(log)
        row.update(took=wall_of_log, floor=floor_of_log, wall=run["wall_seconds"], cpu=run["cpu_seconds"], same_steps=same[0] if same else None,
                   resumed="resumed" in run)  # fmt: skip
        write_json(options.json, {"scenario": "split-advice", "machine": info, "rounds": rounds})
    write_json(options.json, {"scenario": "split-advice", "machine": info, "rounds": rounds})
    print(report(rounds, info))
    return 0


if __name__ == "__main__":
    sys.exit(main())
