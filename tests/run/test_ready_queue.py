"""The compile's own order of its ready tasks: the steps a long step feeds take as much longer
as it overran its estimate (made-up costs, then a real run of sh steps)."""

import os

import pytest

from fast_nvcc.graph.paths import priorities
from fast_nvcc.graph.tasks import Action, Dag, Task
from fast_nvcc.learn.history import DEFAULT_SECONDS
from fast_nvcc.machine.slots import Slots
from fast_nvcc.plan.dryrun import Kind, Step
from fast_nvcc.run.handlers import Internal
from fast_nvcc.run.ptx_weight import SECONDS_PER_MIB, ptxas_seconds
from fast_nvcc.run.ready_queue import ReadyQueue
from fast_nvcc.run.scheduler import Runner
from fast_nvcc.run.task_records import Record, State

# One compile as the plan has it: cudafe++ -> cc1plus -> as; cicc -> module_id check (a task
# of kind cicc) -> ptxas -> fatbinary -> as.
SHAPE = [
    ("cudafe++", Kind.CUDAFE, None, ()),
    ("cc1plus", Kind.HOST_COMPILE, None, (0,)),
    ("cicc", Kind.CICC, "compute_90", ()),
    ("check", Kind.CICC, "compute_90", (2,)),
    ("ptxas", Kind.PTXAS, "sm_90", (3,)),
    ("fatbinary", Kind.FATBINARY, None, (4,)),
    ("as", Kind.HOST_COMPILE, None, (1, 5)),
]
CUDAFE, CC1PLUS, CICC, CHECK, PTXAS, FATBINARY, AS = range(len(SHAPE))


def compile_dag(scripts=None, *, needs=None, args=None) -> Dag:
    tasks = []
    for i, (tool, kind, arch, _) in enumerate(SHAPE):
        script = (scripts or {}).get(i, "true")
        argv = ("sh", "-c", script, "sh", *(args or {}).get(i, ()))  # (args: $1... of the script)
        step = Step(index=i, text=script, kind=kind, tool=tool, argv=argv, arch=arch)
        tasks.append(Task(i, step, Action.EXEC, argv=step.argv))
    return Dag(tuple(tasks), tuple(frozenset((needs or {}).get(i, n)) for i, (*_, n) in enumerate(SHAPE)))


def default_costs() -> list[float]:
    costs = [DEFAULT_SECONDS[kind] for _, kind, _, _ in SHAPE]
    costs[CHECK] = 0.0
    return costs


def order(queue: ReadyQueue, dag: Dag, ids) -> list[int]:
    for task_id in ids:
        queue.push(dag.tasks[task_id])
    return queue.ids()


def test_by_the_defaults_the_host_compile_goes_before_the_ptxas():
    dag, costs = compile_dag(), default_costs()
    queue = ReadyQueue(priorities(dag, costs), work=costs)
    assert order(queue, dag, [PTXAS, CC1PLUS]) == [CC1PLUS, PTXAS]


def test_a_cicc_sixteen_times_its_estimate_puts_its_ptxas_first():
    dag, costs = compile_dag(), default_costs()
    queue = ReadyQueue(priorities(dag, costs), work=costs)
    pool_ranks = [queue.priority(t) for t in range(len(SHAPE))]
    assert queue.overran(dag, CICC, 16 * costs[CICC])
    assert order(queue, dag, [CC1PLUS, PTXAS]) == [PTXAS, CC1PLUS]
    # what the pool is asked with does not change: that is the compile's scale's business
    assert [queue.priority(t) for t in range(len(SHAPE))] == pool_ranks


def test_cudafe_overrunning_ranks_its_host_compile_again():
    dag, costs = compile_dag(), default_costs()
    queue = ReadyQueue(priorities(dag, costs), work=costs)
    assert queue.overran(dag, CICC, 16 * costs[CICC])
    assert queue.overran(dag, CUDAFE, 30 * costs[CUDAFE])  # 135 s against 4.5: the host side wins
    assert order(queue, dag, [PTXAS, CC1PLUS]) == [CC1PLUS, PTXAS]


@pytest.mark.parametrize(
    ("task_id", "factor", "costs"),
    [
        (CICC, 1.0, None),  # on its estimate
        (PTXAS, 10.0, None),  # a ptxas feeds no follower
        (CICC, 16.0, [0.0, 5.5, 1.0, 0.0, 1.4, 0.1, 0.5]),  # estimated under OVERRUN_FLOOR: noise
    ],
)
def test_no_change_without_a_long_step_past_its_estimate(task_id, factor, costs):
    dag = compile_dag()
    costs = costs or default_costs()
    queue = ReadyQueue(priorities(dag, costs), work=costs)
    assert not queue.overran(dag, task_id, factor * costs[task_id])
    assert order(queue, dag, [PTXAS, CC1PLUS]) == [CC1PLUS, PTXAS]


