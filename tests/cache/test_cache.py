"""The per-step cache against the real nvcc: what hits, what misses, and that a hit's outputs are
nvcc's (temp names masked)."""

from __future__ import annotations

import json
import os
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from helpers import compare, fast_nvcc_command, mask, run_tool

from fast_nvcc.cache.store import StepCache
from fast_nvcc.settings import size

# fast_nvcc's own decisions (conftest), which no load changes: run beside other tests (pyproject.toml)
pytestmark = [pytest.mark.nvcc, pytest.mark.one_toolchain, pytest.mark.side_by_side]

ARCHS_2 = ["-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=sm_90"]
ARCH_75 = ["-gencode", "arch=compute_75,code=sm_75"]


@pytest.fixture
def cache_dir(tmp_path) -> Path:
    return tmp_path / "cache"


def cached_compile(nvcc, sources, tmp_path, cache_dir, args, *, env=None, split=False):
    """One fast_nvcc --cache compile, the host compile unsplit unless ``split`` (split around
    fatbinary); returns (outcome, {tool: (hits, misses)})."""
    log = log_of(tmp_path)
    log.unlink(missing_ok=True)
    outcome = run_tool(
        fast_nvcc_command(nvcc, args, ["--cache"]),
        cwd=sources,
        tmpdir=tmp_path / "tmp",
        env={"FAST_NVCC_CACHE_DIR": str(cache_dir), "FAST_NVCC_LOG": str(log),
             **({} if split else {"FAST_NVCC_SPLIT_HOST": "0"}),
             **(env or {})},
    )  # fmt: skip
    record = last_record(tmp_path)
    tools = {tool: (c["hits"], c["misses"]) for tool, c in record.get("cache", {}).get("tools", {}).items()}
    return outcome, tools


def log_of(tmp_path) -> Path:
    return tmp_path / "log.jsonl"


def last_record(tmp_path) -> dict:
    """FAST_NVCC_LOG's record of the last cached_compile."""
    return json.loads(log_of(tmp_path).read_text())


def steps_of(tmp_path):
    """What each step of the last cached_compile did: tool, state, cached, and any guess or stop."""
    record = last_record(tmp_path)
    keep = ("tool", "arch", "state", "cached", "guess_failed", "memory_evicted", "oom_rerun", "stops_at")
    return [{k: s[k] for k in keep if k in s} for s in record["steps"]]


def plain(nvcc, sources, tmp_path, args):
    return run_tool([nvcc, *args], cwd=sources, tmpdir=tmp_path / "ptmp")


def assert_outputs_match_nvcc(nvcc, sources, tmp_path, args, fast):
    expected = plain(nvcc, sources, tmp_path, args)
    assert fast.returncode == expected.returncode
    assert mask(fast.stderr) == mask(expected.stderr)
    assert sorted(fast.files) == sorted(expected.files)
    for name, data in expected.files.items():
        assert mask(fast.files[name]) == mask(data), name


def test_unchanged_rebuild_hits_everything(nvcc, sources, tmp_path, cache_dir):
    args = ["-c", "kernel.cu", "-Iinclude", *ARCHS_2, "-MD"]
    _, cold = cached_compile(nvcc, sources, tmp_path, cache_dir, args)
    assert cold == {"cudafe++": (0, 1), "cicc": (0, 2), "ptxas": (0, 2), "gcc -c": (0, 1)}
    warm, tools = cached_compile(nvcc, sources, tmp_path, cache_dir, args)
    assert tools == {"cudafe++": (1, 0), "cicc": (2, 0), "ptxas": (2, 0), "gcc -c": (1, 0)}
    assert warm.leftovers == []
    assert_outputs_match_nvcc(nvcc, sources, tmp_path, args, warm)


