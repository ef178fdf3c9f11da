"""What the build's running steps hold now: their process trees' RSS, from one walk of those
trees at most every ``SCAN_EVERY``.  The budget reads it only when memory is tight: to
count each compile's claims less what its steps hold already, and, from :mod:`.pressure`'s
thread, to raise the claims of steps that grow past them (:meth:`.memory.MemoryBudget.observe`)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

from .process_tree import children, children_files


class LiveUsage:
    SCAN_EVERY = 0.5  # seconds between reads of the running steps' RSS (only when tight)

    def __init__(self) -> None:
        self._table: ProcessTable | None = None  # shared by the admission and the guard's thread

    def holding(self, pids: Mapping[int, int]) -> dict[int, int]:
        """Task -> what its running step holds (its process tree's RSS), for ``pids``: task ->
        its step's pid."""
        table = self._process_table(pids.values())
        return {task_id: size for task_id, pid in pids.items() if (size := table.tree(pid, itself=True))}

    def claimed(self, live: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
        """Per compile, from the live claims (pid, bytes): (its claims' sum, what its steps hold now)."""
        per_pid: dict[int, int] = {}
        for pid, size in live:
            per_pid[pid] = per_pid.get(pid, 0) + size
        table = self._process_table(per_pid)
        return [(size, table.tree(pid, itself=False)) for pid, size in per_pid.items()]

    def _process_table(self, wanted: Iterable[int]) -> ProcessTable:
        """The process table, read again after ``SCAN_EVERY`` or when a ``wanted`` process
        started after the last read."""
        table = self._table
        if table is None or time.monotonic() - table.taken >= self.SCAN_EVERY or any(
            pid not in table.rss for pid in wanted
        ):
            table = self._table = ProcessTable.read(wanted)
        return table


class ProcessTable(NamedTuple):
    """One pass over the process trees asked for: each process's children and RSS, in bytes."""

    taken: float  # time.monotonic() of the pass
    children: dict[int, list[int]]
    rss: dict[int, int]

    @classmethod
    def read(cls, roots: Iterable[int]) -> ProcessTable:
        """The trees under ``roots`` (compiles, steps), walked through each process's own /proc
        children files (:mod:`.process_tree`), not the machine's every process: a root that is
        gone holds 0."""
        if not children_files():
            return cls._read_all()
        taken = time.monotonic()
        tree: dict[int, list[int]] = {}
        rss: dict[int, int] = {}
        todo = list(roots)
        while todo:
            pid = todo.pop()
            if pid in rss:
                continue
            rss[pid] = _rss(pid)
            tree[pid] = children(pid) or []
            todo += tree[pid]
        return cls(taken, tree, rss)

    @classmethod
    def _read_all(cls) -> ProcessTable:
        """Every process of the machine, through psutil (a kernel without children files)."""
        import psutil

        taken = time.monotonic()
        children: dict[int, list[int]] = {}
        rss: dict[int, int] = {}
        for proc in psutil.process_iter(["ppid", "memory_info"]):
            info = proc.info
            if info.get("ppid") is None:
                continue
            children.setdefault(info["ppid"], []).append(proc.pid)
            memory = info.get("memory_info")
            rss[proc.pid] = memory.rss if memory is not None else 0
        return cls(taken, children, rss)

    def tree(self, pid: int, *, itself: bool) -> int:
        """The RSS of ``pid``'s descendants (a compile's: its steps and theirs), and its own
        where ``itself`` (a step's)."""
        total, stack = self.rss.get(pid, 0) if itself else 0, list(self.children.get(pid, ()))
        while stack:
            child = stack.pop()
            total += self.rss.get(child, 0)
            stack.extend(self.children.get(child, ()))
        return total


def _rss(pid: int) -> int:
    """``pid``'s resident set in bytes (/proc/PID/statm, as psutil reads it); 0 where it is gone."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as handle:
            return int(handle.read().split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        return 0


_PAGE = os.sysconf("SC_PAGE_SIZE")
