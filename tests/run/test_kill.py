"""A SIGKILLed fast_nvcc (OOM killer, CI time-outs): its steps die with it, even their own children
and a kill of the build's process group, and the next compile removes what it left in $TMPDIR,
only what it left."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from fast_nvcc.run import leftovers
from helpers import UNROLLED_CHAIN, fast_nvcc_command

# What fast_nvcc itself decides: against the first toolchain (conftest).
pytestmark = pytest.mark.one_toolchain

# Device code that keeps cicc busy for minutes: fully unrolled loops in 150 instantiations.
HEAVY_SOURCE = UNROLLED_CHAIN + """
__global__ void heavy_kernel(float* data) { data[threadIdx.x] = Many<150>::run(data[threadIdx.x]); }
"""

# gcc, after a long pause in the host-side preprocessing (which runs beside cicc): the pause is
# a child of the step's process, as cc1plus is of gcc.
SLOW_HOST = """#!/bin/sh
case "$*" in
  *-D__CUDA_ARCH__=*) ;;
  *" -E "*) sleep 60 ;;
esac
exec /usr/bin/gcc "$@"
"""

# gcc, with a long pause after every device-side preprocessing: a compile that stays alive
# with temp files in place.
SLOW_DEVICE = """#!/bin/sh
/usr/bin/gcc "$@"
status=$?
case "$*" in
  *-D__CUDA_ARCH__=*-E*) sleep 60 ;;
esac
exit $status
"""

TWO_ARCHS = ["-gencode", "arch=compute_75,code=sm_75", "-gencode", "arch=compute_80,code=sm_80"]
BOUND = 20  # seconds to wait for something that takes a fraction of one


def ccbin(tmp_path: Path, name: str, script: str) -> Path:
    directory = tmp_path / name
    directory.mkdir()
    for tool in ("gcc", "g++"):
        path = directory / tool
        path.write_text(script)
        path.chmod(0o755)
    return directory


def start(command: list[str], *, cwd: Path, tmpdir: Path, **popen) -> subprocess.Popen:
    # Only -j bounds the steps: with the machine's pool (2 slots on 2 cores) the host side's
    # pause could wait for both cicc to end.
    env = {**os.environ, "TMPDIR": str(tmpdir), "PYTHONPATH": str(Path(__file__).parent.parent.parent),
           "FAST_NVCC_POOL": "0"}  # fmt: skip
    quiet = subprocess.DEVNULL
    return subprocess.Popen(command, cwd=cwd, env=env, stdout=quiet, stderr=quiet, **popen)


def names(procs: list[psutil.Process]) -> list[str]:
    found = []
    for proc in procs:
        try:
            found.append(proc.name())
        except psutil.NoSuchProcess:
            pass
    return found


def wait_for_steps(root: psutil.Process, wanted: tuple[str, ...]) -> list[psutil.Process]:
    """The descendants of ``root`` once every name in ``wanted`` runs among them."""
    deadline = time.monotonic() + 120
    procs: list[psutil.Process] = []
    while time.monotonic() < deadline:
        try:
            procs = root.children(recursive=True)
        except psutil.NoSuchProcess:
            break
        if all(name in names(procs) for name in wanted):
            return procs
        time.sleep(0.05)
    pytest.fail(f"{wanted} never ran together; running: {names(procs)}")


def assert_all_gone(procs: list[psutil.Process]) -> None:
    _, alive = psutil.wait_procs(procs, timeout=BOUND)
    for proc in alive:
        proc.kill()  # leave nothing behind for the next test
    assert not alive, f"outlived fast_nvcc: {alive}"


def wait_until(condition, what: str) -> None:
    deadline = time.monotonic() + BOUND
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(what)
        time.sleep(0.05)


@pytest.fixture
def heavy(sources: Path) -> Path:
    (sources / "heavy.cu").write_text(HEAVY_SOURCE)
    return sources


def heavy_compile(nvcc: str, tmp_path: Path, options: list[str] = ()) -> list[str]:
    args = ["-c", "heavy.cu", "-ccbin", str(ccbin(tmp_path, "slow-host", SLOW_HOST)), *TWO_ARCHS]
    return fast_nvcc_command(nvcc, args, ["-j", "4", *options])


# The faithful mode runs cicc after the host preprocessing (it reads its module id): there the
# steps are sh -c lines, and the pause under one of them is what must die.
@pytest.mark.nvcc
@pytest.mark.parametrize(("options", "running"), [([], ("cicc", "sleep")), (["--faithful"], ("sh", "sleep"))],
                         ids=["graph", "faithful"])  # fmt: skip
def test_sigkill_takes_the_steps_along(nvcc, heavy, tmp_path, options, running):
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    proc = start(heavy_compile(nvcc, tmp_path, options), cwd=heavy, tmpdir=tmpdir)
    steps = wait_for_steps(psutil.Process(proc.pid), running)
    proc.kill()
    proc.wait()
    assert_all_gone(steps)
    # Its watchdog cleaned up after it at once.
    wait_until(lambda: not list(tmpdir.iterdir()), f"left in TMPDIR: {sorted(os.listdir(tmpdir))}")


@pytest.mark.nvcc
def test_without_its_watchdog_the_steps_still_die(nvcc, heavy, tmp_path):
    """The watchdog killed first (or not yet told of a step just forked): each step itself
    has the kernel's word that it dies with fast_nvcc (PR_SET_PDEATHSIG)."""
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    proc = start(heavy_compile(nvcc, tmp_path), cwd=heavy, tmpdir=tmpdir)
    root = psutil.Process(proc.pid)
    steps = wait_for_steps(root, ("cicc", "sleep"))
    watchdogs = [p for p in root.children() if p.name().startswith("python")]
    assert len(watchdogs) == 1, watchdogs
    watchdogs[0].kill()  # a zombie until fast_nvcc reaps it at its end: wait for that state
    wait_until(lambda: not _alive(watchdogs[0]), "the watchdog did not die")
    direct = [p for p in root.children() if p.name() == "cicc"]
    assert direct
    proc.kill()
    proc.wait()
    assert_all_gone(direct)
    for step in steps:  # what only the watchdog would have reached (the pause under gcc)
        with contextlib.suppress(psutil.NoSuchProcess):
            step.kill()


