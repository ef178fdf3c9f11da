"""ccache in front, fast_nvcc behind it: ``CCACHE_PREFIX=fast_nvcc ccache nvcc ...``.

ccache answers whole compiles it has seen (any object name, any build directory, a team's
shared store); on a miss it runs ``fast_nvcc nvcc <args>`` (its ``prefix_command``), and its
preprocessing for the key runs plain nvcc.  With the real ccache (Debian's, from
scripts/setup-env), each ccache in a private CCACHE_DIR and configuration file:

* a miss and a hit give nvcc's outputs, stdout, stderr and exit code (tests/helpers.py's
  comparison), and fast_nvcc ran the miss (its FAST_NVCC_LOG has the record) and not the hit,
  also a hit with another object name or directory, or from another build directory;
* failing compiles pass through with nvcc's message and exit code and are never cached;
* two cache directories sharing one real redis-server (ccache's ``remote_storage``): the second
  hits what the first stored;
* nothing is lost: a corrupted cache, a full one, a Redis that is down still compile right; an
  unusable CCACHE_DIR is ccache's own error, and CCACHE_DISABLE=1 compiles through fast_nvcc;
* CMake with ``CMAKE_CUDA_COMPILER_LAUNCHER=ccache``: a second build directory hits every object.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import TOOLCHAINS
from helpers import Comparison, assert_same, mask, remove_files, run_tool
from sccache_servers import free_port

CCACHE = shutil.which("ccache")
EXAMPLE = Path(__file__).parent.parent.parent / "examples" / "cmake"
I = "-Iinclude"

pytestmark = [
    pytest.mark.nvcc,
    pytest.mark.side_by_side,  # compares outputs only: scripts/test runs it beside other tests (pyproject.toml)
    pytest.mark.skipif(CCACHE is None, reason="ccache is not installed (scripts/setup-env installs Debian's as root)"),
]


@pytest.fixture
def toolchain() -> str:
    """One toolchain: what ccache adds does not depend on which (tests/test_integration.py
    covers both for fast_nvcc itself)."""
    if not TOOLCHAINS:
        pytest.skip("no nvcc")
    return TOOLCHAINS[0]


@pytest.fixture
def prefix(tmp_path) -> str:
    """What CCACHE_PREFIX names: the installed console script, as a user would; else a script
    running this checkout's fast_nvcc (ccache wants one executable, not ``python -m``)."""
    script = Path(sys.executable).parent / "fast_nvcc"
    if script.exists():
        return str(script)
    wrapper = tmp_path / "bin" / "fast_nvcc"
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m fast_nvcc "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper)


class Ccache:
    """One ccache: its directory, its configuration file, the fast_nvcc log of its misses."""

    def __init__(self, root: Path, prefix: str | None, **config: str) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.root = root
        self.log = root / "fast_nvcc.jsonl"
        self.env = {"CCACHE_DIR": str(root / "cache"), "CCACHE_CONFIGPATH": str(root / "ccache.conf"),
                    "FAST_NVCC_LOG": str(self.log), **{f"CCACHE_{k.upper()}": v for k, v in config.items()}}  # fmt: skip
        if prefix is not None:
            self.env["CCACHE_PREFIX"] = prefix
        (root / "ccache.conf").write_text("")  # neither /etc/ccache.conf nor the user's

    def compile(self, nvcc: str, args: list[str], *, cwd: Path, tmpdir: Path):
        return run_tool([CCACHE, nvcc, *args], cwd=cwd, tmpdir=tmpdir, env=self.env)

    def stats(self) -> dict[str, int]:
        out = subprocess.run([CCACHE, "--print-stats"], env={**os.environ, **self.env}, capture_output=True,
                             text=True, check=True).stdout  # fmt: skip
        fields = (line.split("\t") for line in out.splitlines())
        return {f[0]: int(f[1]) for f in fields if len(f) == 2 and f[1].isdigit() and not f[0].endswith("timestamp")}

    def served(self) -> dict[str, int]:
        """The counts a test reads, zeros left out."""
        names = ("direct_cache_hit", "preprocessed_cache_hit", "cache_miss", "remote_storage_hit",
                 "remote_storage_write", "compile_failed")  # fmt: skip
        return {k: v for k, v in self.stats().items() if k in names and v}

    def fast_nvcc_runs(self) -> list[dict]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]


