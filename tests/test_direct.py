"""Direct mode (fast_nvcc/direct.py) against the real nvcc: what is served without running any
step, what misses, and that every served output is nvcc's (temp names masked; depfiles
byte for byte)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from fast_nvcc.direct import MARGIN_NS

from helpers import fast_nvcc_command, mask, run_tool

pytestmark = pytest.mark.nvcc

ARCHS_2 = ["-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=sm_90"]
ARGS = ["-c", "kernel.cu", "-Iinclude", *ARCHS_2, "-MD", "-o", "k.o"]


def settle(*paths: Path) -> None:
    """Wait until files just written are older than a compile that starts now, less direct
    mode's margin for coarse clocks: a file changed as the compile starts is never recorded."""
    newest = max(max(p.stat().st_mtime_ns, p.stat().st_ctime_ns) for p in paths)
    while time.time_ns() < newest + 2 * MARGIN_NS:
        time.sleep(0.01)


@pytest.fixture
def cache_dir(tmp_path) -> Path:
    return tmp_path / "cache"


@pytest.fixture
def src(sources) -> Path:
    settle(*[p for p in sources.rglob("*") if p.is_file()])
    return sources


def compile_cached(nvcc, cwd, tmp_path, cache_dir, args, *, env=None, options=()):
    """fast_nvcc --cache; returns (outcome, the FAST_NVCC_LOG record)."""
    log = tmp_path / "direct-log.jsonl"
    log.unlink(missing_ok=True)
    outcome = run_tool(fast_nvcc_command(nvcc, args, ["--cache", *options]), cwd=cwd, tmpdir=tmp_path / "tmp",
                       env={"FAST_NVCC_CACHE_DIR": str(cache_dir), "FAST_NVCC_LOG": str(log), **(env or {})})  # fmt: skip
    assert outcome.returncode == 0, outcome.stderr.decode()
    return outcome, json.loads(log.read_text())


def direct_outcome(record) -> str:
    return record.get("cache", {}).get("direct", "")


def assert_like_nvcc(nvcc, cwd, tmp_path, args, fast, *, env=None):
    """nvcc's own outputs for ``args``, and fast_nvcc's, compared (run in the same directory)."""
    for name in fast.files:
        (cwd / name).rename(cwd / (name + ".fast"))
    plain = run_tool([nvcc, *args], cwd=cwd, tmpdir=tmp_path / "ptmp", env=env)
    assert mask(fast.stderr) == mask(plain.stderr) and fast.stdout == plain.stdout
    assert sorted(fast.files) == sorted(plain.files)
    for name, data in plain.files.items():
        if name.endswith(".d"):
            assert fast.files[name] == data, name
        else:
            assert mask(fast.files[name]) == mask(data), name
    assert fast.leftovers == []


def test_unchanged_rebuild_runs_no_step(nvcc, src, tmp_path, cache_dir):
    _, cold = compile_cached(nvcc, src, tmp_path, cache_dir, ARGS)
    assert direct_outcome(cold) == "miss (never seen)" and cold["cache"]["misses"] == 6
    warm, record = compile_cached(nvcc, src, tmp_path, cache_dir, ARGS)
    assert direct_outcome(record) == "hit" and record["mode"] == "direct" and "steps" not in record
    assert sorted(warm.files) == ["k.d", "k.o"]
    assert_like_nvcc(nvcc, src, tmp_path, ARGS, warm)


def test_header_touched_without_change_still_hits(nvcc, src, tmp_path, cache_dir):
    compile_cached(nvcc, src, tmp_path, cache_dir, ARGS)
    header = src / "include" / "scale.h"
    header.write_bytes(header.read_bytes())  # new mtime, ctime; same content
    settle(header)
    warm, record = compile_cached(nvcc, src, tmp_path, cache_dir, ARGS)
    assert direct_outcome(record) == "hit"
    assert_like_nvcc(nvcc, src, tmp_path, ARGS, warm)


