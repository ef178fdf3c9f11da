"""Where every slot of the pool is busy and a compile is known light, fast_nvcc becomes nvcc
(fast_nvcc/lean.py): the rule with made-up looks, the command lines it takes, the pool's files
as it counts them, and real compiles beside a peer that runs two compiles on a pool of two."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import mask_pid, recording_ccbin, run_tool

from fast_nvcc.lean import (_SUBCOMMANDS, LIGHT_SECONDS, Learned, Look, command_of, lean_reason, learned_of,
                            pool_size_of, running_compiles, source_of)
from fast_nvcc.machine.pool_files import Told, WorkLeft
from fast_nvcc.run.niceness import NICE

ROOT = str(Path(__file__).resolve().parent.parent)
LIGHT = Learned(seconds=1.8, peak_kb=200_000, updated=1_000.0)
FULL = Look(compiles=2, learned=LIGHT, source_mtime=900.0, available_kb=8_000_000, pool_size=2)


def test_a_light_learned_compile_on_a_full_pool_goes_to_nvcc():
    assert lean_reason(FULL) == "lean: 2 compiles on a pool of 2, a light compile (1.8 s learned)"


@pytest.mark.parametrize(
    "change",
    [
        {"compiles": 1},  # fewer compiles than cores: fast_nvcc's steps side by side use the rest
        {"learned": None},  # the history knows no cicc of this source
        {"learned": LIGHT._replace(seconds=LIGHT_SECONDS + 0.1)},  # not light
        {"source_mtime": 1_000.0},  # edited since it was learned (or in the same second)
        {"source_mtime": None},  # gone
        {"available_kb": 700_000},  # its peak is more than half the memory of a slot
        {"available_kb": None},
    ],
)
def test_anything_else_runs_as_fast_nvcc(change):
    assert lean_reason(FULL._replace(**change)) is None


@pytest.fixture
def path_nvcc(tmp_path):
    """An executable named nvcc on a PATH of its own."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    nvcc = bin_dir / "nvcc"
    nvcc.write_text("#!/bin/sh\n")
    nvcc.chmod(0o755)
    return str(nvcc), {"PATH": str(bin_dir)}


def test_the_plain_and_the_launcher_form_are_taken(path_nvcc):
    nvcc, env = path_nvcc
    assert command_of(["--", "-c", "a.cu"], env) == (nvcc, ["-c", "a.cu"])
    assert command_of([nvcc, "-c", "a.cu"], env) == (nvcc, ["-c", "a.cu"])
    assert command_of(["nvcc", "-c", "a.cu"], env) == (nvcc, ["-c", "a.cu"])  # found on PATH
    assert command_of(["--", "-c", "a.cu"], {**env, "FAST_NVCC_CACHE_DIR": "/x", "FAST_NVCC_NICE": "0"})
    assert command_of(["--", "-c", "a.cu"], {**env, "FAST_NVCC_NVCC": nvcc}) == (nvcc, ["-c", "a.cu"])


@pytest.mark.parametrize(
    ("argv", "extra"),
    [
        (["-v", "--", "-c", "a.cu"], {}),  # one of fast_nvcc's options
        (["--split", "4", "--", "-c", "a.cu"], {}),
        (["history", "export", "f.json"], {}),  # a subcommand
        (["--", "-c", "a.cu"], {"FAST_NVCC_LOG": "log.jsonl"}),  # a record to write
        (["--", "-c", "a.cu"], {"FAST_NVCC_SPLIT": "16"}),
        (["--", "-c", "a.cu"], {"FAST_NVCC_LEAN": "0"}),  # turned off
        (["--", "-c", "a.cu"], {"FAST_NVCC_LEAN": "maybe"}),  # fast_nvcc's run says what is wrong
        (["--", "-c", "a.cu"], {"FAST_NVCC_NICE": "maybe"}),
        (["--", "-c", "a.cu"], {"MAKEFLAGS": "-j4 --jobserver-auth=fifo:/tmp/x"}),  # make's tokens
        (["/no/such/nvcc", "-c", "a.cu"], {}),
        ([], {}),
    ],
)
def test_anything_but_a_plain_command_line_is_left_to_fast_nvcc(path_nvcc, argv, extra):
    assert command_of(argv, {**path_nvcc[1], **extra}) is None


def test_the_subcommands_it_leaves_alone_are_the_clis():
    from fast_nvcc.cli import SUBCOMMANDS

    assert set(_SUBCOMMANDS) == set(SUBCOMMANDS)


def test_a_pool_size_fast_nvcc_would_refuse_sends_the_compile_to_its_run():
    assert pool_size_of({}) == len(os.sched_getaffinity(0))
    assert pool_size_of({"FAST_NVCC_POOL_SIZE": " 3 "}) == 3
    for bad in ("0", "-2", "two", "1.5"):
        assert pool_size_of({"FAST_NVCC_POOL_SIZE": bad}) is None  # (fast_nvcc.settings.check says why)


def test_the_one_source_of_a_compile():
    assert source_of(["-c", "src/a.cu", "-o", "a.o", "-arch=sm_90"]) == "src/a.cu"
    assert source_of(["--compile", "a.cu"]) == "a.cu"
    assert source_of(["a.cu", "-o", "a.out"]) is None  # a link too
    assert source_of(["-c", "a.cu", "b.cu"]) is None
    assert source_of(["-c", "a.cu", "--split-compile", "4"]) is None  # nvcc's own split: long work
    assert source_of(["-c", "a.cu", "--options-file=more.txt"]) is None  # options it cannot see


