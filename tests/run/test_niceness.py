"""A compile with slack starts its steps at a lower CPU priority (fast_nvcc.run.niceness): the
rule with made-up work, the pool's view of the other compiles' work, and a real compile whose
host compiler writes down the priority it ran at, beside a peer that told the pool it has
far more work left."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from helpers import fast_nvcc_command, mask, recording_ccbin

from fast_nvcc.machine.pool_files import Told
from fast_nvcc.machine.slots import PoolSlots, Slots
from fast_nvcc.run.niceness import NICE, SLACK_SECONDS, nice_for


@pytest.mark.parametrize(
    ("mine", "most", "expected"),
    [
        (None, 100.0, 0),  # this compile's work is not known (or it was shown heavier)
        (3.0, None, 0),  # no other compile told any
        (3.0, 60.0, NICE),  # a light compile beside a long one
        (30.0, 60.0, NICE),  # half the most, and far from it
        (31.0, 60.0, 0),  # more than half: the two are alike
        (2.0, 2.0 + SLACK_SECONDS - 0.1, 0),  # under a half, but too close to matter
        (60.0, 3.0, 0),  # the longest compile itself
    ],
)
def test_nice_for(mine, most, expected):
    assert nice_for(mine, most) == expected


def test_the_pool_tells_the_most_work_another_compile_told(tmp_path):
    pool = PoolSlots(str(tmp_path), 2)
    try:
        assert pool.most_left() is None  # no one told
        pool.left(80.0)  # this compile's own value is not another's
        assert pool.most_left() is None
        peers = [Told(str(tmp_path / "work"), "w-", owner=owner) for owner in (1_000_001, 1_000_002)]
        peers[0].tell(12.5)
        peers[1].tell(40.25)
        assert pool.most_left() == pytest.approx(40.25)
        peers[1].close()  # a compile that ended tells nothing
        assert pool.most_left() == pytest.approx(12.5)
        peers[0].close()
    finally:
        pool.close()
    assert Slots().most_left() is None  # make's tokens know no other compile's work


def _compile(nvcc, sources, tmp_path, *, peer: float | None, env: dict[str, str] | None = None):
    """One real compile on a pool of its own, beside a peer that told ``peer`` seconds of work
    left (None: no peer); the nice of its host compiler's preprocessing steps ("-E") and host
    compile ("-c"), and the log's record.  The host compile runs whole (FAST_NVCC_SPLIT_HOST=0):
    split, its cc1plus would run without the host compiler's driver."""
    ccbin = recording_ccbin(tmp_path / "ccbin")  # (the host compiler writes down its nice)
    record, log = tmp_path / "nice.txt", tmp_path / "log.jsonl"
    record.unlink(missing_ok=True)
    log.unlink(missing_ok=True)
    pool = tmp_path / "pool"
    told = Told(str(pool / "work"), "w-", owner=1_000_003) if peer is not None else None
    if told is not None:
        told.tell(peer)
    try:
        full_env = {**os.environ, "FAST_NVCC_POOL_DIR": str(pool), "NICE_RECORD": str(record),
                    "FAST_NVCC_LOG": str(log), "FAST_NVCC_CACHE_DIR": str(tmp_path / "state"),
                    "FAST_NVCC_SPLIT_HOST": "0", **(env or {})}  # fmt: skip
        full_env.pop("MAKEFLAGS", None)
        args = ["-c", "kernel.cu", "-Iinclude", "-o", str(tmp_path / "kernel.o"), "-ccbin", str(ccbin),
                "-gencode", "arch=compute_90,code=sm_90"]  # fmt: skip
        subprocess.run(fast_nvcc_command(nvcc, args), cwd=sources, env=full_env, check=True)
    finally:
        if told is not None:
            told.close()
    # The compile's steps: the two preprocessing steps (-E) and the host compile (-c); not nvcc
    # --dryrun's probe of the host compiler. (cicc and ptxas are no host compiler's.)
    steps = [line.split() for line in record.read_text().splitlines() if " -x c++ " in line]
    nices = {"-E" if "-E" in words else "-c": [] for words in steps}
    for words in steps:
        nices["-E" if "-E" in words else "-c"].append(int(words[0]))
    (entry,) = [json.loads(line) for line in log.read_text().splitlines()]
    return nices, entry


@pytest.mark.nvcc
def test_a_compile_with_slack_runs_its_later_steps_niced(nvcc, sources, tmp_path):
    """By the per-tool defaults this compile has about 20 s of work; a peer that told 10,000 s
    leaves it slack.  Its first steps start before its own steps have shown the defaults no
    underestimate (niceness.py: a compile judged by defaults alone could be the longest), so they
    run at nice 0; once the preprocessing took less than its estimates, the steps that follow,
    the host compile and ptxas among them, start at nice NICE.  The object is the same without the peer."""
    assert os.nice(0) == 0, "the test itself must run at nice 0"
    nices, entry = _compile(nvcc, sources, tmp_path, peer=10_000.0)
    assert nices == {"-E": [0, 0], "-c": [NICE]}
    niced = {s["tool"] for s in entry["steps"] if s.get("nice") == NICE}
    # (cudafe++ may start either way: once the two preprocessing steps ended, 2.6 s of estimates)
    assert "ptxas" in niced and "gcc -E" not in niced
    niced_object = mask((tmp_path / "kernel.o").read_bytes())
    nices, entry = _compile(nvcc, sources, tmp_path, peer=None)
    assert nices == {"-E": [0, 0], "-c": [0]}
    assert not [s for s in entry["steps"] if s.get("nice")]
    assert mask((tmp_path / "kernel.o").read_bytes()) == niced_object


@pytest.mark.nvcc
def test_no_step_is_niced_beside_a_lighter_peer_or_when_turned_off(nvcc, sources, tmp_path):
    nices, _ = _compile(nvcc, sources, tmp_path, peer=2.0)  # less work left than this compile
    assert nices == {"-E": [0, 0], "-c": [0]}
    nices, entry = _compile(nvcc, sources, tmp_path, peer=10_000.0, env={"FAST_NVCC_NICE": "0"})
    assert nices == {"-E": [0, 0], "-c": [0]}
    assert not [s for s in entry["steps"] if s.get("nice")]