def plain(nvcc: str, args: list[str], sources: Path, tmp_path: Path):
    outcome = run_tool([nvcc, *args], cwd=sources, tmpdir=tmp_path / "plain-tmp")
    remove_files(sources, outcome)
    return outcome


def as_ccache_writes_it(depfile: bytes) -> bytes:
    """nvcc's dependency file as ccache writes it on a hit: ccache writes the target itself,
    ``obj/kernel.o: kernel.cu ...`` for nvcc's ``obj/kernel.o : kernel.cu ...`` (the same with
    nvcc alone behind it; make and Ninja read both alike)."""
    first, _, rest = depfile.partition(b"\n")
    return first.replace(b" : ", b": ", 1) + b"\n" + rest


def assert_served(expected, outcome, *, hit: bool) -> None:
    """nvcc's outputs, stdout, stderr and exit code; on a hit, the depfiles as ccache writes them."""
    assert_same(Comparison(expected, outcome), depfiles=not hit)
    if hit:
        for name, data in expected.files.items():
            if name.endswith(".d"):
                assert outcome.files[name] == as_ccache_writes_it(data), name


CASES = {
    "cmake-style-depfile": ["-c", "kernel.cu", I, "-arch=sm_80", "-MD", "-MT", "obj/kernel.o", "-MF", "kernel.o.d",
                            "-x", "cu", "-o", "kernel.o"],
    "warnings-two-targets": ["-c", "warning.cu", "-gencode", "arch=compute_80,code=sm_80",
                             "-gencode", "arch=compute_90,code=sm_90", "-Xcompiler", "-Wall"],
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(CASES))
def test_miss_then_hit_give_nvcc_outputs(toolchain, prefix, sources, tmp_path, case):
    args = CASES[case]
    expected = plain(toolchain, args, sources, tmp_path)
    cache = Ccache(tmp_path / "ccache", prefix)

    miss = cache.compile(toolchain, args, cwd=sources, tmpdir=tmp_path / "tmp")
    assert_served(expected, miss, hit=False)
    assert cache.served() == {"cache_miss": 1}
    (record,) = cache.fast_nvcc_runs()  # fast_nvcc ran the miss, as a DAG
    assert record["mode"] == "dag" and record["exit_code"] == 0

    remove_files(sources, miss)
    hit = cache.compile(toolchain, args, cwd=sources, tmpdir=tmp_path / "tmp")
    assert cache.served() == {"cache_miss": 1, "direct_cache_hit": 1}
    assert len(cache.fast_nvcc_runs()) == 1  # the hit ran nothing
    assert_served(expected, hit, hit=True)
    if "-MD" in args:  # the depfile's rewrite is ccache's own: the same with nvcc alone behind it
        alone = Ccache(tmp_path / "ccache-alone", None)
        remove_files(sources, hit)
        alone.compile(toolchain, args, cwd=sources, tmpdir=tmp_path / "tmp")
        alone_hit = alone.compile(toolchain, args, cwd=sources, tmpdir=tmp_path / "tmp")
        assert alone.served() == {"cache_miss": 1, "direct_cache_hit": 1}
        assert hit.files["kernel.o.d"] == alone_hit.files["kernel.o.d"]


def test_hit_with_another_object_name_and_build_directory(toolchain, prefix, sources, tmp_path):
    """A whole-compile hit whatever the object's name and directory, and from a second build
    directory: with ``-gencode`` spelled so, ccache 4.7 takes it for ``-g`` and keys the working
    directory, which CCACHE_NOHASHDIR=1 leaves out (docs/cache.md)."""
    args = ["-c", str(sources / "kernel.cu"), f"-I{sources / 'include'}", "-gencode", "arch=compute_80,code=sm_80"]
    builds = {name: tmp_path / name for name in ("build-a", "build-b")}
    for build in builds.values():
        (build / "sub").mkdir(parents=True)
    expected = run_tool([toolchain, *args, "-o", "kernel.o"], cwd=builds["build-a"], tmpdir=tmp_path / "plain-tmp")
    remove_files(builds["build-a"], expected)
    cache = Ccache(tmp_path / "ccache", prefix, nohashdir="1")
    served = []
    for build, output in (("build-a", "kernel.o"), ("build-a", "sub/other.o"), ("build-b", "kernel.o")):
        outcome = cache.compile(toolchain, [*args, "-o", output], cwd=builds[build], tmpdir=tmp_path / "tmp")
        assert outcome.returncode == 0 and sorted(outcome.files) == [output]
        assert mask(outcome.files[output]) == mask(expected.files["kernel.o"]), (build, output)
        served.append(cache.served())
    assert served == [{"cache_miss": 1}, {"cache_miss": 1, "direct_cache_hit": 1},
                      {"cache_miss": 1, "direct_cache_hit": 2}]  # fmt: skip
    assert len(cache.fast_nvcc_runs()) == 1


