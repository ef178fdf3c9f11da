"""The memory budget (fast_nvcc/machine/memory.py): finding the cgroup, the arithmetic, the claims
shared between compiles, and real builds inside real memory cgroups."""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import SOURCES, mask
from tasks import overlap, sh_task

from fast_nvcc.graph.tasks import Dag
from fast_nvcc.machine.headroom import MIB, Cgroup, Headroom, Level, find_cgroups, measure_headroom, read_level, read_machine
from fast_nvcc.machine.memory import MemoryBudget, fits, reserve_for
from fast_nvcc.machine.memory_files import PeerPeaks
from fast_nvcc.report.log import log_record
from fast_nvcc.report.run_report import build_report
from fast_nvcc.report.summary import format_summary
from fast_nvcc.report.trace import trace_events
from fast_nvcc.run.handlers import Internal
from fast_nvcc.run.scheduler import Runner


GIB = 1 << 30
ROOT = Path(__file__).resolve().parent.parent.parent

V1_MOUNTS = (
    "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
    "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n"
)
V2_MOUNTS = "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"


@pytest.mark.parametrize(
    "proc, mounts, expected",
    [
        # This machine: v1 memory under /process_api/<id>, a v2 mount without the controller.
        ("4:memory:/process_api/abc\n0::/\n", V1_MOUNTS,
         [Cgroup(1, "/sys/fs/cgroup/memory/process_api/abc"), Cgroup(1, "/sys/fs/cgroup/memory/process_api"),
          Cgroup(1, "/sys/fs/cgroup/memory")]),
        # A v1 container without a cgroup namespace: the mount's root is the container's cgroup.
        ("9:memory:/docker/f00\n", "35 31 0:32 /docker/f00 /sys/fs/cgroup/memory ro - cgroup cgroup rw,memory\n",
         [Cgroup(1, "/sys/fs/cgroup/memory")]),
        # v2 with a cgroup namespace (docker today), and v2 nested.
        ("0::/\n", V2_MOUNTS, [Cgroup(2, "/sys/fs/cgroup")]),
        ("0::/user.slice/build\n", V2_MOUNTS,
         [Cgroup(2, "/sys/fs/cgroup/user.slice/build"), Cgroup(2, "/sys/fs/cgroup/user.slice"),
          Cgroup(2, "/sys/fs/cgroup")]),
        ("", "", []),  # no /proc/self/cgroup to speak of
        ("0::/\n", V1_MOUNTS.splitlines()[0], []),  # v2 path, but only a v1 mount: nothing to read
    ],
)  # fmt: skip
def test_find_cgroups(proc, mounts, expected):
    assert find_cgroups(proc, mounts) == expected


