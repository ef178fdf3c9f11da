"""Shared by the benchmarks: the machine, the toolchain, timing, masking, tables."""

from __future__ import annotations

import datetime
import functools
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "benchmarks"
TEMP_NAME = re.compile(rb"tmpxft_[0-9a-f]{8}_[0-9a-f]{8}")

# The eight targets: seven SASS architectures and compute_120 PTX.
EIGHT_TARGETS = [
    "-gencode", "arch=compute_75,code=sm_75",
    "-gencode", "arch=compute_80,code=sm_80",
    "-gencode", "arch=compute_86,code=sm_86",
    "-gencode", "arch=compute_89,code=sm_89",
    "-gencode", "arch=compute_90,code=sm_90",
    "-gencode", "arch=compute_100,code=sm_100",
    "-gencode", "arch=compute_120,code=[sm_120,compute_120]",
]  # fmt: skip


def fast_nvcc_command() -> list[str]:
    """fast_nvcc from this checkout, whether or not it is installed, its bytecode compiled."""
    compile_bytecode()
    return [sys.executable, "-m", "fast_nvcc"]


@functools.cache
def compile_bytecode() -> None:
    """Where PYTHONDONTWRITEBYTECODE is set (these machines set it) and nothing compiled the
    checkout, every compile would compile fast_nvcc's 90 modules anew: 0.2 s of cpu each
    (2 cores, 2026-11-26), which a build measured for its cpu would count as fast_nvcc's."""
    import compileall

    compileall.compile_dir(str(ROOT / "fast_nvcc"), quiet=1)


def fast_nvcc_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(extra or {})
    return env


def bench_settings() -> dict[str, str]:
    """fast_nvcc settings an A/B run adds to every fast_nvcc build of a benchmark, after the
    variant's own: BENCH_ENV="FAST_NVCC_NICE=0 ..." (the benchmarks drop the caller's FAST_NVCC_
    variables, which would otherwise change what is measured unnoticed)."""
    pairs = os.environ.get("BENCH_ENV", "").split()
    bad = [p for p in pairs if "=" not in p or not p.startswith("FAST_NVCC_")]
    if bad:
        raise SystemExit(f"BENCH_ENV: expected FAST_NVCC_NAME=VALUE, got {' '.join(bad)}")
    return dict(p.split("=", 1) for p in pairs)


def bench_label(label: str) -> str:
    """A variant's label with the settings BENCH_ENV added to it."""
    return " ".join([label, *(f"{k}={v}" for k, v in bench_settings().items())])


def find_nvcc(explicit: str | None) -> str:
    sys.path.insert(0, str(ROOT))
    from fast_nvcc.plan.toolchain import find_nvcc as find

    return find(explicit)


def own_paths(records: Sequence[dict], *, cores: int) -> list[float]:
    """Each FAST_NVCC_LOG record's own path, as ``fast_nvcc analyze`` counts it
    (fast_nvcc.analysis.advice.own_seconds): its time less what its critical steps waited,
    stopped, and, split, ran beyond their serial seconds plus the rest of their cpu on ``cores``.
    Not the log's ``critical_path_seconds``, which counts a step's stops: where every core is busy
    a compile stopped for split steps ends near the wall, and the floor was the wall."""
    sys.path.insert(0, str(ROOT))
    from fast_nvcc.analysis.advice import own_seconds
    from fast_nvcc.analysis.readers import jobs_of_records, record_of

    return [own_seconds(job, cores=cores) for job in jobs_of_records([record_of(r) for r in records])]


def machine() -> dict[str, str]:
    cpu = platform.processor() or "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 0
    return {"cores": str(cores), "cpu": cpu, "python": platform.python_version(), "host": platform.node()}


def tool_versions(nvcc: str) -> dict[str, str]:
    nvcc_version = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout
    release = next((l for l in nvcc_version.splitlines() if "release" in l), nvcc_version.strip())
    gcc = subprocess.run(["gcc", "--version"], capture_output=True, text=True).stdout.splitlines()
    return {"nvcc": release.strip(), "gcc": gcc[0] if gcc else "?"}


def today() -> str:
    return datetime.date.today().isoformat()


def timed(command: Sequence[str], *, cwd: Path, env: dict[str, str] | None = None) -> float:
    start = time.perf_counter()
    proc = subprocess.run(list(command), cwd=cwd, env=env, capture_output=True)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{proc.stderr.decode(errors='replace')}")
    return elapsed


def masked(path: Path) -> bytes:
    return TEMP_NAME.sub(b"tmpxft_XXXXXXXX_XXXXXXXX", path.read_bytes())


@dataclass
class Series:
    name: str
    seconds: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)


def ratio_table(series: Sequence[Series], *, baselines: Sequence[str]) -> str:
    """A markdown table: median wall time, and ours against plain nvcc and the best nvcc flags."""
    by_name = {s.name: s for s in series}
    best = min((by_name[b] for b in baselines if b in by_name), key=lambda s: s.median)
    plain = by_name[baselines[0]]
    lines = [
        f"| variant | runs | median s | min s | vs {'plain nvcc' if plain.name == 'nvcc' else plain.name} | vs best nvcc flags |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for s in series:
        lines.append(
            f"| {s.name} | {len(s.seconds)} | {s.median:.2f} | {min(s.seconds):.2f} "
            f"| {s.median / plain.median:.2f}x | {s.median / best.median:.2f}x |"
        )
    lines.append("")
    lines.append(f"best nvcc flags here: `{best.name}`; ratios are wall-time ratios (lower is faster).")
    return "\n".join(lines)


def write_json(path: str | None, document: dict) -> None:
    if path:
        Path(path).write_text(json.dumps(document, indent=2))


def read_log(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def which(tool: str) -> str | None:
    return shutil.which(tool)
