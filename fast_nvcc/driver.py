"""One nvcc invocation, run as a DAG: plan, graph, run, report, clean up, exit code.

The driver owns the invocation's lifetime: its private work directory, the temp files the plan
names, signals, the reports, and the decision to hand a command line to nvcc unchanged.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from .plan import depfile, exit_codes, nvcc_args, split_option
from .report import device_trace
from .guess import decisions as guesses
from .machine.buildtool import Saturation
from .files import write_atomically
from .graph.dag import Action, Dag, Task, build_dag, priorities, sequential_dag
from .learn.history import ASSEMBLE, Cost, History, Measurement, cache_directory, estimate, history_path
from .guess.host_split import STUB_DIFFERS
from .run.leftovers import make_workdir, remove_dead
from .machine.memory import budget_from_environment
from .guess.module_id import PID, id_template, read_id
from .plan.dryrun import Kind, Plan, PlanError, Step, parse_plan, retarget, run_dryrun, temp_name
from .run.scheduler import Internal, Interrupted, Record, Runner, RunResult, State, StepFailed
from .machine.slots import pool_directory, slots_from_environment
from .plan.toolchain import find_nvcc

_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_FREE = Cost(0.0, 0)


@dataclass(frozen=True, slots=True)
class Config:
    """fast_nvcc's own options, parsed."""

    nvcc: str | None = None
    jobs: int | None = None
    faithful: bool = False
    sequential: bool = False
    verbose: int = 0
    graph: str | None = None
    table: str | None = None
    trace: str | None = None
    plan_listing: str | None = None
    save_dir: str | None = None
    summary: bool = False
    log: str | None = None  # FAST_NVCC_LOG
    cache: bool = False  # --cache or FAST_NVCC_CACHE=1
    device_trace: bool = False  # --device-trace or FAST_NVCC_DEVICE_TRACE=1
    remote: str | None = None  # --remote (else FAST_NVCC_REMOTE)
    split: int | None = None  # --split N (else FAST_NVCC_SPLIT): nvcc's --split-compile N added
    split_sources: tuple[str, ...] = ()  # ... only to sources matching these (--split-sources)

    @property
    def wants_report(self) -> bool:
        return bool(self.graph or self.table or self.trace or self.summary or self.log)


def usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def jobs_for(config: Config, env=os.environ) -> int:
    if config.sequential:
        return 1
    if config.jobs:
        return config.jobs
    value = env.get("FAST_NVCC_JOBS", "")
    if value.isdigit() and int(value) > 0:
        return int(value)
    return usable_cpus()


def run(config: Config, args: Sequence[str]) -> int:
    """Compile like ``nvcc args`` would; return nvcc's exit code."""
    env = os.environ
    started = time.time()
    nvcc = find_nvcc(config.nvcc, env=env)
    cwd = os.getcwd()
    # The user's choice of nvcc's output, whatever runs it (FAST_NVCC_DISABLE included).
    split = split_option.with_split(args, config.split, config.split_sources, env=env, cwd=cwd)
    if len(split) != len(args):
        _say(config, f"--split {config.split}: nvcc's --split-compile {config.split} added")
    args = split
    if config.graph:
        from .report import writers as reports

        reports.check_graph_path(config.graph)
    if env.get("FAST_NVCC_DISABLE", "") not in ("", "0"):
        return _passthrough(config, nvcc, args, cwd, started, reason="FAST_NVCC_DISABLE is set")
    try:
        effective = nvcc_args.effective_args(args, env, cwd=cwd)
    except (OSError, ValueError) as exc:
        return _passthrough(config, nvcc, args, cwd, started, reason=f"cannot read nvcc's options ({exc})")
    reason = nvcc_args.passthrough_reason(effective)
    if reason:
        return _passthrough(config, nvcc, args, cwd, started, reason=reason, effective=effective)

    dry = run_dryrun(nvcc, args)
    if dry.returncode != 0 or dry.stdout:
        return _passthrough(config, nvcc, args, cwd, started, reason="nvcc --dryrun gave no plan", effective=effective)
    try:
        plan = parse_plan(retarget(dry.stderr, pid=os.getpid()), env=env, cwd=cwd)
    except PlanError as exc:
        return _passthrough(config, nvcc, args, cwd, started, reason=f"cannot read the plan: {exc}", effective=effective)
    if config.plan_listing:
        from .report import writers as reports

        _try_report(lambda: reports.write_plan_listing(plan, config.plan_listing), "--verbose")
    remove_dead()  # what SIGKILLed compiles left in the temp directory
    owner = make_workdir(plan.temp_tag, {os.path.dirname(p) for p in plan.temp_paths})
    workdir = owner.path
    trace_value = device_trace.requested_trace(effective)
    traces = None
    if trace_value is not None or config.device_trace:
        plan, traces = device_trace.add_tool_traces(plan, directory=workdir, cwd=cwd, host=config.device_trace)
    learned = _Learned.load(plan, [os.path.join(cwd, s) for s in _sources(effective)])
    try:
        dag = _dag_for(config, plan, workdir, learned)
    except Exception as exc:  # a plan shape this version does not understand: nvcc's own turn
        shutil.rmtree(workdir, ignore_errors=True)
        owner.release()
        learned.close()
        return _passthrough(config, nvcc, args, cwd, started, reason=f"cannot build the graph: {exc!r}",
                            effective=effective)  # fmt: skip
    try:
        return _run_plan(config, nvcc, args, effective, plan, dag, learned, cwd=cwd, started=started,
                         workdir=workdir, traces=traces, trace_value=trace_value)  # fmt: skip
    finally:
        learned.close()
        owner.release()  # _run_plan removed the directory