def test_one_more_architecture_runs_only_its_cicc_and_ptxas(nvcc, sources, tmp_path, cache_dir):
    args = ["-c", "kernel.cu", "-Iinclude"]
    cached_compile(nvcc, sources, tmp_path, cache_dir, [*args, *ARCHS_2])
    fast, tools = cached_compile(nvcc, sources, tmp_path, cache_dir, [*args, *ARCH_75, *ARCHS_2])
    # The new architecture's cicc and ptxas miss; cudafe++ (same host code) hits; the host
    # compile embeds a new fatbinary, so it runs.
    assert tools == {"cudafe++": (1, 0), "cicc": (2, 1), "ptxas": (2, 1), "gcc -c": (0, 1)}
    assert_outputs_match_nvcc(nvcc, sources, tmp_path, [*args, *ARCH_75, *ARCHS_2], fast)


def test_host_only_flag_change_hits_the_device_steps(nvcc, sources, tmp_path, cache_dir):
    args = ["-c", "kernel.cu", "-Iinclude", *ARCHS_2]
    cached_compile(nvcc, sources, tmp_path, cache_dir, [*args, "-Xcompiler", "-O1"])
    fast, tools = cached_compile(nvcc, sources, tmp_path, cache_dir, [*args, "-Xcompiler", "-O2"])
    assert tools["cicc"] == (2, 0) and tools["ptxas"] == (2, 0)
    assert tools["gcc -c"] == (0, 1)
    assert_outputs_match_nvcc(nvcc, sources, tmp_path, [*args, "-Xcompiler", "-O2"], fast)


def test_host_only_edit_reruns_cicc_and_ptxas_hits(nvcc, sources, tmp_path, cache_dir):
    args = ["-c", "kernel.cu", "-Iinclude", *ARCHS_2]
    cached_compile(nvcc, sources, tmp_path, cache_dir, args)
    with open(sources / "kernel.cu", "a") as handle:
        handle.write("int host_only_addition() { return 7; }\n")
    fast, tools = cached_compile(nvcc, sources, tmp_path, cache_dir, args)
    # cicc's preprocessed input changed, its PTX did not: every ptxas hits.
    assert tools["cicc"] == (0, 2) and tools["ptxas"] == (2, 0)
    assert_outputs_match_nvcc(nvcc, sources, tmp_path, args, fast)


def test_device_only_difference_under_cuda_arch_misses(nvcc, sources, tmp_path, cache_dir):
    """Same host code, different device code: the trap of caching on the host's view."""
    trap = sources / "trap.cu"
    template = (
        "#ifdef __CUDA_ARCH__\n__device__ int value() { return %d; }\n#else\nint value() { return 0; }\n#endif\n"
        "__global__ void k(int *p) {\n#ifdef __CUDA_ARCH__\n p[0] = value();\n#endif\n}\n"
    )
    args = ["-c", "trap.cu", *ARCHS_2]
    trap.write_text(template % 1)
    cached_compile(nvcc, sources, tmp_path, cache_dir, args)
    trap.write_text(template % 2)
    fast, tools = cached_compile(nvcc, sources, tmp_path, cache_dir, args)
    assert tools["cicc"] == (0, 2) and tools["cudafe++"] == (1, 0)
    assert_outputs_match_nvcc(nvcc, sources, tmp_path, args, fast)


def test_warnings_come_back_on_a_hit(nvcc, sources, tmp_path, cache_dir):
    args = ["-c", "warning.cu", *ARCHS_2, "-Xptxas", "-v"]
    cached_compile(nvcc, sources, tmp_path, cache_dir, args)
    first = steps_of(tmp_path)
    fast, tools = cached_compile(nvcc, sources, tmp_path, cache_dir, args)
    # (once in CI under load, 2026-12-06: 5 hits; what each step did says which missed, and why)
    assert sum(h for h, _ in tools.values()) == 6, (tools, first, steps_of(tmp_path))
    assert b"warning #177-D" in fast.stderr
    assert_outputs_match_nvcc(nvcc, sources, tmp_path, args, fast)


