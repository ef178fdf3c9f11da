"""fast_nvcc's guesses: when each is taken (made-up costs), how a failed one is stopped early, and
what the history remembers of it: real nvcc compiles of a source whose module_id carries a
process id and of one whose host split fails, each compiled twice."""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path

import pytest

from fast_nvcc.guess import decisions as guesses
from fast_nvcc.guess.decisions import Memory, guess_host_split, guess_module_id, worth_guessing
from fast_nvcc.learn.history import History
from fast_nvcc.run.task_records import State
from fast_nvcc.guess.module_id import DIFFERS, PID, carries_pid, id_template, verdict

from helpers import (
    fast_nvcc_command, mask, mask_pid, module_id_writer, nvcc_version, require_cudafe_module_id, run_tool,
)  # fmt: skip

TWO_TARGETS = ["-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=sm_90"]


# -- the decision, with made-up costs ----------------------------------------------------------


@pytest.mark.parametrize(
    "failure, saving, waste, take",
    [
        (0.0, 1.0, 100.0, True),  # known to hold: any saving is worth it
        (1.0, 100.0, 0.0, False),  # known to fail: nothing is
        (0.1, 2.0, 10.0, True),  # 1.8 saved against 1.0 lost
        (0.1, 1.0, 10.0, False),  # 0.9 against 1.0
        (0.5, 3.0, 3.0, False),  # even odds, even stakes: not worth the work
        (0.0, 0.0, 1.0, False),  # nothing to save
    ],
)
def test_a_guess_is_taken_when_its_expected_saving_beats_its_expected_loss(failure, saving, waste, take):
    assert worth_guessing(failure, saving=saving, waste=waste) is take


def test_a_cicc_guesses_its_module_id_unless_waiting_for_cudafe_is_nearly_free():
    # cudafe++ 4 s after a 1 s host preprocessing, the cicc's own 1 s: 4 s saved.
    costs = dict(host_preprocess=1.0, cudafe=4.0, device_preprocess=1.0)
    assert guess_module_id(0.1, cicc=10.0, **costs)
    assert not guess_module_id(1.0, cicc=10.0, **costs)
    # cudafe++ 0.2 s against a 120 s cicc whose front end runs 84 s before its id shows a
    # failure: the 0.2 s are not worth a 10% chance of 84 wasted seconds.
    costs = dict(host_preprocess=0.1, cudafe=0.2, device_preprocess=0.1)
    assert not guess_module_id(0.1, cicc=120.0, **costs)
    assert guess_module_id(0.0, cicc=120.0, **costs)


def test_no_module_id_is_guessed_without_a_spare_core():
    # While the build tool holds compiles back, a cicc started early runs instead of cudafe++,
    # not beside it: nothing to save, whatever the odds.
    costs = dict(host_preprocess=1.0, cudafe=4.0, device_preprocess=1.0, cicc=10.0)
    assert guess_module_id(0.1, **costs) and guess_module_id(0.0, **costs)
    assert not guess_module_id(0.1, spare_core=False, **costs)
    assert not guess_module_id(0.0, spare_core=False, **costs)


def test_the_host_split_is_guessed_while_it_is_more_likely_to_hold_than_not():
    assert guess_host_split(0.1, host_compile=5.0)
    assert not guess_host_split(1.0, host_compile=5.0)


def test_what_failed_for_a_source_is_not_tried_again_and_new_sources_take_the_projects_rate():
    memory = Memory({("/a.cu", "module_id", "compute_80"): False, ("/b.cu", "module_id", "compute_80"): True},
                    {"module_id": (1, 2)})  # fmt: skip
    assert memory.failure("/a.cu", "module_id", "compute_80") == 1.0
    assert memory.failure("/b.cu", "module_id", "compute_80") == 0.0
    # One failure in two sources, drawn towards the prior by its weight.
    expected = (1 + guesses.PRIOR_FAILURE * guesses.PRIOR_WEIGHT) / (2 + guesses.PRIOR_WEIGHT)
    assert memory.failure("/c.cu", "module_id", "compute_80") == pytest.approx(expected)
    assert Memory({}, {}).failure("/c.cu", "host_split") == pytest.approx(guesses.PRIOR_FAILURE)