def _passthrough(
    config: Config,
    nvcc: str,
    args: Sequence[str],
    cwd: str,
    started: float,
    *,
    reason: str,
    effective: Sequence[str] | None = None,
) -> int:
    """Hand the command line to nvcc.  Without a log to write, become nvcc (exec): same output,
    exit code and signals.  With one, run it as a child and record how it went."""
    _say(config, f"running nvcc unchanged: {reason}")
    sys.stdout.flush()
    sys.stderr.flush()
    if not config.log:
        os.execv(nvcc, [nvcc, *args])
    from .report import writers as reports

    clock = time.monotonic()
    proc = subprocess.run([nvcc, *args], check=False)
    code = proc.returncode
    record = reports.log_record(
        nvcc=nvcc, args=args, cwd=cwd,
        sources=_sources(effective or args), outputs=[],
        exit_code=code if code >= 0 else 128 - code,
        wall_seconds=time.monotonic() - clock, started=started, mode="passthrough", reason=reason,
    )  # fmt: skip
    _try_report(lambda: reports.append_log(config.log, record), "FAST_NVCC_LOG")
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code


def _run_plan(
    config: Config,
    nvcc: str,
    args: Sequence[str],
    effective: list[str],
    plan: Plan,
    dag: Dag,
    learned: _Learned,
    *,
    cwd: str,
    started: float,
    workdir: str,
    traces: device_trace.ToolTraces | None = None,
    trace_value: str | None = None,
) -> int:
    previous = {sig: signal.signal(sig, _interrupt) for sig in _SIGNALS}
    runner: Runner | None = None
    try:
        jobs = jobs_for(config)
        history, known, owners = learned.history, learned.costs, learned.owners
        costs = [_cost(known, task, owners) for task in dag.tasks]
        slots = slots_from_environment(os.environ, pool_size=usable_cpus())
        memory = _memory_budget(known, dag, costs, owners)
        combine = _same_output()
        # A cached cicc or ptxas would write no trace: with traces on, every step runs.
        handlers, cache = ({}, None) if traces else _handlers(config, nvcc, plan, cwd, workdir, combine)
        remote = None if traces else _open_remote(config, plan, cwd, workdir)
        if remote is not None:
            from .remote.sccache import remote_handler, route_remote

            dag = route_remote(dag, remote)
            handlers[Action.REMOTE] = remote_handler(remote)
        threaded = exit_codes.uses_threads(nvcc_args.threads(effective))
        if threaded:
            first = exit_codes.before_threads(plan)
            dag = replace(dag, tasks=tuple(replace(t, before_threads=t.step.index in first) for t in dag.tasks))
        fresh = _fresh_outputs(dag, cwd)
        _say(config, f"{len(plan.steps)} steps, {len(dag.tasks)} tasks, {jobs} jobs, {slots.description}")
        if memory is not None:
            _say(config, memory.description)
        observer = _Observer(plan, config.save_dir) if config.wants_report or config.save_dir else None
        runner = Runner(
            dag,
            env=plan.env,
            cwd=cwd,
            workdir=workdir,
            jobs=jobs,
            priorities=priorities(dag, [c.seconds for c in costs]),
            work=[c.seconds for c in costs],
            internal=_PlanInternal(effective, cwd=cwd, threaded=threaded),
            handlers=handlers,
            messages=plan.messages,
            combine_output=combine,
            on_event=observer.on_event if observer else None,
            slots=slots,
            memory=memory,
            state_dir=cache_directory(os.environ),
        )
        try:
            result = runner.run()
        finally:
            slots.close()
            if memory is not None:
                memory.close()
            if cache is not None:
                cache[0].close()
        if result.failed_task is not None:
            failed = dag.tasks[result.failed_task].step
            code = exit_codes.nvcc_exit_code(result.returncode, step=failed, plan=plan, threaded=threaded)
            result = replace(result, returncode=code)
        _remove_partial_outputs(dag, result.records, cwd=cwd)
        if result.failed_task is not None:
            failed = dag.tasks[result.failed_task]
            # Under -t nvcc runs every source's compile at once, and a failure ends the others
            # before they are done (nvcc -t0 -c kernel.cu syntax_error.cu: no kernel.o, 18 of 18).
            others = {t.id for t in dag.tasks if threaded and not t.before_threads
                      and owners.get(t.step.index) != owners.get(failed.step.index)}  # fmt: skip
            _remove_outputs_after(dag, result.records, failed, fresh, others, cwd=cwd)
        if remote is not None:
            remote.ledger.conclude()
            for task_id, outcome in remote.ledger.outcomes.items():
                result.records[task_id].remote = outcome
        if history is not None:
            history.record(_measurements(dag, result.records, owners))
            history.record_guesses(_outcomes(dag, result.records, owners, cwd=cwd))
        for task, record in zip(dag.tasks, result.records):
            if task.predicted_module_id is not None and not record.guess_failed and record.state is State.DONE:
                _say(config, f"{task.step.label}: started with cudafe++, on the module_id its last compile predicted")
            if record.guess_failed and task.action is not Action.HOST_BACK:
                if task.action is Action.CHECK_MODULE_ID:
                    how = f"it ran to its end ({record.guess_lost:.1f} s) on its own; reran it as printed"
                elif record.guess_lost:
                    how = f"its own was stopped after {record.guess_lost:.1f} s; ran it as printed"
                else:
                    how = "ran it as printed from the start"
                label = task.step.label if task.action is not Action.CHECK_MODULE_ID else task.label
                _say(config, f"{label}: {record.guess_failed}: {how}")
            if record.memory_stopped:
                _say(config, f"{task.step.label}: stopped {record.memory_stopped:.1f} s while memory ran short")
            if record.memory_evicted:
                _say(config, f"{task.step.label}: killed to make room for an older step while memory ran short;"
                             " ran it again")  # fmt: skip
            elif record.oom_rerun:
                _say(config, f"{task.step.label}: killed for lack of memory; ran it again")
            if record.split_note:
                lost = f" ({record.guess_lost:.1f} s of cc1plus thrown away)" if record.guess_lost else ""
                _say(config, f"{task.step.label}: host compile run as printed: {record.split_note}{lost}")
        collected = None
        returncode = result.returncode
        if traces is not None:
            collected = _collect_traces(plan, dag, result, traces, effective, owners, cwd=cwd, started=started)
            if trace_value is not None:
                path = device_trace.merged_trace_path(trace_value, effective, version=device_trace.nvcc_version(plan))
                returncode = _write_merged_trace(collected, path, cwd, returncode)
        if remote is not None:
            _say_remote(config, remote, dag, result.records)
        if config.wants_report:
            _write_reports(config, nvcc, args, effective, plan, dag, result, jobs, observer, cwd, started,
                           traces=collected if config.device_trace else None)  # fmt: skip
        return returncode
    except Interrupted as exc:
        if runner is not None:
            _remove_partial_outputs(runner.dag, runner.records, cwd=cwd, interrupted=True)
        _cleanup(plan, workdir)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        signal.signal(exc.signum, signal.SIG_DFL)
        os.kill(os.getpid(), exc.signum)
        return 128 + exc.signum  # pragma: no cover - the signal ends the process
    finally:
        if runner is not None:
            runner.close()
        _cleanup(plan, workdir)
        for sig, handler in previous.items():
            if signal.getsignal(sig) is _interrupt:
                signal.signal(sig, handler)


