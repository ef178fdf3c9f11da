"""$TMPDIR: a full one makes the compile fail the way nvcc fails, saying why; and after any
compile, successful, failing or interrupted, it holds exactly what it held before."""

from __future__ import annotations

import dataclasses
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from helpers import Comparison, Outcome, assert_same, compare, fast_nvcc_command, mask, run_tool

pytestmark = [pytest.mark.nvcc, pytest.mark.side_by_side]  # compares outputs only: scripts/test runs it beside other tests (pyproject.toml)

I = "-Iinclude"
GENCODE_2 = ["-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=sm_90"]


@pytest.fixture
def small_filesystem(tmp_path):
    """A tmpfs of a given size (KiB), mounted for the test; skipped where mount is refused."""
    mounted: list[Path] = []

    def mount(kib: int) -> Path:
        point = tmp_path / f"fs{len(mounted)}"
        point.mkdir()
        proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={kib}k", "tmpfs", str(point)],
                              capture_output=True, text=True, check=False)  # fmt: skip
        if proc.returncode != 0:
            pytest.skip(f"cannot mount a small tmpfs here (root and CAP_SYS_ADMIN needed): {proc.stderr.strip()}")
        mounted.append(point)
        return point / "tmp"  # run_tool makes it anew inside the mount for each run

    yield mount
    for point in mounted:
        subprocess.run(["umount", "-l", str(point)], check=False)


def test_full_tmpdir_says_why_as_nvcc_does(nvcc, sources, small_filesystem):
    """Room for nvcc's planning but not for the host preprocessing's output: gcc's message and
    exit code.  fast_nvcc used to capture each step's stderr in $TMPDIR too, where gcc could not
    write its message: it exited 1 and printed nothing."""
    tmpdir = small_filesystem(320)
    result = compare(nvcc, ["-c", "kernel.cu", I, "-arch=sm_80", "-o", "kernel.o"], cwd=sources, tmpdir=tmpdir)
    assert result.plain.returncode != 0 and b"fatal error: when writing output to" in result.plain.stderr
    # gcc names errno as it is when it notices the failed write, at the end: "No space left on
    # device" if the last write failed, else that of a later call ("No such file or directory"
    # from its header search).  How early the disk fills depends on what else writes to it, so
    # either may come from nvcc and from fast_nvcc alike: everything else must be the same.
    assert_same(Comparison(_errno_masked(result.plain), _errno_masked(result.fast)))


def _errno_masked(outcome: Outcome) -> Outcome:
    stderr = re.sub(rb"(when writing output to \S+): (No space left on device|No such file or directory)$",
                    rb"\1: <errno>", outcome.stderr, flags=re.M)  # fmt: skip
    return dataclasses.replace(outcome, stderr=stderr)


@pytest.mark.parametrize("options", [[], ["--sequential"]])
def test_nearly_full_tmpdir_says_why(nvcc, sources, small_filesystem, options):
    """Room for the first steps, not for all of them.  Steps that run side by side fill the
    file system in another order than nvcc's one after the other, so the step that finds it
    full may be another one: its own message says so, and nothing is left behind."""
    tmpdir = small_filesystem(2048)
    result = compare(nvcc, ["-c", "kernel.cu", I, "-arch=sm_80", "-o", "kernel.o"], cwd=sources, tmpdir=tmpdir,
                     options=options)  # fmt: skip
    assert result.plain.returncode != 0 and b"error" in result.plain.stderr
    assert result.fast.returncode != 0
    # The tool's own words: gcc's and cudafe++'s "No space left on device"; the PyPI 13.5 cicc
    # aborts on an internal assertion instead, which sh reports as "Aborted" (as under nvcc).
    assert b"error" in result.fast.stderr, result.fast.stderr
    assert b"Traceback" not in result.fast.stderr
    assert result.fast.files == {} and result.fast.leftovers == []


def _defaults_env(tmp_path: Path) -> dict[str, str]:
    """fast_nvcc's own defaults: the cache and history under HOME, the slot pool in its
    machine-wide place (an empty value is an unset one: the test session's choices go)."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return {"HOME": str(home), "FAST_NVCC_CACHE_DIR": "", "FAST_NVCC_POOL_DIR": "", "XDG_RUNTIME_DIR": "",
            "XDG_CACHE_HOME": ""}  # fmt: skip


KINDS = {
    "object": ([], ["-c", "kernel.cu", I, "-arch=sm_80", "-MD"]),
    "cache-cold-then-hit": (["--cache"], ["-c", "kernel.cu", I, "-arch=sm_80"]),
    "device-trace-and-reports": (["--device-trace", "--summary", "--trace", "t.json"], ["-c", "kernel.cu", I, "-arch=sm_80"]),
    "fdevice-time-trace": ([], ["-c", "kernel.cu", I, "-arch=sm_80", "--fdevice-time-trace", "tt"]),
    "library": ([], ["-lib", "kernel.cu", "warning.cu", I, "-arch=sm_80", "-o", "libk.a"]),
    "ptx-checked": ([], ["-ptx", "kernel.cu", I, "-arch=sm_90"]),
    "faithful-threads": (["--faithful"], ["-c", "kernel.cu", I, "-arch=sm_80", "-t", "2"]),
    "compile-error": ([], ["-c", "syntax_error.cu", "-arch=sm_80", "-MD"]),
    "device-error": (["--cache"], ["-c", "device_error.cu", "-arch=sm_80"]),
    "bad-option": ([], ["-c", "kernel.cu", "--bogus"]),
    "missing-source": ([], ["-c", "no_such_file.cu"]),
}


@pytest.mark.one_toolchain
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_tmpdir_holds_what_it_held(nvcc, sources, tmp_path, kind):
    options, args = KINDS[kind]
    tmpdir = tmp_path / "private tmp"
    env = _defaults_env(tmp_path)
    for _ in range(2 if "--cache" in options else 1):
        outcome = run_tool(fast_nvcc_command(nvcc, args, options), cwd=sources, tmpdir=tmpdir, env=env)
        assert outcome.leftovers == [], f"left in $TMPDIR: {outcome.leftovers}\n{mask(outcome.stderr).decode()}"
        assert b"Traceback" not in outcome.stderr


@pytest.mark.one_toolchain
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_tmpdir_holds_what_it_held_after_an_interrupt(nvcc, sources, tmp_path, signum):
    tmpdir = tmp_path / "private tmp"
    tmpdir.mkdir()
    (tmpdir / "someone else's").write_text("kept")
    env = {**os.environ, **_defaults_env(tmp_path), "TMPDIR": str(tmpdir)}
    proc = subprocess.Popen(fast_nvcc_command(nvcc, ["-c", "kernel.cu", I, *GENCODE_2]),
                            cwd=sources, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
    deadline = time.monotonic() + 60
    while not any("tmpxft_" in p.name for p in tmpdir.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.01)  # until the first step has made a temp file
    time.sleep(0.2)
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == -signum, err
    assert sorted(p.name for p in tmpdir.iterdir()) == ["someone else's"]