def test_a_corrupt_entry_is_a_miss_and_goes_away(nvcc, sources, tmp_path, cache_dir):
    args = ["-c", "kernel.cu", "-Iinclude", *ARCHS_2]
    cached_compile(nvcc, sources, tmp_path, cache_dir, args)
    entries = sorted((cache_dir / "steps").rglob("*"))
    files = [p for p in entries if p.is_file()]
    assert len(files) == 6
    victim = files[0]
    data = bytearray(victim.read_bytes())
    data[-10] ^= 0xFF  # one flipped byte in the payload
    victim.write_bytes(bytes(data))
    (files[1]).write_bytes(b"truncated")
    fast, tools = cached_compile(nvcc, sources, tmp_path, cache_dir, args)
    assert sum(m for _, m in tools.values()) == 2 and sum(h for h, _ in tools.values()) == 4
    assert_outputs_match_nvcc(nvcc, sources, tmp_path, args, fast)
    _, tools = cached_compile(nvcc, sources, tmp_path, cache_dir, args)
    assert sum(m for _, m in tools.values()) == 0  # the bad entries were replaced


def test_eviction_keeps_the_cache_under_its_limit(nvcc, sources, tmp_path, cache_dir):
    # One compile of kernel.cu stores about 1.3 MB (cudafe++'s .cudafe1.cpp is most of it).
    limit = size("2.5M", "FAST_NVCC_CACHE_SIZE")
    env = {"FAST_NVCC_CACHE_SIZE": "2.5M"}
    for arch in ("75", "80", "86", "90"):
        args = ["-c", "kernel.cu", "-Iinclude", "-arch", f"sm_{arch}", "-o", f"k{arch}.o"]
        fast, _ = cached_compile(nvcc, sources, tmp_path, cache_dir, args, env=env)
        assert fast.returncode == 0
    stats = StepCache(str(cache_dir), size_limit=limit).stats()
    on_disk = sum(p.stat().st_size for p in (cache_dir / "steps").rglob("*") if p.is_file())
    assert stats["bytes"] == on_disk <= limit
    assert 0 < stats["entries"] < 4 * 4  # some went
    # The most recent compile's entries survive.
    _, tools = cached_compile(nvcc, sources, tmp_path, cache_dir,
                              ["-c", "kernel.cu", "-Iinclude", "-arch", "sm_90", "-o", "k90.o"], env=env)  # fmt: skip
    assert tools == {"cudafe++": (1, 0), "cicc": (1, 0), "ptxas": (1, 0), "gcc -c": (1, 0)}


def test_concurrent_processes_share_one_cache(nvcc, sources, tmp_path, cache_dir):
    (tmp_path / "tmp").mkdir()
    env = {**os.environ, "FAST_NVCC_CACHE_DIR": str(cache_dir), "TMPDIR": str(tmp_path / "tmp")}

    def compile_one(i: int) -> int:
        args = ["-c", "kernel.cu", "-Iinclude", *ARCHS_2, "-o", f"out{i}.o"]
        return subprocess.run(fast_nvcc_command(nvcc, args, ["--cache"]), cwd=sources, env=env,
                              capture_output=True).returncode  # fmt: skip

    with ThreadPoolExecutor(8) as pool:
        assert list(pool.map(compile_one, range(8))) == [0] * 8
    expected = plain(nvcc, sources, tmp_path, ["-c", "kernel.cu", "-Iinclude", *ARCHS_2, "-o", "ref.o"])
    reference = mask(expected.files["ref.o"])
    for i in range(8):
        assert mask((sources / f"out{i}.o").read_bytes()) == reference
    _, tools = cached_compile(nvcc, sources, tmp_path, cache_dir, ["-c", "kernel.cu", "-Iinclude", *ARCHS_2, "-o", "out0.o"])
    assert sum(m for _, m in tools.values()) == 0  # no entry was lost or left corrupt