def test_the_history_keeps_the_last_outcome_per_source_and_counts_failed_sources(tmp_path):
    history = History(str(tmp_path / "history.sqlite"))
    history.record_guesses([
        guesses.Outcome("/a.cu", "module_id", "compute_80", False, PID, 3.5),
        guesses.Outcome("/a.cu", "module_id", "compute_90", False, PID, 3.0),
        guesses.Outcome("/b.cu", "module_id", "compute_80", True),
    ])  # fmt: skip
    memory = history.guesses(["/a.cu"])
    assert memory.known == {("/a.cu", "module_id", "compute_80"): False, ("/a.cu", "module_id", "compute_90"): False}
    assert memory.rates == {"module_id": (1, 2)}
    history.record_guesses([guesses.Outcome("/a.cu", "module_id", "compute_80", True)])
    assert history.guesses(["/a.cu"]).known[("/a.cu", "module_id", "compute_80")] is True
    history.close()


# -- the early verdict on a cicc's own module_id ------------------------------------------------


@pytest.mark.parametrize(
    "nvcc_id, own_id, why",
    [
        (None, None, None),
        (b"_2287aca6_10_kernels_cu_b49be419", None, None),  # its own not written yet
        (None, b"_2287aca6_10_kernels_cu_b49be419", None),
        (b"_2287aca6_10_kernels_cu_b49be419", b"_2287aca6_10_kernels_cu_b49be419", None),
        (b"_16680d78_4_m_cu_g", b"_16680d78_4_m_cu__Z3foov", DIFFERS),
        # cudafe++ (pid 5516) wrote nvcc's: no other process can write the same.
        (b"_9e7129fc_11_pidheavy_cu_5ee0b1f1_5516", None, PID),
        # ... nor can another process write cicc's (pid 3696).
        (None, b"_9e7129fc_11_pidheavy_cu_5ee0b1f1_3696", PID),
        (b"_9e7129fc_11_pidheavy_cu_5ee0b1f1_5516", b"_9e7129fc_11_pidheavy_cu_5ee0b1f1_3696", PID),
        # A name that merely ends like one: not proof until both are known.
        (b"_16680d78_4_m_cu_abcdef12_777", None, None),
    ],
)
def test_either_module_id_alone_proves_a_guess_wrong_when_it_carries_its_writers_pid(nvcc_id, own_id, why):
    assert verdict(nvcc_id, own_id, writer_pid=5516, cicc_pid=3696) == why


def test_carries_pid_reads_the_tail_of_the_id():
    assert carries_pid(b"_16680d78_4_m_cu_49f10bae_5411", 5411)
    assert not carries_pid(b"_16680d78_4_m_cu_49f10bae_5411", 541)
    assert not carries_pid(b"_2287aca6_10_kernels_cu_b49be419", 419)


# -- real nvcc: a failed guess costs seconds, once ------------------------------------------------

# No external definition: cudafe++'s module_id ends in its process id, cicc's in its own.
NO_EXTERNAL_DEFINITION = """\
namespace {
template <int N> __device__ float chain(float x) {
#pragma unroll
    for (int i = 0; i < N; ++i) x = sinf(x) * cosf(x + i) + sqrtf(fabsf(x) + i);
    return x;
}
__global__ void kernel(float *p) { p[threadIdx.x] = chain<100>(p[threadIdx.x]); }
int launch() { kernel<<<1, 32>>>(nullptr); return 0; }
int dummy = launch();
}  // namespace
"""

# Its architectures' stubs differ (only90 exists for sm_90 alone), and sm_90's cicc is the slow
# one, so the host compile starts from sm_80's stub, which does not hold.  Its first external
# definition is host-only for sm_80 too: that cicc's own module_id differs.
STUBS_DIFFER = """\
template <int N> __device__ float chain(float x) {
#pragma unroll
    for (int i = 0; i < N; ++i) x = sinf(x) * cosf(x + i) + sqrtf(fabsf(x) + i);
    return x;
}
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
__global__ void only90(float *p) { p[threadIdx.x] = chain<100>(p[threadIdx.x]); }
#endif
__global__ void everywhere(float *p) { p[threadIdx.x] = chain<4>(p[threadIdx.x]); }
"""