@pytest.mark.parametrize("source", ["syntax_error.cu", "device_error.cu"])
def test_failing_compile_gives_nvcc_error_and_is_not_cached(toolchain, prefix, sources, tmp_path, source):
    """A host-side error (nvcc's preprocessing, before fast_nvcc) and a device one (cicc, inside
    fast_nvcc's graph): nvcc's message and exit code, every time."""
    args = ["-c", source, "-arch=sm_80", "-MD"]
    expected = plain(toolchain, args, sources, tmp_path)
    assert expected.returncode != 0
    cache = Ccache(tmp_path / "ccache", prefix)
    for _ in range(2):
        failed = cache.compile(toolchain, args, cwd=sources, tmpdir=tmp_path / "tmp")
        assert_served(expected, failed, hit=False)
        remove_files(sources, failed)
    counts = cache.served()
    assert counts.get("direct_cache_hit", 0) + counts.get("preprocessed_cache_hit", 0) == 0, counts



def test_team_shares_one_redis(toolchain, prefix, sources, tmp_path, redis):
    """Two developers (two cache directories) and one Redis: the second one's compile is the
    first one's result, and runs nothing."""
    if "redis-storage" not in subprocess.run([CCACHE, "--version"], capture_output=True, text=True, check=False).stdout:
        pytest.skip("this ccache is built without Redis storage")
    args = ["-c", "kernel.cu", I, "-arch=sm_80", "-MD", "-o", "kernel.o"]
    expected = plain(toolchain, args, sources, tmp_path)
    first = Ccache(tmp_path / "first", prefix, remote_storage=redis.url)
    second = Ccache(tmp_path / "second", prefix, remote_storage=redis.url)

    stored = first.compile(toolchain, args, cwd=sources, tmpdir=tmp_path / "tmp")
    assert_served(expected, stored, hit=False)
    assert first.served().get("remote_storage_write", 0) >= 1
    remove_files(sources, stored)

    shared = second.compile(toolchain, args, cwd=sources, tmpdir=tmp_path / "tmp")
    counts = second.served()
    assert counts.get("remote_storage_hit") == 1 and "cache_miss" not in counts, counts
    assert second.fast_nvcc_runs() == []
    assert_served(expected, shared, hit=True)


def _corrupt(cache_dir: Path) -> int:
    count = 0
    for path in cache_dir.rglob("*"):
        if path.is_file() and path.suffix not in (".conf", ".lock") and path.name != "stats":
            path.write_bytes(b"\0garbage" * 8)
            count += 1
    return count


NOTHING_LOST = {
    # Every stored result and manifest overwritten: ccache finds the checksums wrong, compiles.
    "corrupted-cache": "corrupt",
    # A limit of 1 kB, far under one result: whether ccache keeps it or evicts it, the outputs
    # are nvcc's.
    "full-cache": "full",
    # The team's Redis is down (nothing listens on the port): ccache counts a remote storage
    # error, compiles, and serves the next compile from its local directory.
    "remote-storage-down": "down",
}