@dataclass(slots=True)
class _Learned:
    """What the history knows of this compile's sources: its steps' costs, and how its
    guesses went (fast_nvcc.guess.decisions), which decide which guesses the graph takes."""

    plan: Plan
    history: History | None
    costs: dict
    memory: guesses.Memory
    owners: dict[int, str]
    # Does the build tool above hold compiles back (fast_nvcc.machine.buildtool)?  Then no core is
    # spare for a guessed module_id.
    saturated: Callable[[], bool] = lambda: False

    @classmethod
    def load(cls, plan: Plan, sources: Sequence[str]) -> _Learned:
        history = History(history_path(os.environ)) if os.environ.get("FAST_NVCC_HISTORY", "1") != "0" else None
        costs = history.lookup(sources) if history else {}
        memory = history.guesses(sources) if history else guesses.NOTHING_KNOWN
        return cls(plan, history, costs, memory, _source_of_steps(plan, sources),
                   lambda: Saturation.of_this_process()())  # looked up only when a guess is weighed

    def close(self) -> None:
        if self.history is not None:
            self.history.close()

    def _seconds(self, step: Step) -> float:
        source = self.owners.get(step.index, "")
        return estimate(self.costs, source=source, tool=step.tool, arch=step.arch or "", kind=step.kind).seconds

    def _compile_steps(self, step: Step, kind: Kind, arch: str | None = None) -> float:
        """The expected seconds of the same compile's step of ``kind`` (and ``arch``: "" for
        the host's, None for any)."""
        source = self.owners.get(step.index, "")
        found = [s for s in self.plan.steps if s.kind is kind and self.owners.get(s.index, "") == source
                 and (arch is None or (s.arch or "") == arch)]  # fmt: skip
        return max((self._seconds(s) for s in found), default=0.0)

    def guess_module_id(self, step: Step) -> bool | str:
        """Make its own module_id (True), wait for cudafe++'s (False), or run on one predicted
        from the last compile (its template: fast_nvcc.graph.dag.check_module_ids)."""
        source = self.owners.get(step.index, "")
        predicted = self.memory.predicted_module_id(source, step.arch or "", cwd=os.getcwd())
        if predicted is not None:
            return predicted
        failure = self.memory.failure(source, guesses.MODULE_ID, step.arch or "")
        return guesses.guess_module_id(
            failure,
            host_preprocess=self._compile_steps(step, Kind.PREPROCESS, ""),
            cudafe=self._compile_steps(step, Kind.CUDAFE),
            device_preprocess=self._compile_steps(step, Kind.PREPROCESS, step.arch),
            cicc=self._seconds(step),
            spare_core=not self.saturated(),
        )

    def split_host(self, step: Step) -> bool:
        failure = self.memory.failure(self.owners.get(step.index, ""), guesses.HOST_SPLIT)
        return guesses.guess_host_split(failure, host_compile=self._seconds(step))

    def early_stub(self, step: Step) -> bool:
        failure = self.memory.failure(self.owners.get(step.index, ""), guesses.EARLY_STUB)
        return guesses.guess_host_split(failure, host_compile=self._seconds(step))