def test_cudafe_ending_early_puts_the_ptxas_of_an_overrunning_cicc_first():
    """moldable_build's long.cu on 2 cores: cicc 24.6 s against its 8 s estimate (ptxas: 4.3 s),
    cudafe++ 0.9 s against 4.5 s; by the 5.5 s default its 0.7 s host compile took the slot
    while its 22 s ptxas, the build's last step, waited."""
    dag, costs = compile_dag(), default_costs()
    before, after = (ReadyQueue(priorities(dag, costs), work=costs) for _ in range(2))
    for queue in (before, after):
        assert queue.overran(dag, CICC, 24.6)
    assert order(before, dag, [PTXAS, CC1PLUS]) == [CC1PLUS, PTXAS]  # 5.5 s against 4.3 s
    assert after.overran(dag, CUDAFE, 0.9)
    assert order(after, dag, [PTXAS, CC1PLUS]) == [PTXAS, CC1PLUS]  # 1.1 s against 4.3 s


def test_an_early_end_does_not_undo_an_overrun():
    dag, costs = compile_dag(), default_costs()
    queue = ReadyQueue(priorities(dag, costs), work=costs)
    assert queue.overran(dag, CICC, 16 * costs[CICC])
    assert not queue.overran(dag, CICC, 0.5 * costs[CICC])  # (a second cicc of the compile, say)
    assert order(queue, dag, [CC1PLUS, PTXAS]) == [PTXAS, CC1PLUS]


def test_a_second_smaller_overrun_keeps_the_larger():
    dag, costs = compile_dag(), default_costs()
    queue = ReadyQueue(priorities(dag, costs), work=costs)
    assert queue.overran(dag, CICC, 16 * costs[CICC])
    assert not queue.overran(dag, CICC, 2 * costs[CICC])
    assert order(queue, dag, [CC1PLUS, PTXAS]) == [PTXAS, CC1PLUS]


def _rescaled(costs, *runs, now):
    """The compile's scale once ``runs`` ((task, start, end or None: still running), or with a
    split step's (cpu, most cores) after them) are seen."""
    dag = compile_dag()
    queue = ReadyQueue(priorities(dag, costs), work=costs)
    records = []
    for task, start, end, *split in runs:
        # A running task's record has a start and no end (its state is set when it ends).
        record = Record(task, start=start, end=end, slot=0, **({"state": State.DONE} if end is not None else {}))
        if split:
            record.cpu_seconds, record.core_timeline = split[0], [(start, 1), (start + 1.0, split[1])]
        records.append(record)
    queue.rescale(records, now=now, slots=Slots())
    return queue.scale


def test_a_ptxas_running_for_minutes_raises_its_compiles_rank():
    """By the defaults a ptxas takes 1.4 s, under OVERRUN_FLOOR: until it has run that long its
    time is noise; after that it counts against OVERRUN_FLOOR, so a compile whose ptxas has run
    134 s ranks above one whose cicc overran 27 times and whose ptxas has run 27 s."""
    costs = default_costs()
    assert _rescaled(costs, (CICC, 0.0, 112.0), (PTXAS, 112.0, None), now=113.5) == pytest.approx(14.0)
    swiglu = _rescaled(costs, (CICC, 0.0, 112.0), (PTXAS, 112.0, None), now=246.0)
    gelu = _rescaled(costs, (CICC, 0.0, 216.0), (PTXAS, 219.0, None), now=246.0)
    assert swiglu == pytest.approx(134.0 / ReadyQueue.OVERRUN_FLOOR) and gelu == pytest.approx(27.0)
    assert swiglu > gelu
    # a ptxas of 3 s against its 1.4 s estimate counts as 3 / OVERRUN_FLOOR, not 3 / 1.4
    assert _rescaled(costs, (PTXAS, 0.0, 3.0), now=3.0) == pytest.approx(1.5)