# The spelling of every nvcc tested (11.8 to 13.x; -compress-mode=none is newer than 12.5).
NO_COMPRESS = "--no-compress"
# NO_EXTERNAL_DEFINITION's ptxas at -O0: what the tests watch is its cicc against cudafe++ (2.6-3.3
# s against 0.6 s either way on the 2-core machine), and its ptxas took 6.6-7.7 s of a 12 s
# compile at -O3 and 2.5-3.4 s of 7.4 s at -O0.
QUICK_PTXAS = ["-Xptxas", "-O0"]


def _compile(nvcc: str, tmp_path: Path, source: str, name: str, log: Path, env: dict | None = None, flags=()):
    args = ["-c", source, "-o", name, *TWO_TARGETS, NO_COMPRESS, *flags]
    outcome = run_tool(fast_nvcc_command(nvcc, args, ["-v"]), cwd=tmp_path, tmpdir=tmp_path / "t",
                       env={"FAST_NVCC_CACHE_DIR": str(tmp_path / "cache"), "FAST_NVCC_LOG": str(log), **(env or {})})  # fmt: skip
    assert outcome.returncode == 0, outcome.stderr.decode()
    assert not outcome.leftovers
    (record,) = [json.loads(line) for line in log.read_text().splitlines()]
    return outcome, record["steps"]


def _plain(nvcc: str, tmp_path: Path, source: str, name: str, flags=()) -> bytes:
    args = [nvcc, "-c", source, "-o", name, *TWO_TARGETS, NO_COMPRESS, *flags]
    outcome = run_tool(args, cwd=tmp_path, tmpdir=tmp_path / "t")
    assert outcome.returncode == 0, outcome.stderr.decode()
    return outcome.files[name]


def _same_but_pid(a: bytes, b: bytes) -> bool:
    return mask_pid(a) == mask_pid(b)


def _same_but_pid_as_one_of(built: bytes, plains: list[bytes]) -> bool:
    """Masking the pid's digits leaves two objects alike only where both pids have as many
    digits: one digit more lengthens the names, their mangled lengths and every offset after
    (a full suite failed so, 2026-11-26: fast_nvcc's cudafe++ ran as pid 9795, plain nvcc's
    as 10435, and the objects differed in size).  Pids grow by one per process (and wrap at
    pid_max), so their digit count changes at most once in a test's span: of two plain nvcc
    compiles, one before and one after, at least one has as many digits as ``built``'s."""
    return any(_same_but_pid(built, plain) for plain in plains)


@pytest.mark.nvcc
# nvcc 13.0 and PyPI's 13.5 write the id in one form (2026-11-28: `_6c551f5d_4_b_cu_c8fd8567_<pid>`
# from both, for one source and directory): 62 s of CI each.  FAST_NVCC_EVERY_TOOLCHAIN=1 runs it
# against every toolchain, 11.8's too.
@pytest.mark.one_toolchain
def test_a_module_id_with_a_pid_stops_the_guess_early_and_the_next_compile_does_not_guess(nvcc, tmp_path):
    (tmp_path / "nopid.cu").write_text(NO_EXTERNAL_DEFINITION)
    require_cudafe_module_id(nvcc, ["-c", "nopid.cu", *TWO_TARGETS], cwd=tmp_path)
    plains = [_plain(nvcc, tmp_path, "nopid.cu", "before.o", QUICK_PTXAS)]
    first, steps = _compile(nvcc, tmp_path, "nopid.cu", "first.o", tmp_path / "first.jsonl", flags=QUICK_PTXAS)
    ciccs = [s for s in steps if s["tool"] == "cicc"]
    assert len(ciccs) == 2
    # Every cicc's guess failed for the pid, and none was run to its end on its own id: no
    # module_id check had to rerun one.
    assert all(s["guess_failed"] == PID for s in ciccs), ciccs
    assert not [s for s in steps if s["tool"] == "check module_id" and s.get("guess_failed")]
    assert b"carries the writer's process id" in first.stderr
    assert b"ran it to its end" not in first.stderr

    # The next compile knows: its ciccs start with cudafe++, on the id the first one had with
    # this cudafe++'s pid, and the prediction holds.
    second, steps = _compile(nvcc, tmp_path, "nopid.cu", "second.o", tmp_path / "second.jsonl", flags=QUICK_PTXAS)
    assert not [s for s in steps if s.get("guess_failed")], steps
    assert b"process id" not in second.stderr
    assert second.stderr.count(b"on the module_id its last compile predicted") == 2
    plains.append(_plain(nvcc, tmp_path, "nopid.cu", "after.o", QUICK_PTXAS))
    assert _same_but_pid_as_one_of(first.files["first.o"], plains)
    assert _same_but_pid_as_one_of(second.files["second.o"], plains)
    assert mask(first.files["first.o"]) != mask(plains[-1])  # the pid is really there