def _outcomes(dag: Dag, records: Sequence[Record], owners: Mapping[int, str], *, cwd: str) -> list[guesses.Outcome]:
    """How this compile's guesses went, for the history: a cicc's own module_id (held, or why
    not and what it lost), the host compile's split and its early stub."""
    found = []
    for task, record in zip(dag.tasks, records):
        source, arch = owners.get(task.step.index, ""), task.step.arch or ""
        check = records[task.checked_by] if task.checked_by is not None else None
        if check is not None and record.state is State.DONE and check.state is State.DONE:
            why = record.guess_failed or check.guess_failed
            lost = record.guess_lost + check.guess_lost
            # nvcc's id: one that carries cudafe++'s pid is what the next compile predicts from.
            template = id_template(read_id(os.path.join(cwd, dag.tasks[task.checked_by].module_ids[0])) or b"")
            detail = "" if template is None else guesses.module_id_detail(template, cwd=cwd)
            if task.predicted_module_id is not None:
                found.append(guesses.Outcome(source, guesses.PREDICTED_MODULE_ID, arch, not why, why, lost))
            if task.own_module_id:
                found.append(guesses.Outcome(source, guesses.MODULE_ID, arch, not why, why, lost, detail))
            elif template is not None:  # not guessed, but a guess could never hold
                found.append(guesses.Outcome(source, guesses.MODULE_ID, arch, False, PID, 0.0, detail))
        if task.action is Action.HOST_BACK and record.state is State.DONE:
            if record.split:
                found.append(guesses.Outcome(source, guesses.HOST_SPLIT, "", True))
                if task.stub is not None:
                    found.append(guesses.Outcome(source, guesses.EARLY_STUB, "", True))
            elif record.guess_failed:
                guess = guesses.EARLY_STUB if record.guess_failed == STUB_DIFFERS else guesses.HOST_SPLIT
                found.append(guesses.Outcome(source, guess, "", False, record.guess_failed, record.guess_lost))
    return found