@pytest.mark.nvcc
def test_group_kill_of_the_build_reaches_the_steps(nvcc, heavy, tmp_path):
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    command = " ".join(f"'{word}'" for word in heavy_compile(nvcc, tmp_path)) + "; echo finished"
    shell = start(["/bin/sh", "-c", command], cwd=heavy, tmpdir=tmpdir, start_new_session=True)
    steps = wait_for_steps(psutil.Process(shell.pid), ("cicc", "sleep"))
    os.killpg(shell.pid, signal.SIGKILL)  # what a CI runner does to a job that timed out
    shell.wait()
    assert_all_gone(steps)


@pytest.mark.nvcc
def test_next_compile_removes_what_dead_compiles_left(nvcc, heavy, tmp_path):
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    (tmpdir / "user.txt").write_text("not fast_nvcc's")
    (tmpdir / "fast_nvcc-user").mkdir()  # a name like ours, but no owner file: not ours
    (tmpdir / "fast_nvcc-user" / "data").write_text("keep")

    # A compile killed with everything it started (a cgroup kill), its watchdog too.
    dead = start(heavy_compile(nvcc, tmp_path), cwd=heavy, tmpdir=tmpdir)
    root = psutil.Process(dead.pid)
    wait_for_steps(root, ("cicc", "sleep"))
    root.suspend()  # it must not see its steps die and clean up
    try:
        for proc in root.children(recursive=True):
            with contextlib.suppress(psutil.NoSuchProcess):  # a step that ended since the listing
                proc.kill()
    finally:
        dead.kill()  # never left suspended for the tests after this one
        dead.wait()
    dead_files = {p.name for p in tmpdir.iterdir()} - {"user.txt", "fast_nvcc-user"}
    assert any(n.startswith("fast_nvcc-") for n in dead_files), dead_files
    assert any(n.startswith(f"tmpxft_{dead.pid:08x}_") for n in dead_files), dead_files

    # A compile that runs on meanwhile.
    slow = ccbin(tmp_path, "slow-device", SLOW_DEVICE)
    args = ["-c", "kernel.cu", "-Iinclude", "-ccbin", str(slow), *TWO_ARCHS]
    live = start(fast_nvcc_command(nvcc, args, ["-j", "4"]), cwd=heavy, tmpdir=tmpdir)
    try:
        wait_for_steps(psutil.Process(live.pid), ("sleep",))
        wait_until(lambda: any(p.name.startswith(f"tmpxft_{live.pid:08x}_") for p in tmpdir.iterdir()),
                   "the live compile made no temp file")  # fmt: skip
        live_files = {p.name for p in tmpdir.iterdir()} - dead_files - {"user.txt", "fast_nvcc-user"}
        assert any(n.startswith("fast_nvcc-") for n in live_files), live_files

        env = {**os.environ, "TMPDIR": str(tmpdir), "PYTHONPATH": str(Path(__file__).parent.parent.parent)}
        done = subprocess.run(fast_nvcc_command(nvcc, ["-c", "kernel.cu", "-Iinclude", "-o", "next.o"]),
                              cwd=heavy, env=env, capture_output=True, check=False)  # fmt: skip
        assert done.returncode == 0, done.stderr

        left = {p.name for p in tmpdir.iterdir()}
        assert not left & dead_files, f"the dead compile's files stayed: {sorted(left & dead_files)}"
        assert live_files <= left, f"a live compile's files went: {sorted(live_files - left)}"
        assert (tmpdir / "user.txt").exists() and (tmpdir / "fast_nvcc-user" / "data").exists()
    finally:
        live.terminate()
        live.wait()
    assert sorted(os.listdir(tmpdir)) == ["fast_nvcc-user", "user.txt"]