def test_stats_and_clear(nvcc, sources, tmp_path, cache_dir):
    args = ["-c", "kernel.cu", "-Iinclude", "-arch=sm_80"]
    cached_compile(nvcc, sources, tmp_path, cache_dir, args)
    cached_compile(nvcc, sources, tmp_path, cache_dir, args)
    env = {**os.environ, "FAST_NVCC_CACHE_DIR": str(cache_dir)}
    stats = subprocess.run(fast_nvcc_command(nvcc, [])[:3] + ["cache", "stats", "--json"], env=env,
                           capture_output=True, text=True)  # fmt: skip
    document = json.loads(stats.stdout)
    assert document["entries"] == 4 and document["tools"]["cicc"] == {"hits": 1, "misses": 1}
    text = subprocess.run(fast_nvcc_command(nvcc, [])[:3] + ["cache", "stats"], env=env, capture_output=True, text=True)
    assert "hit rate" in text.stdout and "cicc" in text.stdout
    subprocess.run(fast_nvcc_command(nvcc, [])[:3] + ["cache", "clear"], env=env, check=True, capture_output=True)
    assert not (cache_dir / "steps").exists()


def test_summary_reports_hits(nvcc, sources, tmp_path, cache_dir):
    args = ["-c", "kernel.cu", "-Iinclude", "-arch=sm_80"]
    cached_compile(nvcc, sources, tmp_path, cache_dir, args)
    # Another TMPDIR: the device steps still hit; the host compile's object names its input.
    outcome = run_tool(fast_nvcc_command(nvcc, args, ["--cache", "--summary"]), cwd=sources, tmpdir=tmp_path / "t",
                       env={"FAST_NVCC_CACHE_DIR": str(cache_dir), "FAST_NVCC_SPLIT_HOST": "0"})  # fmt: skip
    # The tools in the plan's order: nvcc 11.8's runs cicc before cudafe++.
    found = re.search(rb"cache: 3 hits, 1 misses \((.*) hit\)", outcome.stderr)
    assert found, outcome.stderr.decode()
    tools = sorted(found[1].split(b", "))
    assert tools == [b"cicc 1/1", b"cudafe++ 1/1", b"gcc -c 0/1", b"ptxas 1/1"]


def test_cache_off_by_default_and_outputs_same(nvcc, sources, tmp_path, cache_dir):
    result = compare(nvcc, ["-c", "kernel.cu", "-Iinclude", *ARCHS_2], cwd=sources,
                     env={"FAST_NVCC_CACHE_DIR": str(cache_dir)})  # fmt: skip
    assert not (cache_dir / "steps").exists()
    assert mask(result.fast.files["kernel.o"]) == mask(result.plain.files["kernel.o"])


def test_bad_size_is_one_line(nvcc, sources, tmp_path, cache_dir):
    outcome = run_tool(fast_nvcc_command(nvcc, ["-c", "kernel.cu", "-Iinclude"], ["--cache"]), cwd=sources,
                       tmpdir=tmp_path / "t", env={"FAST_NVCC_CACHE_DIR": str(cache_dir), "FAST_NVCC_CACHE_SIZE": "lots"})  # fmt: skip
    assert outcome.returncode == 2
    assert outcome.stderr.decode().splitlines() == ["fast_nvcc: error: FAST_NVCC_CACHE_SIZE='lots': use a size such as 500M or 5G"]
    assert outcome.leftovers == []


# -- what a key leaves out -------------------------------------------------------------------