def _handlers(config: Config, nvcc: str, plan: Plan, cwd: str, workdir: str, combined: bool):
    """Handlers this invocation adds to the scheduler's own (graph.HANDLED_BY): the cache's."""
    handlers = {}
    cache = _open_cache(config, nvcc, plan, cwd, workdir, combined)
    if cache is not None:
        from .cache.handlers import exec_handler, host_handlers

        handlers[Action.EXEC] = exec_handler(*cache, combined_output=combined)
        handlers.update(host_handlers(*cache, combined_output=combined))
    return handlers, cache


def _open_cache(config: Config, nvcc: str, plan: Plan, cwd: str, workdir: str, combined: bool):
    from .cache.handlers import KeyMaker, cache_enabled, open_cache

    if not cache_enabled(os.environ, config.cache):
        return None
    keys = KeyMaker(nvcc=nvcc, plan_env=plan.env, assignments=plan.assignments, caller_env=os.environ,
                    cwd=cwd, workdir=workdir, paths_by_key=plan.paths_by_key())  # fmt: skip
    return open_cache(os.environ), keys


def _source_of_steps(plan: Plan, sources: Sequence[str]) -> dict[int, str]:
    """Which input file each step works for, from the stem nvcc puts in its temp names
    (tmpxft_..-7_kernel.compute_80.cpp1.ii belongs to kernel.cu)."""
    stems = [(os.path.splitext(os.path.basename(s))[0] + ".", s) for s in sources]
    default = sources[0] if len(sources) == 1 else ""
    owners = {}
    for step in plan.steps:
        owner = default
        for key in sorted(step.reads | step.writes):
            parts = temp_name(key)
            match = parts and next((s for stem, s in stems if parts[1].startswith(stem)), None)
            if match:
                owner = match
                break
        owners[step.index] = owner
    return owners


def _cost(known, task: Task, owners: Mapping[int, str]):
    if task.action is Action.CHECK_MODULE_ID:
        return _FREE
    step = task.step
    source = owners.get(step.index, "")
    if task.action is Action.HOST_BACK:
        return estimate(known, source=source, tool="as", arch=step.arch or "", kind=step.kind, default=ASSEMBLE)
    return estimate(known, source=source, tool=step.tool, arch=step.arch or "", kind=step.kind)


def _memory_budget(known, dag: Dag, costs: Sequence[Cost], owners: Mapping[int, str]):
    """The machine-wide memory budget (fast_nvcc.machine.memory), with each task's expected peak:
    learned where history knows its tool and architecture, else a peer's or the default."""
    kinds = [("as" if t.action is Action.HOST_BACK else t.step.tool, t.step.arch or "") for t in dag.tasks]
    learned = [
        any(key in known for key in ((owners.get(t.step.index, ""), tool, arch), ("", tool, arch), ("*", tool, "")))
        for t, (tool, arch) in zip(dag.tasks, kinds)
    ]
    return budget_from_environment(os.environ, pool_directory(os.environ), peaks=[c.rss_kb * 1024 for c in costs],
                                   kinds=kinds, learned=learned)  # fmt: skip


def _measurements(dag: Dag, records: Sequence[Record], owners: Mapping[int, str]) -> list[Measurement]:
    # A split host compile: its front's time is the compile's and its back's the assembler's;
    # when it fell back, the back did the whole compile and the front's time means nothing.
    split = {t.front: records[t.id].split for t in dag.tasks if t.action is Action.HOST_BACK}
    found = []
    for task, record in zip(dag.tasks, records):
        # A cache hit's seconds say nothing about what the step costs when it runs, nor do
        # those of a step that went through sccache.
        ran = record.state is State.DONE and not record.cached and not record.reran and record.remote is None
        step = task.step
        tool = step.tool
        if task.action is Action.HOST_FRONT and not split.get(task.id):
            continue
        if task.action is Action.HOST_BACK and record.split:
            tool = "as"
        if ran and task.action in (Action.EXEC, Action.SHELL, Action.HOST_FRONT, Action.HOST_BACK, Action.REMOTE):
            found.append(
                Measurement(owners.get(step.index, ""), tool, step.arch or "", record.seconds - record.memory_stopped,
                            record.max_rss_kb or 0)  # fmt: skip
            )
    return found