def test_header_edited_between_compiles_misses(nvcc, src, tmp_path, cache_dir):
    compile_cached(nvcc, src, tmp_path, cache_dir, ARGS)
    header = src / "include" / "scale.h"
    header.write_text(header.read_text().replace("value * factor", "value * factor + T(1)"))
    settle(header)
    fast, record = compile_cached(nvcc, src, tmp_path, cache_dir, ARGS)
    assert direct_outcome(record) == "miss (include/scale.h changed)"
    # Host and device code changed: every step ran, nothing stale was served.
    assert record["cache"]["tools"]["cicc"] == {"hits": 0, "misses": 2}
    assert_like_nvcc(nvcc, src, tmp_path, ARGS, fast)
    again, record = compile_cached(nvcc, src, tmp_path, cache_dir, ARGS)
    assert direct_outcome(record) == "hit"
    assert_like_nvcc(nvcc, src, tmp_path, ARGS, again)


@pytest.mark.parametrize(
    "variable",
    [{"NVCC_APPEND_FLAGS": "-DSCALE_EXTRA=1"}, {"NVCC_PREPEND_FLAGS": "-Xptxas -O2"}, {"CPATH": "/nonexistent"}],
    ids=lambda v: next(iter(v)),
)
def test_a_variable_nvcc_reads_misses(nvcc, src, tmp_path, cache_dir, variable):
    compile_cached(nvcc, src, tmp_path, cache_dir, ARGS)
    fast, record = compile_cached(nvcc, src, tmp_path, cache_dir, ARGS, env=variable)
    assert direct_outcome(record) == "miss (never seen)"
    assert_like_nvcc(nvcc, src, tmp_path, ARGS, fast, env=variable)
    again, record = compile_cached(nvcc, src, tmp_path, cache_dir, ARGS, env=variable)
    assert direct_outcome(record) == "hit"
    _, record = compile_cached(nvcc, src, tmp_path, cache_dir, ARGS)
    assert direct_outcome(record) == "hit"  # the first variant is still there


def test_a_define_misses(nvcc, src, tmp_path, cache_dir):
    compile_cached(nvcc, src, tmp_path, cache_dir, [*ARGS, "-DLEVEL=1"])
    fast, record = compile_cached(nvcc, src, tmp_path, cache_dir, [*ARGS, "-DLEVEL=2"])
    assert direct_outcome(record).startswith("miss")
    assert_like_nvcc(nvcc, src, tmp_path, [*ARGS, "-DLEVEL=2"], fast)


def test_time_macros_are_never_served(nvcc, src, tmp_path, cache_dir):
    (src / "stamp.cu").write_text('const char *built = __DATE__ " " __TIME__;\n__global__ void k() {}\n')
    settle(src / "stamp.cu")
    args = ["-c", "stamp.cu", "-arch=sm_80"]
    _, record = compile_cached(nvcc, src, tmp_path, cache_dir, args)
    assert "uses __DATE__, __TIME__ or __TIMESTAMP__" in record["cache"]["direct_note"]
    _, record = compile_cached(nvcc, src, tmp_path, cache_dir, args)
    assert direct_outcome(record) == "miss (never seen)"


def test_warnings_are_replayed(nvcc, src, tmp_path, cache_dir):
    args = ["-c", "warning.cu", *ARCHS_2, "-Xptxas", "-v"]
    compile_cached(nvcc, src, tmp_path, cache_dir, args)
    fast, record = compile_cached(nvcc, src, tmp_path, cache_dir, args)
    assert direct_outcome(record) == "hit" and b"warning #177-D" in fast.stderr
    assert_like_nvcc(nvcc, src, tmp_path, args, fast)


def test_another_build_directory_hits(nvcc, src, tmp_path, cache_dir):
    """CMake's form: absolute source and include paths, outputs relative to the build
    directory; a second, fresh build directory is served from the first one's entries."""
    args = ["-c", str(src / "kernel.cu"), f"-I{src / 'include'}", *ARCHS_2, "-MD", "-MT", "obj/k.o", "-MF",
            "obj/k.o.d", "-o", "obj/k.o"]  # fmt: skip
    for name in ("build1", "build2"):
        (tmp_path / name / "obj").mkdir(parents=True)
    compile_cached(nvcc, tmp_path / "build1", tmp_path, cache_dir, args)
    fast, record = compile_cached(nvcc, tmp_path / "build2", tmp_path, cache_dir, args)
    assert direct_outcome(record) == "hit"
    assert_like_nvcc(nvcc, tmp_path / "build2", tmp_path, args, fast)