def test_the_compiles_on_the_pool_as_the_lean_path_counts_them(tmp_path):
    """The claims under work/ as fast_nvcc.machine.pool_files.WorkLeft posts them, and a lean
    compile's under lean/, held by what it execs and gone with it; the pool's rules read work/
    alone (a lean compile's work is no drain's or nice's business)."""
    directory = str(tmp_path / "pool")
    assert running_compiles(directory) == 0  # no compile ever used it
    peers = [Told(str(tmp_path / "pool" / "work"), "w-", owner=owner) for owner in (1_000_001, 1_000_002)]
    peers[0].tell(12.5)
    assert running_compiles(directory) == 1
    peers[1].tell(300.0)
    assert running_compiles(directory) == 2
    peers[1].close()
    assert running_compiles(directory) == 1
    script = ("import os, sys; sys.path.insert(0, {root!r}); from fast_nvcc.lean import claim_lean;"
              " claim_lean({directory!r}); os.execv('/bin/sleep', ['sleep', '60'])")
    lean = subprocess.Popen([sys.executable, "-c", script.format(root=ROOT, directory=directory)])
    try:
        for _ in range(500):
            if running_compiles(directory) == 2:
                break
            time.sleep(0.01)
        assert running_compiles(directory) == 2
        work = WorkLeft(str(tmp_path / "pool" / "work"))
        assert work.values() == [12.5]
        work.close()
    finally:
        lean.kill()
        lean.wait()
    assert running_compiles(directory) == 1
    assert os.listdir(tmp_path / "pool" / "lean") == []  # a dead one's claim goes as it is read
    peers[0].close()
    assert running_compiles(directory) == 0


# Two compiles running on the pool (their work/ claims), until the peer's stdin ends.
FULL_PEER = """
import os, sys
sys.path.insert(0, {root!r})
from fast_nvcc.machine.pool_files import Told
claims = [Told(os.path.join({pool!r}, "work"), "w-", owner=owner) for owner in (1_000_001, 1_000_002)]
for claim in claims:
    claim.tell(60.0)
print("ready", flush=True)
sys.stdin.read()
"""

LIGHT_SOURCE = """
#ifdef BROKEN
#error broken on purpose
#endif
__global__ void scale(float *x, float a, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= a; }
"""


def _updated(state: Path) -> float:
    with sqlite3.connect(state / "history.sqlite") as db:
        return db.execute("SELECT MAX(updated) FROM costs").fetchone()[0]


@pytest.mark.nvcc
@pytest.mark.one_toolchain
def test_a_light_compile_on_a_full_machine_is_nvccs_own_run(nvcc, tmp_path):
    """Learned once by fast_nvcc; then, beside two compiles on a pool of two, the same compile
    runs as nvcc at nice NICE (its host compiler says so), teaches the history nothing, and
    writes nvcc's object, or fails with nvcc's message and exit code."""
    assert os.nice(0) == 0, "the test itself must run at nice 0"
    work = tmp_path / "work"  # (what the compiles write there is compared; the rest lies beside it)
    work.mkdir()
    (work / "light.cu").write_text(LIGHT_SOURCE)
    ccbin = recording_ccbin(tmp_path / "ccbin")  # (the host compiler writes down its nice)
    record, pool, state = tmp_path / "nice.txt", tmp_path / "pool", tmp_path / "state"
    env = {"FAST_NVCC_POOL_DIR": str(pool), "FAST_NVCC_POOL_SIZE": "2", "FAST_NVCC_CACHE_DIR": str(state),
           "NICE_RECORD": str(record), "MAKEFLAGS": ""}  # fmt: skip
    args = ["-c", "light.cu", "-o", "light.o", "-arch=sm_90", "-ccbin", str(ccbin)]
    fast = [sys.executable, "-m", "fast_nvcc", nvcc]  # the launcher form, none of fast_nvcc's options

    def compile_(command, extra=()):
        record.unlink(missing_ok=True)
        done = run_tool([*command, *args, *extra], cwd=work, tmpdir=tmp_path / "t", env=env, timeout=180)
        (work / "light.o").unlink(missing_ok=True)
        return done, [int(line.split()[0]) for line in record.read_text().splitlines()]

    plain, _ = compile_([nvcc])
    learning, nices = compile_(fast)  # nothing waits: fast_nvcc's own run, which learns the costs
    assert learning.returncode == 0, learning.stderr.decode()
    assert set(nices) == {0}
    learned = learned_of(str(state / "history.sqlite"), str(work / "light.cu"))
    assert learned is not None and learned.seconds <= LIGHT_SECONDS
    before = _updated(state)
    broken_plain, _ = compile_([nvcc], ["-DBROKEN"])
    peer = subprocess.Popen([sys.executable, "-c", FULL_PEER.format(root=ROOT, pool=str(pool))],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert peer.stdout.readline().strip() == "ready"
        lean, nices = compile_(fast)
        broken, broken_nices = compile_(fast, ["-DBROKEN"])
    finally:
        peer.communicate("", timeout=60)
    assert lean.returncode == 0, lean.stderr.decode()
    assert mask_pid(lean.files["light.o"]) == mask_pid(plain.files["light.o"])
    assert lean.stderr == plain.stderr and not lean.leftovers
    assert nices and set(nices) == {NICE}  # nvcc's own steps, each at the nice of a compile with slack
    assert _updated(state) == before  # nvcc's run teaches the history nothing
    assert broken_plain.returncode != 0 and b"broken on purpose" in broken_plain.stderr
    assert (broken.returncode, broken.stderr, broken.files) == (broken_plain.returncode, broken_plain.stderr, {})
    assert set(broken_nices) == {NICE}
    assert running_compiles(str(pool)) == 0  # the lean compiles' claims went with them
    # The peer gone, a slot is free: fast_nvcc's own run again, which learns.
    again, nices = compile_(fast)
    assert again.returncode == 0 and set(nices) == {0}
    assert _updated(state) > before