def _open_remote(config: Config, plan: Plan, cwd: str, workdir: str):
    """The sccache launcher, when asked for; a missing or old sccache runs everything here."""
    from .remote.sccache import RemoteError, open_remote, remote_mode

    mode = remote_mode(config.remote, os.environ)
    if mode is None:
        return None
    try:
        remote = open_remote(mode, env=plan.env, cwd=cwd, workdir=workdir)
    except RemoteError as exc:
        _say(config, f"every step runs here: {exc}")
        return None
    _say(config, remote.describe())
    return remote


def _say_remote(config: Config, remote, dag: Dag, records: Sequence[Record]) -> None:
    """One line for what went to sccache, one per step that ran here after all."""
    if not config.verbose:
        return
    outcomes: dict[str, list[str]] = {}
    for task, record in zip(dag.tasks, records):
        if record.remote is not None:
            outcomes.setdefault(record.remote, []).append(f"{task.step.tool} {task.step.arch or ''}".strip())
        if record.remote_note:
            _say(config, f"{task.step.label}: ran here after sccache: {record.remote_note}")
    if outcomes:
        _say(config, "through sccache: " + "; ".join(f"{what} {len(steps)} ({', '.join(steps)})"
                                                   for what, steps in sorted(outcomes.items())))  # fmt: skip
    if remote.disabled:
        _say(config, "the steps after that one did not go to sccache")
    if remote.ledger.dist_errors:
        _say(config, f"sccache could not send {remote.ledger.dist_errors} step(s) to its build servers and compiled them here")


def _splits_host(config: Config) -> bool:
    """Start the host compile before fatbinary (fast_nvcc/guess/host_split.py)?  Not in the faithful
    mode, nor where the .fatbin.c is watched: --save copies it as fatbinary's output.  With the
    cache, the front's assembly and the back's object are cached (cache.HostCache)."""
    return not (config.faithful or config.save_dir or os.environ.get("FAST_NVCC_SPLIT_HOST", "1") == "0")


def _dag_for(config: Config, plan: Plan, workdir: str, learned: _Learned | None = None) -> Dag:
    shell = config.faithful
    if config.sequential:
        return sequential_dag(plan, shell=shell)
    learned = learned or _Learned(plan, None, {}, guesses.NOTHING_KNOWN, {})
    split = _splits_host(config) and learned.split_host
    dag = build_dag(plan, shell=shell, speculate=not config.faithful and learned.guess_module_id,
                    split_host=split, early_stub=learned.early_stub,
                    probe_stubs=os.environ.get("FAST_NVCC_STUB_PROBE", "1") != "0", workdir=workdir)  # fmt: skip
    if dag.problems:
        for problem in dag.problems:
            _say(config, f"running the plan in nvcc's order: {problem}")
        return sequential_dag(plan, shell=shell)
    return dag


@dataclass(frozen=True, slots=True)
class _CollectedTraces:
    merged: dict  # the document nvcc writes for --fdevice-time-trace
    tool_events: dict[int, list[dict]]  # plan step index -> its tool's events, run-relative µs


def _collect_traces(plan, dag, result: RunResult, traces, effective, owners, *, cwd: str, started: float):
    """Read the tools' trace files (before the work directory goes) and place their events."""
    spans: dict[int, tuple[int, int]] = {}
    for task, record in zip(dag.tasks, result.records):
        if task.action is Action.CHECK_MODULE_ID or record.start is None or record.end is None:
            continue
        start, end = round(record.start * 1e6), round(record.end * 1e6)
        known = spans.get(task.step.index)
        spans[task.step.index] = (min(start, known[0]), max(end, known[1])) if known else (start, end)
    given = {os.path.join(cwd, s): s for s in _sources(effective)}
    sources = {index: given.get(path, path) for index, path in owners.items()}
    # nvcc counts from its own start; fast_nvcc's run from the Runner's.
    offset = round((result.started_at - started) * 1e6)
    nvcc_spans = {i: (s + offset, e + offset) for i, (s, e) in spans.items()}
    merged = device_trace.merge_trace(plan, traces, nvcc_spans, sources=sources, input_files=list(given.values()))
    tool_events: dict[int, list[dict]] = {}
    for trace in traces.files:
        for event in device_trace.shift_tool_events(device_trace.read_tool_trace(trace.path), trace, traces.pids, spans):
            step = next((i for i in (trace.cicc, *trace.ptxas) if traces.pids[i] == event.get("pid")), None)
            if step is not None and event.get("ph") == "X":
                tool_events.setdefault(step, []).append(event)
    for host in traces.host:
        tool_events[host.step] = device_trace.read_host_trace(host, spans)
    return _CollectedTraces(merged, tool_events)