@pytest.mark.nvcc
@pytest.mark.one_toolchain  # the id's form: one for 13.0 and 13.5 (the test above)
def test_under_a_full_ninja_a_first_compile_does_not_guess_and_runs_each_cicc_once(nvcc, tmp_path):
    """ninja -j1 runs as many jobs as it may: no core is spare for a guess, so the cicc of a
    source whose module_id carries a pid (the guess would fail, as above) waits for cudafe++'s
    id and runs once."""
    if shutil.which("ninja") is None:
        pytest.skip("ninja is not installed")
    (tmp_path / "nopid.cu").write_text(NO_EXTERNAL_DEFINITION)
    require_cudafe_module_id(nvcc, ["-c", "nopid.cu", *TWO_TARGETS], cwd=tmp_path)
    plains = [_plain(nvcc, tmp_path, "nopid.cu", "before.o", QUICK_PTXAS)]
    log = tmp_path / "build.jsonl"
    command = fast_nvcc_command(nvcc, ["-c", "nopid.cu", "-o", "ninja.o", *TWO_TARGETS, NO_COMPRESS, *QUICK_PTXAS])
    (tmp_path / "build.ninja").write_text(f"rule cc\n  command = {shlex.join(command)}\nbuild ninja.o: cc nopid.cu\n")
    built = run_tool(["ninja", "-j1"], cwd=tmp_path, tmpdir=tmp_path / "t",
                     env={"FAST_NVCC_CACHE_DIR": str(tmp_path / "cache"), "FAST_NVCC_LOG": str(log)})  # fmt: skip
    assert built.returncode == 0, built.stdout.decode() + built.stderr.decode()
    assert not built.leftovers
    (record,) = [json.loads(line) for line in log.read_text().splitlines()]
    ciccs = [s for s in record["steps"] if s["tool"] == "cicc"]
    assert len(ciccs) == 2
    assert not [s for s in record["steps"] if s.get("guess_failed")], record["steps"]
    plains.append(_plain(nvcc, tmp_path, "nopid.cu", "after.o", QUICK_PTXAS))
    assert _same_but_pid_as_one_of(built.files["ninja.o"], plains)