def joined_compile(nvcc, sources, tmp_path, cache_dir, args, options):
    """A compile whose stdout and stderr are one file, as on a terminal or under 2>&1."""
    log = tmp_path / "joined.jsonl"
    log.unlink(missing_ok=True)
    # unsplit, as cached_compile's (a split front's cc1plus has an entry of its own)
    env = {**os.environ, "FAST_NVCC_CACHE_DIR": str(cache_dir), "FAST_NVCC_LOG": str(log),
           "TMPDIR": str(tmp_path / "tmp"), "FAST_NVCC_SPLIT_HOST": "0"}  # fmt: skip
    (tmp_path / "tmp").mkdir(exist_ok=True)
    proc = subprocess.run(fast_nvcc_command(nvcc, args, ["--cache", *options]), cwd=sources, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
    record = json.loads(log.read_text())
    return proc, {tool: (c["hits"], c["misses"]) for tool, c in record["cache"]["tools"].items()}


REPORT_OPTIONS = [["--summary"], ["-v"], ["--table", "t.csv"], ["--trace", "t.json"], ["--graph", "g.dot"], []]


@pytest.mark.parametrize("options", REPORT_OPTIONS, ids=lambda o: " ".join(o) or "2>&1")
def test_reports_and_joined_output_change_no_key(nvcc, sources, tmp_path, cache_dir, options):
    """The issue's case: --summary, read with 2>&1, missed every step.  How fast_nvcc's output
    is captured is no part of any key."""
    args = ["-c", "kernel.cu", "-Iinclude", "-arch=sm_80", "-o", "a.o"]
    cached_compile(nvcc, sources, tmp_path, cache_dir, args)
    proc, tools = joined_compile(nvcc, sources, tmp_path, cache_dir, args, options)
    assert proc.returncode == 0, proc.stdout
    assert tools == {"cudafe++": (1, 0), "cicc": (1, 0), "ptxas": (1, 0), "gcc -c": (1, 0)}


def test_warnings_kept_apart_replay_onto_one_file(nvcc, sources, tmp_path, cache_dir):
    args = ["-c", "warning.cu", *ARCHS_2]
    cached_compile(nvcc, sources, tmp_path, cache_dir, args)
    proc, tools = joined_compile(nvcc, sources, tmp_path, cache_dir, args, [])
    assert sum(m for _, m in tools.values()) == 0
    expected = subprocess.run([nvcc, *args], cwd=sources, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert mask(proc.stdout) == mask(expected.stdout)


def test_object_name_is_not_in_the_host_compile_key(nvcc, sources, tmp_path, cache_dir):
    base = ["-c", "kernel.cu", "-Iinclude", *ARCHS_2]
    cached_compile(nvcc, sources, tmp_path, cache_dir, [*base, "-o", "a.o"])
    fast, tools = cached_compile(nvcc, sources, tmp_path, cache_dir, [*base, "-o", "b.o"])
    assert tools["gcc -c"] == (1, 0)
    assert_outputs_match_nvcc(nvcc, sources, tmp_path, [*base, "-o", "b.o"], fast)


def test_object_name_stays_in_the_key_where_it_reaches_the_object(nvcc, sources, tmp_path, cache_dir):
    base = ["-c", "kernel.cu", "-Iinclude", "-arch=sm_80", "-Xcompiler", "-gsplit-dwarf,-g"]
    cached_compile(nvcc, sources, tmp_path, cache_dir, [*base, "-o", "a.o"])
    fast, tools = cached_compile(nvcc, sources, tmp_path, cache_dir, [*base, "-o", "b.o"])
    assert tools["gcc -c"] == (0, 1) and tools["cicc"] == (1, 0)
    assert fast.returncode == 0 and b"b.dwo" in fast.files["b.o"]


# gcc itself, on the .cudafe1.cpp nvcc makes: which host options let the object depend on its
# name or on the working directory (fast_nvcc.cache.keys.NAME_REACHES).
GCC_CASES = [
    ([], False), (["-O2"], False), (["-fPIC", "-ffunction-sections"], False), (["-g0"], False),
    (["-frecord-gcc-switches"], False),
    (["-g"], True), (["-gsplit-dwarf", "-g"], True), (["--coverage"], True), (["-fprofile-generate"], True), (["-flto"], True),
]  # fmt: skip


@pytest.fixture(scope="module")
def host_compile(tmp_path_factory) -> tuple[Path, list[str]]:
    """kernel.cu's .cudafe1.cpp and friends, kept by the nvcc on PATH (-keep), and the host
    compile of nvcc's plan for it, without its -o."""
    import shlex
    import shutil

    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("no nvcc on PATH")
    from helpers import copy_sources

    src = copy_sources(tmp_path_factory.mktemp("keep") / "src")
    args = [nvcc, "-keep", "-c", "kernel.cu", "-Iinclude", "-arch=sm_80"]
    subprocess.run(args, cwd=src, check=True, capture_output=True)
    plan = subprocess.run([*args, "--dryrun"], cwd=src, capture_output=True, text=True).stderr
    (line,) = [l[3:] for l in plan.splitlines() if l.startswith("#$ gcc") and " -c " in l]
    words = shlex.split(line)
    at = words.index("-o")
    words = words[:at] + words[at + 2 :]
    include = str(src / "include")
    return src, [str(src / w) if w.endswith(".cudafe1.cpp") else "-I" + include if w == "-Iinclude" else w for w in words]


@pytest.mark.parametrize(("flags", "reaches"), GCC_CASES, ids=lambda c: " ".join(c) if isinstance(c, list) else str(c))
def test_gcc_object_depends_on_its_name_only_under_name_reaches(host_compile, tmp_path, flags, reaches):
    from fast_nvcc.cache.keys import name_reaches_object

    src, command = host_compile
    command = [*command, *flags]
    (tmp_path / "elsewhere").mkdir()
    subprocess.run([*command, "-o", str(tmp_path / "a.o")], cwd=src, check=True)
    subprocess.run([*command, "-o", str(tmp_path / "longer_name.o")], cwd=src, check=True)
    same_name = (tmp_path / "a.o").read_bytes() == (tmp_path / "longer_name.o").read_bytes()
    subprocess.run([*command, "-o", "a.o"], cwd=tmp_path / "elsewhere", check=True)
    same_dir = (tmp_path / "a.o").read_bytes() == (tmp_path / "elsewhere" / "a.o").read_bytes()
    assert name_reaches_object(["gcc", *flags]) == reaches
    if not reaches:
        assert same_name and same_dir
    else:
        assert not (same_name and same_dir)


# -- the split host compile with the cache ---------------------------------------------------


def test_split_host_compile_with_the_cache(nvcc, sources, tmp_path, cache_dir):
    """The host compile starts before fatbinary with --cache too: cc1plus's assembly is cached
    on what it reads (the placeholder .fatbin.c), the object once the real one is there."""
    trap = sources / "trap.cu"
    template = (
        "#ifdef __CUDA_ARCH__\n__device__ int value() { return %d; }\n#else\nint value() { return 0; }\n#endif\n"
        "__global__ void k(int *p) {\n#ifdef __CUDA_ARCH__\n p[0] = value();\n#endif\n}\n"
    )
    trap.write_text(template % 1)
    args = ["-c", "trap.cu", *ARCHS_2]
    # The first compile with this cache directory teaches the placeholder (guess/host_split.py).
    cached_compile(nvcc, sources, tmp_path, cache_dir, ["-c", "kernel.cu", "-Iinclude", "-arch=sm_80"], split=True)
    cold, tools = cached_compile(nvcc, sources, tmp_path, cache_dir, args, split=True)
    assert tools["cc1plus"] == (0, 1) and tools["as"] == (0, 1)  # split, and stored
    assert_outputs_match_nvcc(nvcc, sources, tmp_path, args, cold)
    warm, tools = cached_compile(nvcc, sources, tmp_path, cache_dir, args, split=True)
    assert tools["cc1plus"] == (1, 0) and tools["gcc -c"] == (1, 0)
    assert_outputs_match_nvcc(nvcc, sources, tmp_path, args, warm)
    # Device code changed, host code not: cudafe++'s output and so the assembly are the same;
    # only as runs, on the new fatbinary's data.
    trap.write_text(template % 2)
    device, tools = cached_compile(nvcc, sources, tmp_path, cache_dir, args, split=True)
    assert tools["cicc"] == (0, 2) and tools["cc1plus"] == (1, 0) and tools["as"] == (0, 1)
    assert_outputs_match_nvcc(nvcc, sources, tmp_path, args, device)
