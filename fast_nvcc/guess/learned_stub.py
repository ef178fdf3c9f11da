"""The host compile from the stub its last compile wrote, before any cicc of its own has ended.

The host compile includes the stub its compile's last cicc writes, and cicc writes it only as it
exits.  Where a compile has one cicc (one architecture), no other stub can stand in for it
(:func:`fast_nvcc.graph.host_compile.early_stubs`), so the host compile's cc1plus, often a minute
of one thread, started only after that cicc: with ``--split-compile``, TransformerEngine's
``scaled_activation.cu`` ran cicc for 96 s and then cc1plus for 89 s, one after the other, and
ended every build it was in (docs/benchmarks.md).

cicc's stub is a function of what it reads and of its options.  So each compile keeps the stub
its last cicc wrote, under a key of its source, working directory and commands, beside a digest
of what that cicc and the host compile read (the ``.cpp1.ii`` and the ``.cudafe1.cpp``).  Next
time a *learned stub* task, which waits only for cudafe++ and the device preprocessing, finds the
same digest and writes the stub it kept, so the front of the host compile (cc1plus) starts at
once, beside cicc.  What changes from run to run is masked in all of it: the temp directory, the
``tmpxft_`` prefix, and the module_id (it carries cudafe++'s pid for some sources).

Nothing is taken on trust: the back still compares the stub the front compiled with the one cicc
writes (:func:`fast_nvcc.guess.stubs.stub_holds`) and runs the host compile as printed when
they differ.  The stub learned is refreshed by every compile, whether or not the front used it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
from collections.abc import Mapping
from typing import NamedTuple

from ..files import read_bytes, write_atomically
from ..graph.tasks import Action
from ..plan.dryrun import TEMP_TAG
from ..run.handlers import Handler, TaskRun

_PREFIX = re.compile(TEMP_TAG.pattern.encode())
_DIRECTORY, _TMP, _ID = b"\0@TEMP-DIR@\0", b"\0@TMPXFT@\0", b"\0@MODULE-ID@\0"
# Mangled names spell the module_id's length where they carry it: the anonymous namespace,
# <length>_GLOBAL__N_<id> (``43_GLOBAL__N__816de668_5_ps_cu_8af59834_19852``), and a variable of
# internal linkage that cicc registers, <length>_INTERNAL<id> (``_ZN47_INTERNAL_..._cu_..._4242
# 4cuda3std3__45__cpo5beginE`` in pidheavy.cu's stub).  A pid with one digit more or fewer (the
# kernel's pids wrap at pid_max, 32768 here) changes both.
_LENGTH_SPELT = ((b"_GLOBAL__N_", b"\0@MANGLED-NAMESPACE@\0"), (b"_INTERNAL", b"\0@MANGLED-INTERNAL@\0"))
FOLDER = "learned-stubs"


def mangled_names(module_id: bytes) -> list[tuple[bytes, bytes]]:
    """How mangled names spell a source's module_id with its length, each with its mask."""
    return [(b"%d%s%s" % (len(tag) + len(module_id), tag, module_id), mask) for tag, mask in _LENGTH_SPELT]


def replace_module_id(stub: bytes, old: bytes, new: bytes) -> bytes:
    """``stub`` as cicc writes it on module_id ``new``, from the one it wrote on ``old``."""
    for (was, _), (now, _) in zip(mangled_names(old), mangled_names(new)):
        stub = stub.replace(was, now)
    return stub.replace(old, new)


class Masks(NamedTuple):
    """What differs from one run of a compile to the next, as this run spells it."""

    directory: bytes  # the temp directory the plan's files are in, with its separator
    prefix: bytes  # their tmpxft_XXXXXXXX_XXXXXXXX
    module_id: bytes  # the module_id (empty where none could be read)

    def hide(self, data: bytes) -> bytes:
        if self.module_id:
            for name, mask in mangled_names(self.module_id):
                data = data.replace(name, mask)
            data = data.replace(self.module_id, _ID)
        return data.replace(self.directory, _DIRECTORY).replace(self.prefix, _TMP)

    def show(self, data: bytes) -> bytes:
        data = data.replace(_DIRECTORY, self.directory).replace(_TMP, self.prefix)
        for name, mask in mangled_names(self.module_id):
            data = data.replace(mask, name)
        return data.replace(_ID, self.module_id)


class Learned(NamedTuple):
    """What a learned stub task leaves the back task, which keeps the real stub for next time."""

    record: str  # the file that keeps it
    digest: str  # of what cicc and the host compile read, masked
    masks: Masks


def record_path(state_dir: str, key: str, cwd: str) -> str:
    digest = hashlib.sha256(f"{key}\0{cwd}".encode("utf-8", "surrogateescape")).hexdigest()[:32]
    return os.path.join(state_dir, FOLDER, f"{digest}.json")


def run_learned_stub(run: TaskRun) -> None:
    """Write the stub learned for these inputs, if one is; leave the back what it needs to keep
    this compile's.  It never fails the compile: without a stub it ends *dropped*, and the front
    waits for a cicc's."""
    key, cudafe_cpp, cicc_input, module_id, output = run.task.argv
    found = _learned(run, key, cudafe_cpp, cicc_input, module_id)
    if found is None:
        run.record.dropped = True
        run.finish(0)
        return
    run.shared[run.task.id] = found
    stub = _read_record(found)
    if stub is None:
        run.record.dropped = True
    else:
        write_atomically(os.path.join(run.cwd, output), stub)
    run.finish(0)


def keep(learned: Learned, stub: bytes) -> None:
    """Keep the stub cicc wrote (named as nvcc names it) for the next compile of these inputs."""
    text = learned.masks.hide(stub).decode("latin-1")
    with contextlib.suppress(OSError):
        os.makedirs(os.path.dirname(learned.record), exist_ok=True)
        write_atomically(learned.record, json.dumps({"input": learned.digest, "stub": text}).encode())


def _learned(run: TaskRun, key: str, cudafe_cpp: str, cicc_input: str, module_id: str) -> Learned | None:
    if not run.state_dir:
        return None
    paths = [os.path.join(run.cwd, p) for p in (cudafe_cpp, cicc_input, module_id)]
    prefix = _PREFIX.search(os.path.basename(paths[0]).encode("utf-8", "surrogateescape"))
    if prefix is None:
        return None
    try:
        identity = read_bytes(paths[2]).strip()
        inputs = [read_bytes(p) for p in paths[:2]]
    except OSError:
        return None
    # With its separator: "/tmp" alone would also match the start of "/tmpxft_...".
    directory = os.path.dirname(cudafe_cpp)
    masks = Masks((directory + os.sep).encode("utf-8", "surrogateescape") if directory else b"\0@NO-DIRECTORY@\0",
                  prefix.group(0), identity)  # fmt: skip
    digest = hashlib.sha256()
    for data in inputs:
        digest.update(masks.hide(data))
        digest.update(b"\0")
    return Learned(record_path(run.state_dir, key, run.cwd), digest.hexdigest(), masks)


def _read_record(learned: Learned) -> bytes | None:
    try:
        with open(learned.record, encoding="utf-8") as handle:
            record = json.load(handle)
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("input") != learned.digest or not isinstance(record.get("stub"), str):
        return None
    return learned.masks.show(record["stub"].encode("latin-1"))


HANDLERS: Mapping[Action, Handler] = {Action.LEARNED_STUB: Handler(run_learned_stub, takes_slot=False)}