@pytest.mark.nvcc
@pytest.mark.one_toolchain  # what the history keeps; the split per version: test_host_split
def test_a_host_split_that_failed_is_not_tried_again_for_that_source(nvcc, tmp_path):
    (tmp_path / "stubs.cu").write_text(STUBS_DIFFER)
    if module_id_writer(nvcc, ["-c", "stubs.cu", *TWO_TARGETS], cwd=tmp_path).arch == "compute_90":
        major, minor = nvcc_version(nvcc)
        pytest.skip(f"nvcc {major}.{minor}'s sm_90 cicc writes the module_id that cudafe++ and the host"
                    " compile wait for: the host compile starts from its final stub, the split holds")  # fmt: skip
    # Without the stub probe the host compile starts from the first stub there is: sm_80's,
    # nearly always.  Once in CI (2026-11-27) sm_90's own stub was there first and the split
    # held: then the case under test did not happen, and a first build from scratch runs again.
    env = {"FAST_NVCC_STUB_PROBE": "0"}
    for _ in range(3):
        shutil.rmtree(tmp_path / "cache", ignore_errors=True)
        (tmp_path / "first.jsonl").unlink(missing_ok=True)
        first, steps = _compile(nvcc, tmp_path, "stubs.cu", "first.o", tmp_path / "first.jsonl", env)
        host = [s for s in steps if s["kind"] == "host-compile" and s["tool"] != "learned stub"]
        if host[-1]["tool"] != "as":
            break
    assert [s["tool"] for s in host] == ["cc1plus", "gcc -c"]  # the front, and the back's whole compile
    assert host[1]["guess_failed"] == "its stub differs from the one it started from"
    assert b"host compile run as printed: its stub differs" in first.stderr

    second, steps = _compile(nvcc, tmp_path, "stubs.cu", "second.o", tmp_path / "second.jsonl", env)
    assert not [s for s in steps if s.get("guess_failed")], steps
    assert b"host compile run as printed" not in second.stderr
    # The host compile ran once: cc1plus, then as on the real .fatbin.c.
    assert [s["tool"] for s in steps if s["kind"] == "host-compile" and s["tool"] != "learned stub"] == ["cc1plus", "as"]
    plain = _plain(nvcc, tmp_path, "stubs.cu", "plain.o")
    assert mask(first.files["first.o"]) == mask(plain)
    assert mask(second.files["second.o"]) == mask(plain)


def test_a_module_id_with_a_pid_is_predicted_from_the_last_compile_unless_a_prediction_failed():
    template = id_template(b"_9e7129fc_11_pidheavy_cu_5ee0b1f1_5516")
    assert template == "_9e7129fc_11_pidheavy_cu_5ee0b1f1_{pid}"
    assert id_template(b"_2287aca6_10_kernels_cu_b49be419") is None
    key = ("/a.cu", "module_id", "compute_80")
    detail = guesses.module_id_detail(template, cwd="/build")
    memory = Memory({key: False}, {}, {key: detail})
    assert memory.predicted_module_id("/a.cu", "compute_80", cwd="/build") == template
    assert memory.predicted_module_id("/a.cu", "compute_90", cwd="/build") is None
    # The id's second hash follows the working directory: from another, nothing is predicted.
    assert memory.predicted_module_id("/a.cu", "compute_80", cwd="/other") is None
    failed = Memory({key: False, ("/a.cu", "predicted_module_id", "compute_80"): False}, {}, {key: detail})
    assert failed.predicted_module_id("/a.cu", "compute_80", cwd="/build") is None


def test_a_predicting_cicc_reads_a_private_id_and_waits_only_for_cudafe_to_start():
    from fast_nvcc.graph.build import build_dag
    from fast_nvcc.graph.tasks import Action, waits_early
    from fast_nvcc.plan.dryrun import Kind
    from plans import load_plan

    dag = build_dag(load_plan("compile_3arch_md"), speculate=lambda step: "_x_{pid}", workdir="/w",
                    exists=lambda path: True)
    (cudafe,) = [t for t in dag.tasks if t.step.kind is Kind.CUDAFE]
    for cicc in [t for t in dag.tasks if t.step.kind is Kind.CICC and t.action is Action.EXEC]:
        check = dag.tasks[cicc.checked_by]
        assert cicc.predicted_module_id == "_x_{pid}" and not cicc.own_module_id
        assert cicc.argv[cicc.argv.index("--module_id_file_name") + 1] == check.module_ids[1] == cicc.early[2]
        assert "--gen_module_id_file" not in cicc.argv
        assert cudafe.id in dag.preds[cicc.id] and waits_early(dag, cicc.id)


def test_a_critical_path_counts_cudafe_where_the_cicc_waited_for_it_and_not_where_it_did_not():
    from fast_nvcc.graph.build import build_dag
    from fast_nvcc.graph.tasks import Action
    from fast_nvcc.plan.dryrun import Kind
    from fast_nvcc.report.run_report import as_run
    from fast_nvcc.run.task_records import Record
    from plans import load_plan

    plan = load_plan("compile_3arch_md")
    for way, failed, waits in (("_x_{pid}", "", False), ("_x_{pid}", "its predicted module_id differs", True),
                               (True, "", False), (True, PID, True)):  # fmt: skip
        dag = build_dag(plan, speculate=lambda step: way, workdir="/w", exists=lambda path: True)
        records = [Record(t.id) for t in dag.tasks]
        (cudafe,) = [t for t in dag.tasks if t.step.kind is Kind.CUDAFE]
        ciccs = [t for t in dag.tasks if t.step.kind is Kind.CICC and t.action is Action.EXEC]
        for cicc in ciccs:
            records[cicc.id].guess_failed = failed
        ran = as_run(dag, records)
        assert all((cudafe.id in ran.preds[c.id]) is waits for c in ciccs), (way, failed)