def test_a_finished_split_step_overran_by_its_cpu_not_its_wall():
    """A split cicc's estimate is one core's seconds (its cpu, as the history learns it): TE's
    gelu_grouped.cu's cicc ran 169 s on up to 7 cores with 362 s of cpu, another compile's cicc
    120 s on 3 with 196 s.  By their walls gelu's ptxas, ready at 174 s, ranked below the
    other's, which had run 50 s; by their cpu it ranks above it until that one has run 91 s.
    A running split step still counts its wall: its cpu grows with the cores it is granted."""
    costs = default_costs()
    gelu = _rescaled(costs, (CICC, 5.0, 174.0, 362.0, 7), now=174.0)
    other = _rescaled(costs, (CICC, 4.0, 124.0, 196.0, 3), (PTXAS, 124.0, None), now=174.0)
    assert gelu == pytest.approx(362.0 / DEFAULT_SECONDS[Kind.CICC])
    assert other == pytest.approx(50.0 / ReadyQueue.OVERRUN_FLOOR)  # its ptxas's 50 s so far
    assert gelu > other
    assert _rescaled(costs, (CICC, 4.0, 124.0, 196.0, 3), (PTXAS, 124.0, None), now=215.5) > gelu
    # running, a split step counts its wall (here 100 s), whatever its cores
    assert _rescaled(costs, (CICC, 0.0, None, 0.0, 7), now=100.0) == pytest.approx(100.0 / DEFAULT_SECONDS[Kind.CICC])
    # an unsplit step's cpu is not its measure: a host compile sharing its core took its wall
    unsplit = _rescaled(costs, (CC1PLUS, 0.0, 55.0), now=55.0)
    assert unsplit == pytest.approx(55.0 / DEFAULT_SECONDS[Kind.HOST_COMPILE])


@pytest.mark.parametrize(("cicc_seconds", "first"), [("0.6", PTXAS), ("0", CC1PLUS)])
def test_a_run_with_one_slot_starts_what_the_overrun_puts_first(tmp_path, monkeypatch, cicc_seconds, first):
    """Real processes, one slot: once a cicc estimated at 0.05 s has taken 0.6, its ptxas starts
    before the host compile that became ready with it (here it waits for the module_id check
    too); a cicc on time leaves the defaults' order."""
    monkeypatch.setattr(ReadyQueue, "OVERRUN_FLOOR", 0.01)
    dag = compile_dag({CICC: f"sleep {cicc_seconds}"}, needs={CC1PLUS: (CUDAFE, CHECK)})
    assert first_of_ptxas_and_host_compile(dag, tmp_path, os.environ) == first


def first_of_ptxas_and_host_compile(dag: Dag, tmp_path, env) -> int:
    """Run ``dag`` on one slot, its cicc estimated at 0.05 s: which of the ptxas and the host
    compile started first."""
    costs = [0.05 * c / DEFAULT_SECONDS[Kind.CICC] for c in default_costs()]  # cicc 0.05 s
    runner = Runner(dag, env=env, cwd=str(tmp_path), workdir=str(tmp_path), jobs=1,
                    priorities=priorities(dag, costs), work=costs, internal=Internal())  # fmt: skip
    assert runner.run().returncode == 0
    starts = {t: runner.records[t].start for t in (PTXAS, CC1PLUS)}
    return min(starts, key=starts.get)


def test_a_ptxas_after_an_overrun_is_weighed_by_its_ptx_not_by_its_cicc():
    """Two compiles of a first build, both ciccs past their estimates: A's cicc took 160 s and
    wrote 20 MiB of PTX, B's took 80 s and wrote 100 MiB (TE's seven: a ptxas took 0.67 to 1.86
    times its cicc).  By the overrun A's ptxas ranked above B's; weighed by their PTX, B's does,
    at the PTX's seconds, in the compile's order, on the pool and in the work left."""
    dag, costs = compile_dag(), default_costs()

    def ptxas_rank(cicc_took: float, ptx_mib: float | None) -> tuple[float, ReadyQueue]:
        queue = ReadyQueue(priorities(dag, costs), work=costs)
        queue.finished(CICC, took=cicc_took)
        weigh = None if ptx_mib is None else (lambda task: ptx_mib * SECONDS_PER_MIB if task.id == PTXAS else None)
        assert queue.overran(dag, CICC, cicc_took, weigh=weigh)
        return queue.priority(PTXAS), queue

    assert ptxas_rank(160.0, None)[0] == ptxas_rank(80.0, None)[0]  # the pool: the compile's scale's business
    heavy_cicc, _ = ptxas_rank(160.0, 20.0)
    heavy_ptx, queue_b = ptxas_rank(80.0, 100.0)
    assert heavy_ptx > heavy_cicc
    followers = queue_b.priorities[FATBINARY]
    assert heavy_ptx == pytest.approx(100.0 * SECONDS_PER_MIB + followers)
    assert queue_b.expected(PTXAS) == pytest.approx(100.0 * SECONDS_PER_MIB)
    left = sum(costs) - costs[CICC] - costs[PTXAS] + 100.0 * SECONDS_PER_MIB
    assert queue_b.work_left == pytest.approx(left)
    assert order(queue_b, dag, [CC1PLUS, PTXAS]) == [PTXAS, CC1PLUS]
    # a PTX lighter than the host compile's default leaves the host compile first
    light = ReadyQueue(priorities(dag, costs), work=costs)
    assert light.overran(dag, CICC, 80.0, weigh=lambda task: 0.1 if task.id == PTXAS else None)
    assert order(light, dag, [CC1PLUS, PTXAS]) == [CC1PLUS, PTXAS]