def _write_merged_trace(collected: _CollectedTraces, path: str, cwd: str, returncode: int) -> int:
    try:
        device_trace.write_json(os.path.join(cwd, path), collected.merged)
    except OSError:
        sys.stderr.write(f"nvcc fatal   : Failed to open trace file '{path}'\n")
        sys.stderr.flush()
        return returncode or 1
    return returncode


def _write_reports(config, nvcc, args, effective, plan, dag, result: RunResult, jobs, observer, cwd, started,
                   *, traces: _CollectedTraces | None = None) -> None:  # fmt: skip
    from .report import writers as reports

    report = reports.build_report(
        dag,
        result.records,
        wall_seconds=result.wall_seconds,
        exit_code=result.returncode,
        jobs=jobs,
        sizes=observer.sizes if observer else None,
        started_at=result.started_at,
    )
    outputs = sorted({os.path.normpath(os.path.join(cwd, o)) for s in plan.steps for o in s.outputs})
    sources = _sources(effective)
    title = f"nvcc {' '.join(args)}"
    if config.graph:
        _try_report(lambda: reports.write_graph(report, config.graph, title=title), "--graph")
    if config.table:
        _try_report(lambda: reports.write_table(report, config.table), "--table")
    tool_events = traces.tool_events if traces else None
    if config.trace:
        _try_report(lambda: reports.write_trace(report, config.trace, name=title, tool_events=tool_events), "--trace")
    if config.summary:
        what = " ".join(os.path.basename(s) for s in sources) + " -> " + " ".join(os.path.relpath(o, cwd) for o in outputs)
        sys.stderr.write(reports.format_summary(report, what=what))
        sys.stderr.flush()
    if config.log:
        record = reports.log_record(
            nvcc=nvcc, args=args, cwd=cwd, sources=sources, outputs=outputs,
            exit_code=result.returncode, wall_seconds=result.wall_seconds, started=started,
            mode="sequential" if config.sequential else "dag", report=report,
        )  # fmt: skip
        if tool_events is not None:
            sidecar = device_trace.sidecar_path(config.log)
            record["device_trace"] = {"file": sidecar, "id": f"{os.getpid()}-{started}"}
            line = device_trace.sidecar_line(record["device_trace"]["id"], plan, tool_events)
            _try_report(lambda: reports.append_log(sidecar, line), "FAST_NVCC_LOG device traces")
        _try_report(lambda: reports.append_log(config.log, record), "FAST_NVCC_LOG")