@pytest.mark.parametrize("case", sorted(NOTHING_LOST))
def test_nothing_lost_when_the_cache_cannot_serve(toolchain, prefix, sources, tmp_path, case):
    args = ["-c", "kernel.cu", I, "-arch=sm_80", "-MD", "-o", "kernel.o"]
    expected = plain(toolchain, args, sources, tmp_path)
    config = {"full": {"max_size": "1K"}, "down": {"remote_storage": f"redis://127.0.0.1:{free_port()}"}}
    cache = Ccache(tmp_path / "ccache", prefix, **config.get(NOTHING_LOST[case], {}))
    first = cache.compile(toolchain, args, cwd=sources, tmpdir=tmp_path / "tmp")
    assert_served(expected, first, hit=False)
    remove_files(sources, first)
    if NOTHING_LOST[case] == "corrupt":
        assert _corrupt(tmp_path / "ccache" / "cache") >= 1
    again = cache.compile(toolchain, args, cwd=sources, tmpdir=tmp_path / "tmp")
    compiled = len(cache.fast_nvcc_runs()) == 2
    if NOTHING_LOST[case] == "corrupt":
        assert compiled  # the broken entries served nothing: fast_nvcc compiled again
    assert_served(expected, again, hit=not compiled)
    if NOTHING_LOST[case] == "down":
        assert cache.stats()["remote_storage_error"] >= 1


def test_unusable_cache_dir_is_ccache_error_and_disable_compiles(toolchain, prefix, sources, tmp_path):
    """Out of fast_nvcc's reach: a CCACHE_DIR that cannot be created (under a plain file, so
    root too) stops ccache 4.7 with its own one-line error before it runs anything.
    CCACHE_DISABLE=1 is the way out: ccache then runs the prefixed compiler as is."""
    args = ["-c", "kernel.cu", I, "-arch=sm_80", "-MD", "-o", "kernel.o"]
    expected = plain(toolchain, args, sources, tmp_path)
    cache = Ccache(tmp_path / "ccache", prefix)
    (tmp_path / "a-file").write_text("")
    cache.env["CCACHE_DIR"] = str(tmp_path / "a-file" / "cache")
    refused = cache.compile(toolchain, args, cwd=sources, tmpdir=tmp_path / "tmp")
    assert refused.returncode != 0 and refused.files == {}
    assert refused.stderr.startswith(b"ccache: error: Failed to create directory")
    cache.env["CCACHE_DISABLE"] = "1"
    compiled = cache.compile(toolchain, args, cwd=sources, tmpdir=tmp_path / "tmp")
    assert_served(expected, compiled, hit=False)
    assert len(cache.fast_nvcc_runs()) == 1


@pytest.mark.cmake
def test_cmake_launcher_second_build_directory_hits(toolchain, prefix, tmp_path):
    """CMAKE_CUDA_COMPILER_LAUNCHER=ccache and CCACHE_PREFIX in the build's environment: the
    first build's compiles run through fast_nvcc, a second build directory of the same
    sources hits every one (CMake names sources by absolute path, objects relative to the build
    directory, so no base_dir is needed)."""
    for tool in ("cmake", "ninja"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed")
    source = tmp_path / "example"
    shutil.copytree(EXAMPLE, source)
    cache = Ccache(tmp_path / "ccache", prefix)
    env = {**os.environ, **cache.env}
    built = {}
    for name in ("build-a", "build-b"):
        build = tmp_path / name
        subprocess.run(["cmake", "-S", str(source), "-B", str(build), "-G", "Ninja", f"-DCMAKE_CUDA_COMPILER={toolchain}",
                        "-DCMAKE_CUDA_COMPILER_LAUNCHER=ccache"], env=env, check=True, capture_output=True)  # fmt: skip
        proc = subprocess.run(["cmake", "--build", str(build), "-j", "2", "-v"], env=env, capture_output=True,
                              text=True, check=False)  # fmt: skip
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "ccache" in proc.stdout  # the compiles went through the launcher
        built[name] = {str(p.relative_to(build)): p.read_bytes() for p in build.rglob("*.cu.o")}
        assert (build / "example").exists()
    assert len(built["build-a"]) == 5 and sorted(built["build-a"]) == sorted(built["build-b"])
    assert len(cache.fast_nvcc_runs()) == 5  # the first build's misses, through fast_nvcc
    assert cache.served() == {"cache_miss": 5, "direct_cache_hit": 5}
    for name, data in built["build-a"].items():
        assert mask(built["build-b"][name]) == mask(data), name