class _Run:
    """What EarlyVerdicts.poll sees of a run (fast_nvcc.run.handlers.RunView), and the redo it asks for."""

    def __init__(self, dag, pids):
        from fast_nvcc.run.task_records import Record

        self.dag = dag
        self.records = [Record(t.id) for t in dag.tasks]
        self.pids = pids
        self.redone = {}

    def record(self, task_id):
        return self.records[task_id]

    def running(self, task_id):
        return task_id in self.pids

    def step_pids(self):
        return dict(self.pids)

    def redo(self, task_id, as_task, *, why, half_written=()):
        self.redone[task_id] = (as_task, why)


def _verdict_case(tmp_path):
    from fast_nvcc.graph.build import build_dag
    from fast_nvcc.graph.tasks import Action
    from fast_nvcc.guess.module_id import EarlyVerdicts
    from fast_nvcc.plan.dryrun import Kind
    from plans import load_plan

    dag = build_dag(load_plan("compile_3arch_md"), speculate=True, workdir=str(tmp_path), exists=lambda path: True)
    (cudafe,) = [t for t in dag.tasks if t.step.kind is Kind.CUDAFE]
    ciccs = [t for t in dag.tasks if t.step.kind is Kind.CICC and t.action is Action.EXEC]
    nvcc_path = tmp_path / "nvcc.module_id"
    # The plan's module_id path, here: the check reads what the plan names.
    dag = type(dag)(tuple(t if t.action is not Action.CHECK_MODULE_ID else
                          t._replace(module_ids=(str(nvcc_path), t.module_ids[1]))
                          for t in dag.tasks), dag.preds)  # fmt: skip
    return dag, cudafe, ciccs, nvcc_path, EarlyVerdicts(dag, cwd=str(tmp_path))


def test_the_early_verdict_asks_for_quick_looks_only_once_cudafe_has_started(tmp_path):
    """While cudafe++ waits for a core no id of nvcc's can be read: the loop need not look every
    50 ms (a guessed cicc ran 12-14 s before its cudafe++ started on a full 2-core machine)."""
    dag, cudafe, (first, _, _), _, verdicts = _verdict_case(tmp_path)
    runner = _Run(dag, {first.id: 3696})
    runner.records[first.id].start = 0.0
    assert verdicts and not verdicts.urgent(runner)
    runner.pids[cudafe.id] = 5516
    runner.records[cudafe.id].start = 2.0
    assert verdicts.urgent(runner)


def test_the_early_verdict_stops_a_guess_the_ids_prove_wrong_and_changes_those_not_started(tmp_path):
    dag, cudafe, (first, second, third), nvcc_path, verdicts = _verdict_case(tmp_path)
    # cudafe++ (pid 5516) runs, the first cicc (pid 3696) too; the others wait for slots.
    runner = _Run(dag, {cudafe.id: 5516, first.id: 3696})
    runner.records[first.id].start = 0.0
    verdicts.poll(runner)
    assert not runner.redone  # no id yet
    # cudafe++ ends with an id that carries its pid: every guess of the compile is wrong.
    nvcc_path.write_text("_9e7129fc_11_pidheavy_cu_5ee0b1f1_5516")
    runner.pids.pop(cudafe.id)
    runner.records[cudafe.id].state = State.DONE
    verdicts.poll(runner)
    assert {t: why for t, (_, why) in runner.redone.items()} == {first.id: PID, second.id: PID, third.id: PID}
    as_printed, _ = runner.redone[first.id]
    assert not as_printed.own_module_id and "--gen_module_id_file" not in as_printed.argv
    assert as_printed.argv == dag.tasks[first.checked_by].rerun