def _try_report(write, what: str) -> None:
    """A report that cannot be written is worth a warning, never a different exit code."""
    from .report.writers import ReportError

    try:
        write()
    except (OSError, ReportError) as exc:
        print(f"fast_nvcc: warning: {what}: {exc}", file=sys.stderr, flush=True)
    except Exception as exc:  # graphviz's own errors, for one
        print(f"fast_nvcc: warning: {what}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)


def _sources(args: Sequence[str]) -> list[str]:
    return [o.name for o in nvcc_args.iter_options(args) if o.value is None and not o.name.startswith("-")]


class _Observer:
    """Measures what each step read and wrote, and keeps copies for --save, as steps end
    (later steps may overwrite or remove the temp files)."""

    def __init__(self, plan: Plan, save_dir: str | None) -> None:
        self.paths = plan.paths_by_key()
        self.save_dir = save_dir
        self.sizes: dict[int, tuple[int, int]] = {}

    def path(self, key: str) -> str:
        return self.paths.get(key, key)

    def on_event(self, what: str, task: Task, record: Record) -> None:
        if what != "end":
            return
        step = task.step
        read = sum(_size(self.path(k)) for k in step.reads)
        written = sum(_size(self.path(k)) for k in step.writes)
        self.sizes[task.id] = (read, written)
        if self.save_dir and record.state in (State.DONE, State.FAILED):
            self._save(task, record)

    def _save(self, task: Task, record: Record) -> None:
        name = "-".join(p for p in (f"{task.step.index:02d}", task.label.split(" ", 1)[1], str(task.id)) if p)
        target = os.path.join(self.save_dir, name.replace(" ", "_").replace("/", "_"))
        try:
            os.makedirs(target, exist_ok=True)
            for key in task.step.writes:
                path = self.path(key)
                if os.path.isfile(path):
                    shutil.copy2(path, os.path.join(target, os.path.basename(path)))
            for fd, path in record.captures:
                if os.path.isfile(path):
                    shutil.copy2(path, os.path.join(target, "stdout" if fd == 1 else "stderr"))
        except OSError as exc:
            print(f"fast_nvcc: warning: --save: {exc}", file=sys.stderr, flush=True)


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


class _PlanInternal(Internal):
    def __init__(self, effective: list[str], *, cwd: str, threaded: bool) -> None:
        self.options = nvcc_args.dependency_options(effective)
        self.cwd = cwd
        self.threaded = threaded

    def depfile(self, step: Step) -> bytes | None:
        data = []
        for path in step.sources:
            with open(path, "rb") as handle:
                data.append(handle.read())
        names = depfile.collect_dependencies(data, nonsystem=self.options.nonsystem)
        text = depfile.format_depfile(names, options=self.options).encode("utf-8", "surrogateescape")
        if not step.outputs:
            return text
        try:
            write_atomically(os.path.join(self.cwd, step.outputs[0]), text)
        except OSError:
            message = f"Could not open output file {step.outputs[0]}"
            raise StepFailed(exit_codes.fatal_message(message, threaded=self.threaded)) from None
        return None

    def remove(self, step: Step) -> None:
        for word in step.argv[1:]:
            try:
                os.remove(os.path.join(self.cwd, word))
            except FileNotFoundError:
                pass  # nvcc removes files it may not have created, and says nothing


def _remove_partial_outputs(dag: Dag, records, *, cwd: str, interrupted: bool = False) -> None:
    """A step killed halfway may leave half a file: remove what it was writing."""
    for task, record in zip(dag.tasks, records):
        killed = record.state is State.KILLED
        if killed or (interrupted and record.start is not None and record.end is None):
            _remove(cwd, task.step.outputs)


def _fresh_outputs(dag: Dag, cwd: str) -> set[str]:
    """The user-visible files of the plan that do not exist yet."""
    outputs = {output for task in dag.tasks for output in task.step.outputs}
    return {output for output in outputs if not os.path.lexists(os.path.join(cwd, output))}


def _remove_outputs_after(
    dag: Dag, records, failed: Task, fresh: set[str], others: set[int], *, cwd: str
) -> None:
    """nvcc would not have run the steps after the one that failed, nor got to the end of
    ``others``: what they wrote before it failed (a second source's object, done before the
    first source's cudafe++ was) goes, unless the file was there before (then it was going to be
    stale either way)."""
    for task, record in zip(dag.tasks, records):
        if (task.order > failed.order or task.id in others) and record.state is State.DONE:
            _remove(cwd, [output for output in task.step.outputs if output in fresh])


def _remove(cwd: str, outputs: Sequence[str]) -> None:
    for output in outputs:
        with contextlib.suppress(FileNotFoundError, IsADirectoryError):
            os.remove(os.path.join(cwd, output))


def _cleanup(plan: Plan, workdir: str) -> None:
    """Remove the plan's temp files, and those the tools made from the same names (cicc's
    ``tmpxft_..-7_k-57610f..lgenfe.bc`` when it is killed halfway)."""
    directories = {os.path.dirname(path) for path in plan.temp_paths}
    leftovers = set(plan.temp_paths)
    if plan.temp_tag:
        for directory in directories:
            pattern = plan.temp_tag[: len("tmpxft_00000000_")] + "*"
            leftovers.update(glob.glob(os.path.join(glob.escape(directory), pattern)))
    for path in leftovers:
        try:
            os.remove(path)
        except (FileNotFoundError, IsADirectoryError, PermissionError):
            pass
    shutil.rmtree(workdir, ignore_errors=True)


def _same_output() -> bool:
    """stdout and stderr are one file (a terminal, 2>&1): keep each step's two streams in one
    capture so their interleaving survives."""
    try:
        out, err = os.fstat(1), os.fstat(2)
    except OSError:
        return False
    return (out.st_dev, out.st_ino) == (err.st_dev, err.st_ino)


def _interrupt(signum, frame) -> None:
    raise Interrupted(signum)


def _say(config: Config, message: str) -> None:
    if config.verbose:
        print(f"fast_nvcc: {message}", file=sys.stderr, flush=True)
