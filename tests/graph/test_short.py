"""Which steps run without a shared slot (fast_nvcc.graph.short): a compile's last, tiny steps."""

from fast_nvcc.graph.short import short_steps
from fast_nvcc.graph.tasks import Action, Dag, Task
from fast_nvcc.plan.dryrun import Kind, Step


def _task(index: int, kind: Kind, action: Action = Action.EXEC, *, optional: bool = False) -> Task:
    return Task(index, Step(index, kind.value, kind, kind.value, ("true",)), action, argv=("true",), optional=optional)


def test_a_compiles_last_tiny_steps_are_short_and_its_ptxas_and_host_compile_take_a_slot():
    """fatbinary, nvlink and a split host compile's assembler, expected under half a second, run
    without a shared slot; a ptxas and a host compile (whole, or a split one's front) expected as
    short still take one (a light compile's, beside a long cicc on 2 cores, took its core);
    nothing expected longer, and no optional step, is short."""
    tasks = (
        _task(0, Kind.FATBINARY),
        _task(1, Kind.NVLINK),
        _task(2, Kind.HOST_COMPILE, Action.HOST_BACK),
        _task(3, Kind.PTXAS),
        _task(4, Kind.HOST_COMPILE),
        _task(5, Kind.HOST_COMPILE, Action.HOST_FRONT),
        _task(6, Kind.FATBINARY),
        _task(7, Kind.FATBINARY, optional=True),
    )
    dag = Dag(tasks, tuple(frozenset() for _ in tasks))
    work = [0.1, 0.3, 0.05, 0.2, 0.14, 0.3, 0.6, 0.1]
    assert short_steps(dag, work) == {0, 1, 2}
    assert short_steps(dag, None) == frozenset()