def test_a_ptxas_weight_is_its_ptx_size_on_disk(tmp_path):
    """ptx_weight.ptxas_seconds: the .ptx among a ptxas' arguments, by its size; None where
    it is not there, or for another tool."""
    (tmp_path / "a.ptx").write_bytes(b"x" * (2 << 20))
    ptxas = compile_dag(args={PTXAS: ("-arch=sm_90", "a.ptx", "-o", "a.cubin")}).tasks[PTXAS]
    assert ptxas_seconds(ptxas, cwd=str(tmp_path)) == pytest.approx(2 * SECONDS_PER_MIB)
    assert ptxas_seconds(ptxas, cwd=str(tmp_path / "elsewhere")) is None
    assert ptxas_seconds(compile_dag(args={CICC: ("a.ptx",)}).tasks[CICC], cwd=str(tmp_path)) is None


@pytest.mark.parametrize(("ptx_bytes", "weigh", "first"),
                         [(1000, "1", CC1PLUS), (1 << 20, "1", PTXAS), (1000, "0", PTXAS)])  # fmt: skip
def test_a_run_weighs_the_ptxas_by_the_ptx_its_cicc_wrote(tmp_path, monkeypatch, ptx_bytes, weigh, first):
    """Real processes, one slot: a cicc estimated at 0.05 s takes 0.6 and writes its PTX.  A
    kilobyte of it (a few milliseconds of ptxas) leaves the host compile first; a MiB (3.5 s)
    puts the ptxas first; with FAST_NVCC_PTX_WEIGHT=0 the overrun puts it first, as before."""
    monkeypatch.setattr(ReadyQueue, "OVERRUN_FLOOR", 0.01)
    dag = compile_dag({CICC: f"head -c {ptx_bytes} /dev/zero > k.ptx && sleep 0.6"}, needs={CC1PLUS: (CUDAFE, CHECK)},
                      args={PTXAS: ("k.ptx",)})  # fmt: skip
    assert first_of_ptxas_and_host_compile(dag, tmp_path, {**os.environ, "FAST_NVCC_PTX_WEIGHT": weigh}) == first


@pytest.mark.parametrize("heaviest", ["compute_75", "compute_80", "compute_90"])
def test_a_compiles_own_ciccs_start_longest_learned_first(heaviest):
    """Three ciccs of one compile, ready together: the one whose learned cost is the longest
    goes first, whatever nvcc's order (the plan prints compute_75 first)."""
    from plans import load_plan

    from fast_nvcc.graph.choose import choose_dag
    from fast_nvcc.learn.history import Cost
    from fast_nvcc.learn.learned import Learned, source_of_steps

    plan = load_plan("compile_3arch")
    owners = source_of_steps(plan, ["kernel.cu"])
    source = next(iter(set(owners.values())))
    costs = {(source, "cicc", arch): Cost(100.0 if arch == heaviest else 10.0, 0)
             for arch in ("compute_75", "compute_80", "compute_90")}  # fmt: skip
    learned = Learned(plan, None, costs, Learned.nothing(plan).memory, owners)
    dag = choose_dag(plan, learned, workdir="/w", sequential=False, faithful=False, watched=False, env={},
                     say=lambda message: None)  # fmt: skip
    work = [c.seconds for c in learned.task_costs(dag)]
    queue = ReadyQueue(priorities(dag, work), work=work)
    ciccs = [t for t in dag.tasks if t.step.kind is Kind.CICC and t.action is Action.EXEC]
    assert [t.step.arch for t in ciccs] == ["compute_75", "compute_80", "compute_90"]
    first = dag.tasks[order(queue, dag, [t.id for t in ciccs])[0]]
    assert first.step.arch == heaviest


