"""Where a build's cores sat idle (fast_nvcc/analysis/idle.py): core-seconds no step held, and
those steps held but left idle, from FAST_NVCC_LOG, on a build whose answer is known."""

from __future__ import annotations

import json

from test_analysis import log_record, ninja_log, run_main, write_jsonl

from fast_nvcc.analysis import analyze, load_build


def _build(tmp_path):
    """20 s on 4 cores (80 core-s): a split cicc on 1 core for 10 s then 3 for 10 s (40 core-s
    held, 34 s of cpu); a host compile of 16 s of its job's 20 s at half a core (16 held, 8 used);
    one stopped from 10 s to 20 s (10 held, 10 used).  So 66 held, 52 used: 28 idle, 14 of them
    held by no step (2 in the last 2 s, where only the cicc's 3 cores were held) and 14 held and
    left idle (cc1plus 8, cicc 6).  The stopped one stood ready from 16 s to 20 s beside the one core
no step held: 4 core-s waited beside a free core."""
    split = log_record(1000.0, 20.0, ["/b/split.o"], [("cicc", "cicc", "compute_90", 0.0, 20.0)])
    split["steps"][0].update(cpu_seconds=34.0, cores=3, cores_at=[[0.0, 1], [10.0, 3]])
    half = log_record(1000.0, 20.0, ["/b/half.o"], [("cc1plus", "host-compile", None, 0.0, 16.0)])
    half["steps"][0]["cpu_seconds"] = 8.0
    stopped = log_record(1000.0, 20.0, ["/b/stopped.o"], [("cc1plus", "host-compile", None, 0.0, 20.0)])
    stopped["steps"][0].update(cpu_seconds=10.0, yielded=10.0, stops_at=[[10.0, 20.0]])
    return write_jsonl(tmp_path / "log.jsonl", [split, half, stopped])


def test_the_idle_cores_are_those_no_step_held_and_those_steps_left_idle(tmp_path, capsys):
    idle = analyze(load_build([str(_build(tmp_path))]), slots=4).idle
    assert (round(idle.held, 6), round(idle.cpu, 6)) == (66.0, 52.0)
    assert (round(idle.idle, 6), round(idle.not_held, 6), round(idle.tail_not_held, 6)) == (28.0, 14.0, 2.0)
    assert [(tool, round(s, 6)) for tool, s in idle.unused] == [("cc1plus", 8.0), ("cicc", 6.0)]
    assert round(idle.waited_free, 6) == 4.0
    _, out, _ = run_main(capsys, tmp_path / "log.jsonl", "-j", "4")
    assert ("idle cores             28 core-s (all 4 cores for 7.00 s): 14 held by no step (2 of them in the"
            " build's last 10%), 14 held by steps that left them idle (cc1plus 8, cicc 6)") in out
    _, out, _ = run_main(capsys, tmp_path / "log.jsonl", "-j", "4", "--format", "json")
    found = json.loads(out)["idle_cores"]
    assert (found["core_seconds"], found["not_held_core_seconds"], found["unused_by_tool"]["cicc"]) == (28.0, 14.0, 6.0)
    assert found["waited_free_core_seconds"] == 4.0


def test_a_step_ready_beside_a_core_no_step_held_is_counted_and_a_wait_for_memory_is_not(tmp_path, capsys):
    """2 cores, 10 s.  A cicc runs 0-10 s; one core is free until 6 s.  A ptxas was ready at 2 s
    and started at 6 s.  A host compile was ready at 1 s and started at 9 s, the last 5 s of its
    wait held back by the memory budget: only 1-4 s counts.  One free core for two waiting steps
    (2-4 s) counts once: 1 (1-2 s) + 4 (2-6 s) = 5 core-s; from 6 s both cores are held."""
    cicc = log_record(1000.0, 10.0, ["/b/a.o"], [("cicc", "cicc", "compute_90", 0.0, 10.0)])
    ptxas = log_record(1000.0, 10.0, ["/b/b.o"], [("ptxas", "ptxas", "sm_90", 6.0, 4.0)])
    ptxas["steps"][0]["wait"] = 4.0
    memory = log_record(1000.0, 10.0, ["/b/c.o"], [("cc1plus", "host-compile", None, 9.0, 1.0)])
    memory["steps"][0].update(wait=8.0, memory_wait=5.0)
    write_jsonl(tmp_path / "log.jsonl", [cicc, ptxas, memory])
    idle = analyze(load_build([str(tmp_path / "log.jsonl")]), slots=2).idle
    assert round(idle.waited_free, 6) == 5.0
    _, out, _ = run_main(capsys, tmp_path / "log.jsonl", "-j", "2")
    assert "steps stood ready beside a core no step held for 5.0 core-s" in out


def test_without_fast_nvccs_log_nothing_tells_what_the_cores_did(tmp_path, capsys):
    (tmp_path / "build").mkdir()
    (tmp_path / "build" / ".ninja_log").write_text(ninja_log([(0, 20000, "a.o")]))
    assert analyze(load_build([str(tmp_path / "build")])).idle is None
    _, out, _ = run_main(capsys, tmp_path / "build", "--format", "json")
    assert json.loads(out)["idle_cores"] is None
    _, out, _ = run_main(capsys, tmp_path / "build")
    assert "idle cores" not in out


def test_the_kernels_idle_of_a_split_steps_granted_cores_tells_idle_from_shared(tmp_path, capsys):
    """The build above, its split cicc's log telling the kernel saw its granted cores idle for
    2 of the 6 core-s its threads did not use (another step's threads ran on them the other 4).
    An older log, without cores_idle_seconds, says nothing of it."""
    path = _build(tmp_path)
    records = [json.loads(line) for line in path.read_text().splitlines()]
    records[0]["steps"][0]["cores_idle_seconds"] = 2.0
    write_jsonl(path, records)
    idle = analyze(load_build([str(path)]), slots=4).idle
    assert (round(idle.granted_unused, 6), idle.granted_idle) == (6.0, 2.0)
    _, out, _ = run_main(capsys, path, "-j", "4")
    assert "of the 6 core-s split steps held beyond their threads' use, the kernel saw 2 idle (the rest ran other steps)" in out
    _, out, _ = run_main(capsys, path, "-j", "4", "--format", "json")
    found = json.loads(out)["idle_cores"]
    assert (found["granted_unused_core_seconds"], found["granted_idle_core_seconds"]) == (6.0, 2.0)

    _build(tmp_path)
    assert analyze(load_build([str(path)]), slots=4).idle.granted_idle is None
    _, out, _ = run_main(capsys, path, "-j", "4")
    assert "the kernel saw" not in out
