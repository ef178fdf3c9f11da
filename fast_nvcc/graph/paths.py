"""Paths through a graph: an order that respects every edge, each task's rank (the longest path
from its start to the end), the critical path.  One pass each, without networkx: they run on
every compile, and the tests check them against it."""

from __future__ import annotations

from collections.abc import Sequence

from .tasks import Dag


def topological_order(dag: Dag) -> list[int]:
    """The tasks in an order that respects every edge; ValueError on a cycle.

    Kahn's algorithm rather than networkx on purpose: this runs on every compile, and importing
    networkx costs about 0.1 s, a tenth of a small compile (measured on the 2-core machine).
    """
    waiting = [len(p) for p in dag.preds]
    succs = dag.succs
    ready = [t.id for t in dag.tasks if not waiting[t.id]]
    order = []
    while ready:
        node = ready.pop()
        order.append(node)
        for succ in succs[node]:
            waiting[succ] -= 1
            if not waiting[succ]:
                ready.append(succ)
    if len(order) != len(dag.tasks):
        raise ValueError("the plan's dependency graph has a cycle")
    return order


def priorities(dag: Dag, costs: Sequence[float]) -> list[float]:
    """For each task, the length of the longest path from its start to the end of the build.

    A member of an ``any_of`` group does not count the group's task: that task needs one
    member, not each.  Counted, the early stub's front put its cost on every cicc of its
    compile, so each cicc ranked above the compile's host chain (preprocessing, cudafe++,
    cc1plus), which on a first build on 2 cores then ran last, one core idle (CUTLASS's
    48_hopper example: cudafe++ 15 s and cc1plus 13 s after its sm_80 cicc)."""
    succs = dag.succs
    tasks = dag.tasks
    result = [0.0] * len(tasks)
    for node in reversed(topological_order(dag)):
        after = (result[s] for s in succs[node] if node not in tasks[s].any_of)
        result[node] = costs[node] + max(after, default=0.0)
    return result


def critical_path(dag: Dag, durations: Sequence[float]) -> list[int]:
    """The chain of tasks whose durations add up to the longest path through the DAG.

    The same one pass as :func:`priorities`, then the heaviest chain followed from its start;
    the tests check it against networkx's dag_longest_path, which would cost this hot path
    (FAST_NVCC_LOG is written for every compile of a build) the import of networkx.
    """
    if not dag.tasks:
        return []
    if any(task.any_of for task in dag.tasks):
        return _earliest_finish_path(dag, durations)
    remaining = priorities(dag, durations)
    succs = dag.succs
    node = max(range(len(dag.tasks)), key=lambda n: (remaining[n], -n))
    path = [node]
    while succs[node]:
        node = max(succs[node], key=lambda n: (remaining[n], -n))
        path.append(node)
    return path


def _earliest_finish_path(dag: Dag, durations: Sequence[float]) -> list[int]:
    """The critical path where a task may wait for only one of a group of predecessors (the
    one that ends first): each task starts when its last needed predecessor ends."""
    finish = [0.0] * len(dag.tasks)
    via: list[int | None] = [None] * len(dag.tasks)
    for node in topological_order(dag):
        task = dag.tasks[node]
        needed = [p for p in dag.preds[node] if p not in task.any_of]
        if task.any_of:
            needed.append(min(task.any_of, key=lambda p: (finish[p], p)))
        start, via[node] = max(((finish[p], p) for p in needed), default=(0.0, None))
        finish[node] = start + durations[node]
    node = max(range(len(dag.tasks)), key=lambda n: (finish[n], -n))
    path = [node]
    while via[node] is not None:
        node = via[node]
        path.append(node)
    return path[::-1]