def test_debug_info_keeps_the_directory_in_the_key(nvcc, src, tmp_path, cache_dir):
    shutil.copytree(src, tmp_path / "src2")
    settle(*[p for p in (tmp_path / "src2").rglob("*") if p.is_file()])
    args = ["-c", "kernel.cu", "-Iinclude", "-arch=sm_80", "-g"]
    compile_cached(nvcc, src, tmp_path, cache_dir, args)
    _, record = compile_cached(nvcc, tmp_path / "src2", tmp_path, cache_dir, args)
    assert direct_outcome(record) == "miss (never seen)"


def test_header_edited_during_the_compile_is_not_recorded(nvcc, src, tmp_path, cache_dir):
    """A host compiler that edits the header right after preprocessing it: what was hashed
    after the compile is not what was read, so nothing may be recorded."""
    header = src / "include" / "scale.h"
    wrapper = tmp_path / "bin" / "gcc"
    wrapper.parent.mkdir()
    flag = tmp_path / "edited"
    wrapper.write_text(
        "#!/bin/sh\n"
        f'gcc "$@" || exit $?\n'
        f'case " $* " in *" -E "*) if [ ! -e {flag} ]; then touch {flag};'
        f" echo '// edited while compiling' >> {header}; fi;; esac\n"
    )
    wrapper.chmod(0o755)
    args = [*ARGS, "-ccbin", str(wrapper)]
    _, record = compile_cached(nvcc, src, tmp_path, cache_dir, args)
    assert "include/scale.h changed while the compile ran" in record["cache"]["direct_note"]
    settle(header)
    fast, record = compile_cached(nvcc, src, tmp_path, cache_dir, args)
    assert direct_outcome(record) == "miss (never seen)"
    assert_like_nvcc(nvcc, src, tmp_path, args, fast)


def test_summary_and_stats_say_what_served(nvcc, src, tmp_path, cache_dir):
    compile_cached(nvcc, src, tmp_path, cache_dir, ARGS)
    fast, _ = compile_cached(nvcc, src, tmp_path, cache_dir, ARGS, options=["--summary"])
    assert b"cache: direct hit, no step ran" in fast.stderr
    env = {**os.environ, "FAST_NVCC_CACHE_DIR": str(cache_dir)}
    stats = subprocess.run(fast_nvcc_command(nvcc, [])[:3] + ["cache", "stats", "--json"], env=env,
                           capture_output=True, text=True, check=True)  # fmt: skip
    document = json.loads(stats.stdout)
    assert document["direct"] == {"hits": 1, "misses": 1}
    assert document["tools"]["cicc"] == {"hits": 0, "misses": 2}
    text = subprocess.run(fast_nvcc_command(nvcc, [])[:3] + ["cache", "stats"], env=env, capture_output=True,
                          text=True, check=True).stdout  # fmt: skip
    assert "direct hits" in text


@pytest.mark.cmake
def test_fresh_cmake_build_directory_is_served_from_the_cache(nvcc, tmp_path, cache_dir):
    """FAST_NVCC_CACHE=1 with fast_nvcc as CMake's launcher: a second, fresh build directory of
    the unchanged project compiles nothing; its objects are plain nvcc's."""
    from conftest import TOOLCHAINS
    from test_cmake import EXAMPLE, build, configure, needs, objects

    if nvcc != TOOLCHAINS[0]:
        pytest.skip("one toolchain is enough: direct mode's keys are covered on both by the tests above")
    needs("cmake")
    needs("ninja")
    source = tmp_path / "example"
    shutil.copytree(EXAMPLE, source)
    settle(*[p for p in source.rglob("*") if p.is_file()])
    for name, launch in (("plain", False), ("first", True), ("second", True)):
        configure(source, tmp_path / name, "Ninja", nvcc, use_launcher=launch)
    log = tmp_path / "build-log.jsonl"
    env = {"FAST_NVCC_CACHE": "1", "FAST_NVCC_CACHE_DIR": str(cache_dir), "FAST_NVCC_LOG": str(log)}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        build(tmp_path / "first")
        log.unlink()
        build(tmp_path / "second")
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    build(tmp_path / "plain")
    records = [json.loads(line) for line in log.read_text().splitlines()]
    compiles = [r for r in records if "-c" in r["args"] or "-dc" in r["args"]]
    assert len(compiles) == 5 and all(direct_outcome(r) == "hit" for r in compiles)
    expected, got = objects(tmp_path / "plain"), objects(tmp_path / "second")
    assert sorted(got) == sorted(expected)
    for name, data in expected.items():
        assert mask(got[name]) == mask(data), name