def test_a_dead_compiles_temp_files_stay_while_its_pid_lives_again(tmp_path):
    """The pid in nvcc's temp names may belong to a new process by now (a plain nvcc's files)."""
    workdirs = tmp_path / "workdirs"
    workdirs.mkdir()
    reused = leftovers.make_workdir(f"tmpxft_{os.getpid():08x}_00000000", [str(tmp_path)], str(workdirs))
    gone_pid = _dead_pid()
    dead = leftovers.make_workdir(f"tmpxft_{gone_pid:08x}_00000000", [str(tmp_path)], str(workdirs))
    for pid in (os.getpid(), gone_pid):
        (tmp_path / f"tmpxft_{pid:08x}_00000000-1_k.cpp1.ii").write_text("")
    reused.release()  # both owners are gone now
    dead.release()

    assert leftovers.remove_if_dead(reused.path) is False
    assert leftovers.remove_if_dead(dead.path) is True
    assert not os.path.exists(dead.path)
    assert os.path.exists(reused.path)
    assert sorted(os.listdir(tmp_path)) == [f"tmpxft_{os.getpid():08x}_00000000-1_k.cpp1.ii", "workdirs"]


def test_a_live_compiles_workdir_stays(tmp_path):
    live = leftovers.make_workdir("tmpxft_00000001_00000000", [str(tmp_path)], str(tmp_path))
    try:
        assert leftovers.remove_if_dead(live.path) is False
        assert os.path.isdir(live.path)
    finally:
        live.release()
        leftovers.remove_if_dead(live.path)


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def _start_and_clean(directory: str, rounds: int) -> int:
    """In a process of its own: clean up, then make a work directory, as each compile starts;
    how many of its directories another process removed."""
    lost = 0
    for _ in range(rounds):
        leftovers.remove_dead(directory)
        workdir = leftovers.make_workdir("tmpxft_00000001_00000000", [directory], directory)
        lost += not os.path.isdir(workdir.path)
        shutil.rmtree(workdir.path, ignore_errors=True)
        workdir.release()
    return lost


def test_compiles_starting_at_once_keep_their_workdirs(tmp_path):
    """A cleaner that opened a new owner file before its compile locked it took the compile for
    dead and removed its directory: a step then failed with 127 (8 cached compiles at once, CI,
    2026-11-23; 41 of 3,200 directories at 400 rounds)."""
    context = multiprocessing.get_context("fork")
    with context.Pool(8) as pool:
        assert sum(pool.starmap(_start_and_clean, [(str(tmp_path), 200)] * 8)) == 0
    assert os.listdir(tmp_path) == []
