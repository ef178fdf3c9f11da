"""Which cicc stub a split host compile's front starts from, and whether it held.

The host compile includes the stub of its compile's last cicc (:func:`fast_nvcc.graph.host_compile.early_stubs`).
Its front starts from the first of its seeds that is there, the sure ones first: the stub
probe's (the last cicc's front end alone, :func:`run_stub_probe`), the last cicc's own, what that
cicc wrote last time (:mod:`fast_nvcc.guess.learned_stub`), a sibling cicc's (:func:`early_stub`).
Its back puts the last cicc's real stub in place (:func:`real_stub`) and checks that the front
compiled what it would have given (:func:`stub_holds`); :mod:`fast_nvcc.guess.host_split` runs
the host compile as printed where it did not.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from typing import TYPE_CHECKING, Protocol

from ..files import read_bytes, write_atomically
from ..graph.host_compile import stub_path
from ..graph.tasks import Action, Task
from ..run.dispatch import MOMENT
from ..run.handlers import TaskRun
from ..run.task_records import StepFailed
from . import learned_stub, module_id

if TYPE_CHECKING:
    from collections.abc import Sequence


class Front(Protocol):
    """What the back knows of the front it checks: the stub it compiled and what cc1plus printed."""

    stub: bytes | None
    captures: Sequence[tuple[int, str]]


def early_stub(run: TaskRun) -> bytes | None:
    """Put the stub of a cicc that has ended, named as the last one's, where the host compile
    includes it; return what was written.  Where the last cicc has ended and only its module_id
    check, a moment, is left, its own stub is waited for (at most MOMENT) rather than a
    sibling's taken: where they differ by architecture (CCCL's launch bounds, 256 threads for
    sm_75 and 384 for sm_80 in ``benchmarks/tree``'s sorts) the host compile ran twice, 2.2 s
    of cc1plus thrown away in every other learned compile (docs/benchmarks.md, 2026-12-01)."""
    real, private, seeds = run.task.stub
    _await_own_check(run, next(done for done, seed in seeds if seed == private))
    for done, seed in seeds:  # the sure ones first: the stub probe's, then the last cicc's own
        if run.done(done):
            try:
                text = _on_nvccs_module_id(run, run.dag.tasks[done], read_bytes(os.path.join(run.cwd, seed)))
            except FileNotFoundError:
                continue
            break
    else:
        return None
    stub = text.replace(_name(seed), _name(real))
    write_atomically(os.path.join(run.cwd, real), stub)
    return stub


def _await_own_check(run: TaskRun, own: int) -> None:
    """Wait, at most MOMENT, for ``own``, the seed of the last cicc's own stub, where it is a
    module_id check whose cicc has ended."""
    checked = next((t.id for t in run.dag.tasks if t.checked_by == own), None)
    if checked is None or not run.done(checked):
        return
    deadline = time.monotonic() + MOMENT
    while not run.done(own) and time.monotonic() < deadline:
        time.sleep(0.002)


def _on_nvccs_module_id(run: TaskRun, seed: Task, stub: bytes) -> bytes:
    """A stub probe of a cicc that made its own module_id wrote that id into its stub; where
    nvcc's differs (a source whose id carries cudafe++'s process id: TE's scaled_activation.cu,
    whose host compile then ran twice), the stub on nvcc's id.  cudafe++ has written it by now:
    the front waits for its .cudafe1.cpp."""
    if seed.action is not Action.STUB_PROBE or seed.early is None or "--gen_module_id_file" not in seed.argv:
        return stub
    own = module_id.read_id(os.path.join(run.cwd, seed.argv[seed.argv.index("--module_id_file_name") + 1]))
    nvccs = module_id.read_id(os.path.join(run.cwd, seed.early[1]))
    if own is None or nvccs is None or own == nvccs:
        return stub
    return learned_stub.replace_module_id(stub, own.strip(), nvccs.strip())


def run_stub_probe(run: TaskRun) -> None:
    """cicc's front end alone on the last cicc's input (graph.early_stubs), for the stub it
    writes.  Optional work: it never fails the compile, and its messages are nobody's (the
    real cicc prints them); a probe that wrote no stub is marked dropped, so that the front
    does not take its end for a stub."""
    stub = os.path.join(run.cwd, stub_path(run.task.argv) or "")
    try:
        spawned = run.spawn(run.task.argv)
    except StepFailed:  # cicc cannot start: the real one will say so
        spawned = None
    if spawned is not None:
        run.account(spawned)
    if spawned is None or spawned.returncode != 0 or not os.path.exists(stub):
        run.record.dropped = True
    run.finish(0)


def real_stub(run: TaskRun) -> bytes | None:
    """Put the last cicc's stub where nvcc has it, named as nvcc's plan names it; return it
    (None, and no stub there, when that cicc wrote none)."""
    real, private, _ = run.task.stub
    real_path, private_path = os.path.join(run.cwd, real), os.path.join(run.cwd, private)
    try:
        stub = read_bytes(private_path).replace(_name(private), _name(real))
    except FileNotFoundError:
        with contextlib.suppress(FileNotFoundError):
            os.remove(real_path)
        return None
    write_atomically(real_path, stub)
    os.remove(private_path)
    return stub


def stub_holds(front: Front, stub: bytes | None) -> bool:
    """Did the front compile what the real stub would have given?  The same bytes; or, when
    cc1plus printed nothing, the same text up to what cicc's front end numbers or orders as
    it goes and gcc turns into no code: the register callback's parameter (``__T6849`` for
    sm_80, ``__T32978`` for sm_90a) and the order of a run of typedefs (the objects compiled
    from two such stubs were identical: docs/benchmarks.md)."""
    if stub is None or front.stub is None:
        return False
    if front.stub == stub:
        return True
    if any(os.path.getsize(path) for _, path in front.captures):
        return False  # a message might name what differs
    return canonical(front.stub) == canonical(stub)


_NUMBERED_PARAMETER = re.compile(rb"\b__T\d+\b")


def canonical(stub: bytes) -> bytes:
    """``stub`` with its numbered parameters renamed in order of appearance and each run of
    typedef lines sorted."""
    names: dict[bytes, bytes] = {}
    text = _NUMBERED_PARAMETER.sub(lambda m: names.setdefault(m.group(0), b"__T@%d" % len(names)), stub)
    lines: list[bytes] = []
    typedefs: list[bytes] = []
    for line in text.split(b"\n"):
        if line.startswith(b"typedef ") and line.endswith(b";"):
            typedefs.append(line)
            continue
        lines += sorted(typedefs)
        typedefs = []
        lines.append(line)
    return b"\n".join(lines + sorted(typedefs))


def _name(path: str) -> bytes:
    return path.encode("utf-8", "surrogateescape")