def test_a_compiles_own_finished_steps_show_its_work_left_credible():
    """fast_nvcc.run.niceness slows only a compile whose work left its own steps have not shown
    to be an underestimate: cudafe++ done in 0.5 s or in 5 s against 4.5 shows it credible;
    nothing finished, or cudafe++ in 6 s, does not; nor once its cicc has run 13 s against 8
    (HEAVIER), finished or not."""
    costs = default_costs()

    def queue_after(*runs):
        queue = ReadyQueue(priorities(compile_dag(), costs), work=costs)
        records = [Record(task, start=start, end=end, slot=0, **({"state": State.DONE} if end is not None else {}))
                   for task, start, end in runs]  # fmt: skip
        for record in records:
            if record.end is not None:
                queue.finished(record.task_id, took=record.end - record.start)
        queue.rescale(records, now=20.0, slots=Slots())
        return queue

    assert queue_after((CUDAFE, 0.0, 0.5)).credible
    assert queue_after((CUDAFE, 0.0, 5.0)).credible
    assert not queue_after().credible
    assert not queue_after((CUDAFE, 0.0, 6.0)).credible
    assert not queue_after((CUDAFE, 0.0, 0.5), (CICC, 0.0, 13.0)).credible
    assert not queue_after((CUDAFE, 0.0, 0.5), (CICC, 7.0, None)).credible  # running 13 s
    shown = ReadyQueue(priorities(compile_dag(), costs), work=costs)
    shown.finished(CUDAFE, took=0.5)  # known at the step's end, before any rescale
    assert shown.credible
    shown.finished(CC1PLUS)  # a cache hit shows nothing
    assert shown.credible


def test_a_started_steps_rank_falls_with_its_work_done_once_its_compiles_estimates_are_credible():
    """A running split step asks for cores, and a step stopped for it waits, at its remaining
    path (yielding.py): its own 8 s and its followers'; after 5 s of its 8 it ranks 5 s lower,
    never below its followers plus a tenth of its own; before cudafe++ has shown the
    estimates credible, and for a step not started, the rank is the whole path."""
    costs = default_costs()
    queue = ReadyQueue(priorities(compile_dag(), costs), work=costs)
    whole = queue.priority(CICC)
    assert queue.remaining(CICC, 5.0) == whole  # nothing finished: the defaults are not shown credible
    assert queue.left(CICC, 5.0) == costs[CICC]
    queue.finished(CUDAFE, took=costs[CUDAFE])
    assert queue.credible
    assert queue.remaining(CICC, 0.0) == whole
    assert queue.remaining(CICC, 5.0) == pytest.approx(whole - 5.0)
    assert queue.left(CICC, 5.0) == pytest.approx(costs[CICC] - 5.0)
    floor = whole - (1 - ReadyQueue.LEFT) * costs[CICC]
    assert queue.remaining(CICC, 100.0) == pytest.approx(floor) and floor > queue.priority(PTXAS)
    assert queue.left(CICC, 100.0) == 0.0


def test_the_work_a_step_has_done_leaves_out_its_stops_also_one_still_on():
    """What a started step has done, which its rank falls by: its time running, less the
    stops that ended (record.stopped) and the one still on, whether the memory guard stopped
    it or it gave its core to a split step."""
    from types import SimpleNamespace

    from fast_nvcc.run.holdings import Holdings

    step = Step(index=0, text="cicc", kind=Kind.CICC, tool="cicc", argv=("cicc",))
    clock = [0.0]
    record = Record(0, start=0.0)
    holdings = Holdings([Task(0, step, Action.EXEC, argv=step.argv)], [record], jobs=1, slots=Slots(), memory=None,
                        processes=SimpleNamespace(pin=None), env={}, handler_of=None, priority_of=None,
                        now=lambda: clock[0])  # fmt: skip
    clock[0] = 10.0
    assert holdings.done(0) == 10.0
    holdings.memory_changed("stop", 0)
    clock[0] = 14.0
    assert holdings.done(0) == 10.0  # stopped for memory since 10 s
    holdings.memory_changed("continue", 0)
    assert record.memory_stopped == 4.0
    clock[0] = 20.0
    assert holdings.done(0) == 16.0
    holdings.paused[0] = 20.0  # gave its core to a split step at 20 s
    holdings.memory_changed("stop", 0)
    clock[0] = 25.0
    assert holdings.done(0) == 16.0  # both stops on: counted once, from the first