@pytest.mark.parametrize(
    "levels, machine, expected",
    [
        # No limit: the machine's available memory.
        ([Level("/a", 1 << 62, 5 * GIB, 0)], (64 * GIB, 40 * GIB), Headroom(64 * GIB, 40 * GIB, "machine")),
        # A 1.5 GiB container using 1 GiB: 0.5 GiB left, whatever the machine has.
        ([Level("/c", 3 * GIB // 2, GIB, 0)], (64 * GIB, 40 * GIB), Headroom(3 * GIB // 2, GIB // 2, "/c")),
        # The parent binds: its limit is lower.
        ([Level("/c/x", 4 * GIB, GIB, 0), Level("/c", 2 * GIB, GIB + GIB // 2, 0)], (64 * GIB, 40 * GIB),
         Headroom(2 * GIB, GIB // 2, "/c")),
        # A limit above the machine's memory is no limit; the machine is nearly full.
        ([Level("/c", 128 * GIB, GIB, 0)], (64 * GIB, GIB // 4), Headroom(64 * GIB, GIB // 4, "machine")),
        # Over its limit (page cache we could not discount): nothing free, never negative.
        ([Level("/c", GIB, GIB + 1, 0)], (64 * GIB, 40 * GIB), Headroom(GIB, 0, "/c")),
    ],
)  # fmt: skip
def test_measure_headroom(levels, machine, expected):
    assert measure_headroom(levels, machine) == expected


@pytest.mark.parametrize(
    "need, free, claimed, fit",
    [
        (800 * MIB, 1000 * MIB, [], True),
        # One cicc claimed 800 MiB and holds 100 so far: 700 MiB more are coming.
        (250 * MIB, 1000 * MIB, [(800 * MIB, 100 * MIB)], False),
        # It holds 700 of its 800: only 100 to come.
        (200 * MIB, 1000 * MIB, [(800 * MIB, 700 * MIB)], True),
        # Above its claim: what it holds is in the usage already, nothing more to come.
        (500 * MIB, 600 * MIB, [(300 * MIB, 900 * MIB)], True),
        # Two compiles: 300 + 200 still to come.
        (450 * MIB, 1000 * MIB, [(400 * MIB, 100 * MIB), (200 * MIB, 0)], False),
        (300 * MIB, 1000 * MIB, [(400 * MIB, 100 * MIB), (200 * MIB, 0)], True),
    ],
)  # fmt: skip
def test_fits(need, free, claimed, fit):
    assert fits(need, free=free, claimed=claimed, reserve=100 * MIB) is fit


@pytest.mark.parametrize("limit, reserve", [(GIB // 4, 32 * MIB), (GIB, GIB // 25), (64 * GIB, 256 * MIB)])
def test_reserve_is_a_small_share_of_the_limit(limit, reserve):
    assert reserve_for(limit) == reserve


# -- the budget shared between compiles ----------------------------------------------------------


def budget(directory, peaks, cgroups=()):
    return MemoryBudget(str(directory), peaks=peaks, kinds=[("cicc", "compute_80")] * len(peaks),
                        learned=[True] * len(peaks), cgroups=list(cgroups))  # fmt: skip


def test_a_step_too_big_waits_for_the_others_and_then_runs_alone(tmp_path):
    huge = 4 * read_machine()[0]  # more than the machine has: it can only ever run alone
    first, second = budget(tmp_path, [MIB, MIB]), budget(tmp_path, [huge])
    assert first.reserve(0, now=0.0)
    assert not second.reserve(0, now=0.0)  # a claim is live
    # The waiting compile goes first: nothing else starts, even what would fit.
    assert not first.reserve(1, now=0.0)
    first.release(0, rss_kb=None)
    assert second.reserve(0, now=0.3)
    assert second.waited(0) == pytest.approx(0.3)
    assert not first.reserve(1, now=0.3)  # the huge step is running
    second.release(0, rss_kb=None)
    assert first.reserve(1, now=0.4)
    first.close()
    second.close()


def test_a_step_killed_for_memory_goes_first_once_its_raised_peak_fits(tmp_path):
    """It does not wait for the whole machine to drain: other compiles' claims may stay live
    as long as 1.25 times what it held at its death fits; meanwhile nothing else starts."""
    free = read_machine()[1]
    other, mine = budget(tmp_path, [MIB, MIB]), budget(tmp_path, [MIB, MIB])
    assert other.reserve(0, now=0.0) and mine.reserve(0, now=0.0)
    assert mine.out_of_memory(0, 137, rss_kb=64 * 1024)  # held 64 MiB when the kernel took it
    mine.release(0, rss_kb=None)
    assert mine.need(0) == 80 * MIB
    assert mine.reserve(0, now=0.1)  # other's claim is live, and 80 MiB fit
    assert not mine.out_of_memory(0, 137, rss_kb=64 * 1024)  # once only
    mine.release(0, rss_kb=None)
    # One whose raised peak cannot fit waits, ahead of everyone, for the claims to end.
    assert mine.out_of_memory(1, 137, rss_kb=free // 1024)
    assert not mine.reserve(1, now=0.2)
    assert not other.reserve(1, now=0.2)  # it waits first: nothing else starts
    other.release(0, rss_kb=None)
    assert mine.reserve(1, now=0.3)
    other.close()
    mine.close()


def test_a_dead_compiles_claim_and_wait_do_not_count(tmp_path):
    child = subprocess.Popen(
        [sys.executable, "-c", (
            "import sys, time; from fast_nvcc.machine.memory import MemoryBudget; "
            f"b = MemoryBudget({str(tmp_path)!r}, peaks=[1 << 50, 1 << 50], kinds=[('a', '')] * 2, learned=[True] * 2,"
            " cgroups=[]); b.reserve(0, now=0.0); b.reserve(1, now=0.0); print('held', flush=True); time.sleep(60)"
        )],
        stdout=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    try:
        assert child.stdout.readline() == b"held\n"
        mine = budget(tmp_path, [MIB])
        assert not mine.reserve(0, now=0.0)  # the live claim and waiter of 2**50 bytes hold it back
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert mine.reserve(0, now=0.1)
    mine.close()


def test_a_step_without_learned_peak_takes_its_peers(tmp_path):
    peer = budget(tmp_path, [10 * MIB])
    assert peer.reserve(0, now=0.0)
    peer.release(0, rss_kb=123 * 1024)
    mine = MemoryBudget(str(tmp_path), peaks=[800 * MIB], kinds=[("cicc", "compute_80")], learned=[False], cgroups=[])
    assert mine.need(0) == 123 * MIB
    learned = budget(tmp_path, [800 * MIB])
    assert learned.need(0) == 800 * MIB


def test_runner_holds_back_steps_that_do_not_fit(tmp_path):
    """Steps bigger than the machine run one at a time, and their waits are recorded as memory
    waits; small ones run together."""
    tasks = [sh_task(i, "sleep 0.3") for i in range(3)]
    dag = Dag(tuple(tasks), tuple(frozenset() for _ in tasks))
    for peak, together in ((4 * read_machine()[0], 1), (MIB, 3)):
        memory = budget(tmp_path / str(together), [peak] * 3)
        runner = Runner(
            dag, env=os.environ, cwd=str(tmp_path), workdir=str(tmp_path), jobs=3, priorities=[1.0] * 3,
            internal=Internal(), stdout=io.BytesIO(), stderr=io.BytesIO(), memory=memory,
        )  # fmt: skip
        result = runner.run()
        memory.close()
        assert result.returncode == 0
        assert overlap(result.records) == together
        held = [r for r in result.records if r.memory_wait > 0]
        assert len(held) == (2 if together == 1 else 0)
        report = build_report(dag, result.records, wall_seconds=result.wall_seconds, exit_code=0, jobs=3)
        summary = format_summary(report)
        record = log_record(nvcc="nvcc", args=[], cwd="/", sources=[], outputs=[], exit_code=0, wall_seconds=1.0,
                            started=0.0, mode="graph", report=report)  # fmt: skip
        trace = trace_events(report)
        assert record["memory_wait_seconds"] == pytest.approx(sum(r.memory_wait for r in held), abs=1e-5)
        assert trace[0]["args"]["memory_wait_seconds"] == record["memory_wait_seconds"]
        if held:
            assert "waited for memory" in summary and f"({len(held)} commands held back" in summary
            assert sorted(s.get("memory_wait", 0) > 0 for s in record["steps"]) == [False, True, True]
        else:
            assert "waited for memory" not in summary and "memory_wait" not in str(record["steps"])
        assert not [n for n in os.listdir(tmp_path / str(together)) if n.startswith(("c-", "w-"))]  # all gone


# -- real memory cgroups ---------------------------------------------------------------------------

NVCC = shutil.which("nvcc")


def test_limit_and_usage_are_read_from_the_real_cgroup(memory_cgroup, tmp_path):
    group = memory_cgroup(700 * MIB)
    probe = (
        "import json; from fast_nvcc.machine.headroom import *; from fast_nvcc.machine.memory_files import budget_directory;"
        " c = this_process_cgroups(); h = read_headroom(c);"
        "b = bytearray(b'x') * (200 << 20);"  # 200 MiB of our own, to see in the usage
        "h2 = read_headroom(c); print(json.dumps([c[0].path, h.limit, h.free, h.where, h2.free,"
        f" budget_directory({str(tmp_path)!r}, c)]))"
    )
    out = subprocess.run(group.wrap([sys.executable, "-c", probe]), capture_output=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}).stdout  # fmt: skip
    path, limit, free, where, free_later, directory = json.loads(out)
    assert os.path.realpath(path) == os.path.realpath(group.path)
    assert limit == 700 * MIB and where == path
    assert 0 < free < 700 * MIB
    assert free - free_later >= 190 * MIB  # what it allocated came off
    assert directory.startswith(str(tmp_path / "memory" / "cgroup-"))


def _compile(group, out: Path, env, *options, extra=()):
    argv = [sys.executable, "-m", "fast_nvcc", *options, "--", "-c", str(SOURCES / "kernel.cu"),
            f"-I{SOURCES / 'include'}", *extra, "-o", str(out)]  # fmt: skip
    return subprocess.Popen(group.wrap(argv) if group else argv, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)  # fmt: skip


def _nvcc_object(tmp_path: Path, extra=()) -> bytes:
    out = tmp_path / "nvcc.o"
    subprocess.run([NVCC, "-c", str(SOURCES / "kernel.cu"), f"-I{SOURCES / 'include'}", *extra, "-o", str(out)],
                   check=True, cwd=tmp_path)  # fmt: skip
    return mask(out.read_bytes())


@pytest.mark.nvcc
@pytest.mark.skipif(NVCC is None, reason="no nvcc")
def test_the_budget_holds_steps_back_in_a_small_cgroup(memory_cgroup, tmp_path):
    """Three compiles at once in 512 MiB: on a first build the per-tool defaults (cudafe++ 650
    MiB, cicc 800) do not fit beside anything, so steps wait for memory; none is killed and every
    object is nvcc's."""
    group = memory_cgroup(512 * MIB)
    log = tmp_path / "log.jsonl"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "FAST_NVCC_LOG": str(log), "FAST_NVCC_POOL_DIR": str(tmp_path / "pool"),
           "FAST_NVCC_CACHE_DIR": str(tmp_path / "cache"), "FAST_NVCC_CACHE": "0"}  # fmt: skip
    procs = [_compile(group, tmp_path / f"k{i}.o", env) for i in range(3)]
    for proc in procs:
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err.decode()
    assert group.oom_kills() == 0
    expected = _nvcc_object(tmp_path)
    for i in range(3):
        assert mask((tmp_path / f"k{i}.o").read_bytes()) == expected
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(records) == 3
    held = [s for r in records for s in r["steps"] if s.get("memory_wait", 0) > 0]
    assert held, "no step waited for memory"
    assert sum(r["memory_wait_seconds"] for r in records) == pytest.approx(sum(s["memory_wait"] for s in held), abs=1e-3)
    analysis = subprocess.run([sys.executable, "-m", "fast_nvcc", "analyze", str(log)], capture_output=True,
                              text=True, env=env, check=False)  # fmt: skip
    assert analysis.returncode == 0, analysis.stderr
    assert f"held back by the memory budget: {len(held)} steps" in analysis.stdout


@pytest.mark.nvcc
@pytest.mark.skipif(NVCC is None or shutil.which("gcc") is None, reason="no nvcc or gcc")
def test_a_step_the_oom_killer_takes_runs_again_alone(memory_cgroup, tmp_path):
    """A host compiler whose first preprocessing of the source asks for 1 GiB in a 384 MiB cgroup: the kernel's
    OOM killer takes it; fast_nvcc runs that step again, says so under -v, and the object
    is nvcc's."""
    group = memory_cgroup(384 * MIB)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    wrapper = bindir / "gcc"
    wrapper.write_text(
        "#!/bin/sh\n"
        'case " $* " in *" -E "*kernel.cu*)\n'  # a step's preprocessing, not nvcc's probe in --dryrun
        f'  if mkdir {tmp_path / "ate"} 2>/dev/null; then\n'
        f"    exec {sys.executable} -c 'b = bytearray(b\"x\") * (1 << 30)'\n"
        "  fi;;\nesac\n"
        f'exec {shutil.which("gcc")} "$@"\n'
    )
    wrapper.chmod(0o755)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "FAST_NVCC_POOL_DIR": str(tmp_path / "pool"),
           "FAST_NVCC_CACHE_DIR": str(tmp_path / "cache"), "FAST_NVCC_CACHE": "0"}  # fmt: skip
    proc = _compile(group, tmp_path / "fast.o", env, "-v", extra=["-ccbin", str(wrapper)])
    _, err = proc.communicate(timeout=600)
    text = err.decode()
    assert proc.returncode == 0, text
    assert group.oom_kills() >= 1
    assert "killed for lack of memory; ran it again" in text
    assert "Killed" not in text.replace("killed for lack", "")
    assert mask((tmp_path / "fast.o").read_bytes()) == _nvcc_object(tmp_path, ["-ccbin", str(wrapper)])


@pytest.mark.parametrize("version", [1, 2])
def test_page_cache_of_files_is_not_usage_but_shared_memory_is(tmp_path, version):
    """A cgroup's files as the kernel writes them (made-up numbers): the file pages, active
    and inactive, leave the usage (a build's headers are active cache); shmem stays in it."""
    gib = 2**30
    if version == 1:
        (tmp_path / "memory.limit_in_bytes").write_text(f"{8 * gib}\n")
        (tmp_path / "memory.usage_in_bytes").write_text(f"{7 * gib}\n")
        (tmp_path / "memory.stat").write_text(
            f"cache {5 * gib}\nshmem {gib}\ntotal_inactive_file {gib}\ntotal_active_file {3 * gib}\n")
        (tmp_path / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n")
    else:
        (tmp_path / "memory.max").write_text(f"{8 * gib}\n")
        (tmp_path / "memory.current").write_text(f"{7 * gib}\n")
        (tmp_path / "memory.stat").write_text(
            f"anon {2 * gib}\nfile {5 * gib}\nshmem {gib}\ninactive_file {gib}\nactive_file {3 * gib}\n")
        (tmp_path / "memory.events").write_text("low 0\nhigh 0\nmax 0\noom 2\noom_kill 2\n")
    level = read_level(Cgroup(version, str(tmp_path)))
    assert level == Level(str(tmp_path), 8 * gib, 3 * gib, 2)


def test_what_running_steps_hold_raises_their_claims_and_their_kinds_peak(tmp_path):
    """Live correction: a step on a guess that holds more than its kind's peak posts it, and the
    claims of steps on guesses grow to it; a learned step's claim grows to what it holds; claims
    never shrink; a step that ends posts its kind's peak, not below what a running one holds.
    (Sizes a tenth of a real cicc's, so that a quarter of any machine is above 4x the guess.)"""
    mine = MemoryBudget(str(tmp_path), peaks=[80 * MIB, 80 * MIB, 5 * MIB, 80 * MIB],
                        kinds=[("cicc", "compute_90a")] * 3 + [("cicc", "compute_80")],
                        learned=[False, False, False, True], cgroups=[])  # fmt: skip
    for task_id in range(4):
        assert mine.reserve(task_id, now=0.0)

    def claims():
        return sorted(int(n.split("-")[3]) // MIB for n in os.listdir(tmp_path) if n.startswith("c-"))

    def peaks(what):
        return [n for n in os.listdir(tmp_path) if n.startswith(f"{what}-cicc~compute_90a~")]

    # No step of compute_90a has ended: guesses count 4 times.
    assert claims() == [20, 80, 320, 320]
    mine.observe({0: 400 * MIB, 1: 50 * MIB, 2: 4 * MIB, 3: 100 * MIB})
    # 0 posts 400 MiB for compute_90a; 1 and 2, on guesses, claim that too; 3 what it holds.
    assert claims() == [100, 400, 400, 400]
    assert peaks("live") == [f"live-cicc~compute_90a~{400 * MIB}"] and not peaks("peak")
    other = MemoryBudget(str(tmp_path), peaks=[80 * MIB], kinds=[("cicc", "compute_90a")], learned=[False], cgroups=[])
    assert other.need(0) == 400 * MIB
    # A compile that has not read the directory lately posts less: the larger stays.
    PeerPeaks(str(tmp_path)).post(("cicc", "compute_90a"), 350 * MIB, live=True)
    assert peaks("live") == [f"live-cicc~compute_90a~{400 * MIB}"]
    mine.observe({0: 200 * MIB, 3: 90 * MIB})  # less now: the claims stay
    assert claims() == [100, 400, 400, 400]
    mine.release(2, rss_kb=4 * 1024)  # a small one ends while 0 held 200 MiB at last sight
    assert peaks("peak") == [f"peak-cicc~compute_90a~{200 * MIB}"] and not peaks("live")
    other.expected.peers._read = -1.0  # (it reads the directory once a second)
    assert other.need(0) == 200 * MIB  # a peak known: no margin
    other.close()
    mine.close()
