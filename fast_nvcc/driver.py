"""One nvcc invocation, stage by stage: plan, graph, handlers, run, clean up, report, exit code.

Each stage lives in its folder (``plan/``, ``graph/``, ...); the comments number them as
docs/development.md's map does, in the order of imports rather than of calls (``learn/``, 6, is
read before the graph).  The driver strings them together and owns the invocation's lifetime:
its work directory, the signals while the graph runs, and the decision to hand the command line
to nvcc unchanged.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

from .cache.handlers import open_handlers
from .graph.choose import choose_dag, mark_before_threads
from .graph.paths import priorities
from .graph.tasks import Action, Dag
from .learn.history_place import cache_directory
from .learn.learned import Learned
from .learn.pruning import prune_when_due
from .machine.cpus import usable_cpus
from .machine.slot_choice import slots_from_environment
from .passthrough import run_unchanged
from .plan import exit_codes, split_option
from .plan.invocation import Invocation, read_invocation
from .plan.nvcc_args import TRACE_OPTION, requested_trace, threads
from .plan.toolchain import find_nvcc, has_option
from .remote.mode import remote_mode
from .report.verbose import say_remote, say_task_notes
from .run.captures import same_output
from .run.internal_steps import PlanInternal
from .run.leftovers import make_workdir, remove_dead
from .run.outputs import fresh_outputs, remove_partial_outputs, remove_temp_files, settle
from .run.scheduler import Runner
from .run.signals import Interrupted, Interruptions
from .settings import count

if TYPE_CHECKING:
    from .cache.store import StepCache
    from .plan.tool_traces import ToolTraces
    from .remote.sccache import RemoteSteps
    from .report.observer import StepObserver
    from .run.task_records import RunResult


class Config(NamedTuple):
    """fast_nvcc's own options, parsed."""

    nvcc: str | None = None
    nvcc_given_as: str = "--nvcc"  # where ``nvcc`` came from, for the error that names it
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

    def say(self, message: str) -> None:
        """A line of -v."""
        if self.verbose:
            print(f"fast_nvcc: {message}", file=sys.stderr, flush=True)


def jobs_for(config: Config, env=os.environ) -> int:
    if config.sequential:
        return 1
    if config.jobs:
        return config.jobs
    return count(env, "FAST_NVCC_JOBS") or len(usable_cpus())


def run(config: Config, args: Sequence[str]) -> int:
    """Compile like ``nvcc args`` would; return nvcc's exit code."""
    env, cwd, started, say = os.environ, os.getcwd(), time.time(), config.say
    nvcc = find_nvcc(config.nvcc, env=env, given_as=config.nvcc_given_as)
    # The user's choice of nvcc's output, whatever runs it (FAST_NVCC_DISABLE included).
    split = split_option.with_split(args, config.split, config.split_sources, env=env, cwd=cwd)
    if len(split) != len(args):
        say(f"--split {config.split}: nvcc's --split-compile {config.split} added")
    # The reports' modules load only where a report is asked for: a compile without one does not
    # pay their import (about 15 ms of each compile's start on the 2-core machine).
    if config.graph:
        from .report.graph_file import check_graph_path

        check_graph_path(config.graph)
    # 1. plan
    invocation = read_invocation(nvcc, split, env=env, cwd=cwd)
    if invocation.passthrough:
        return run_unchanged(invocation, log=config.log, started=started, say=say)
    if config.plan_listing:
        from .report.plan_listing import write_plan_listing
        from .report.writing import try_report

        try_report(lambda: write_plan_listing(invocation.plan, config.plan_listing), "--verbose")
    remove_dead()  # what SIGKILLed compiles left in the temp directory (4. run/leftovers.py)
    plan = invocation.plan
    owner = make_workdir(plan.temp_tag, {os.path.dirname(p) for p in plan.temp_paths})
    trace_value = requested_trace(invocation.effective)
    if config.device_trace and not has_option(nvcc, TRACE_OPTION):
        print(f"fast_nvcc: warning: --device-trace: {nvcc} has no --fdevice-time-trace: compiling"
              " without device traces", file=sys.stderr, flush=True)  # fmt: skip
        config = config._replace(device_trace=False)
    traces = None
    if trace_value is not None or config.device_trace:
        from .plan.tool_traces import add_tool_traces

        plan, traces = add_tool_traces(plan, directory=owner.path, cwd=cwd, host=config.device_trace)
        invocation = invocation._replace(plan=plan)
    # 6. learn: what earlier compiles of these sources taught, read before the graph it shapes
    learned = Learned.load(plan, [os.path.join(cwd, s) for s in invocation.sources])
    # 2. graph
    try:
        if (missing := _missing_dependency()) is not None:
            raise ImportError(f"No module named {missing!r}")
        dag = choose_dag(plan, learned, workdir=owner.path, sequential=config.sequential,
                         faithful=config.faithful, watched=bool(config.save_dir), env=env, say=say)  # fmt: skip
    except Exception as exc:  # a plan shape this version does not understand: nvcc's own turn
        shutil.rmtree(owner.path, ignore_errors=True)
        owner.release()
        learned.close()  # before nvcc takes the process over
        if isinstance(exc, ImportError):  # run by a Python without fast_nvcc's dependencies: say so
            print(f"fast_nvcc: warning: {exc}: running nvcc unchanged (pip install fast_nvcc's dependencies:"
                  " networkx, psutil)", file=sys.stderr, flush=True)  # fmt: skip
        return run_unchanged(invocation._replace(passthrough=f"cannot build the graph: {exc!r}"),
                             log=config.log, started=started, say=say)  # fmt: skip
    try:
        return _run(config, invocation, dag, learned, workdir=owner.path, traces=traces, trace_value=trace_value,
                    started=started)  # fmt: skip
    finally:
        learned.close()
        owner.release()  # _run removed the directory


def _run(config: Config, invocation: Invocation, dag: Dag, learned: Learned, *, workdir: str,
         traces: ToolTraces | None, trace_value: str | None, started: float) -> int:  # fmt: skip
    """After the graph: handlers, run, clean up, learn, report, exit code."""
    env, cwd, plan, say = os.environ, invocation.cwd, invocation.plan, config.say
    runner = None
    with Interruptions() as interruptions:
        try:
            # 7. cache and 8. remote: their handlers (5. guess/'s come with the graph's tasks)
            combine = same_output()
            dag, handlers, cache, remote = _open_handlers(config, invocation, dag, workdir=workdir, combine=combine,
                                                          traced=traces is not None)  # fmt: skip
            threaded = exit_codes.uses_threads(threads(invocation.effective))
            if threaded:
                dag = mark_before_threads(dag, exit_codes.before_threads(plan))
            # 3. machine: the slots and the memory budget every compile on it shares
            jobs = jobs_for(config)
            costs = learned.task_costs(dag)
            slots = slots_from_environment(env, pool_size=len(usable_cpus()))
            memory = learned.memory_budget(dag, costs)
            fresh = fresh_outputs(dag, cwd)
            say(f"{len(plan.steps)} steps, {len(dag.tasks)} tasks, {jobs} jobs, {slots.description}")
            if memory is not None:
                say(memory.description)
            observer = None
            if config.wants_report or config.save_dir:
                from .report.observer import StepObserver

                observer = StepObserver(plan, config.save_dir)
            # 4. run
            runner = Runner(
                dag,
                env=plan.env,
                cwd=cwd,
                workdir=workdir,
                jobs=jobs,
                priorities=priorities(dag, [c.seconds for c in costs]),
                work=[c.seconds for c in costs],
                serial=[c.serial for c in costs],
                split_known=learned.split_costs_known(dag),
                internal=PlanInternal(invocation.effective, cwd=cwd, threaded=threaded),
                handlers=handlers,
                messages=plan.messages,
                combine_output=combine,
                on_event=observer.on_event if observer else None,
                slots=slots,
                memory=memory,
                state_dir=cache_directory(env),
            )
            try:
                result = runner.run()
            finally:
                slots.close()
                if memory is not None:
                    memory.close()
                if cache is not None:
                    cache.close()
            # 4. clean up (run/outputs.py): what nvcc would have left, with its exit code
            result = settle(result, dag, plan, fresh, threaded=threaded, owners=learned.owners, cwd=cwd)
            if remote is not None:
                from .remote.sccache import conclude

                conclude(remote, result.records)
            # 6. learn: the measured costs and the guesses' outcomes, into the history
            learned.record(dag, result.records, cwd=cwd)
            prune_when_due(env)  # what no compile used for FAST_NVCC_KEEP_DAYS (learn/pruning.py)
            # 9. report, and the exit code
            return _report(config, invocation, dag, result, remote=remote, traces=traces, trace_value=trace_value,
                           jobs=jobs, observer=observer, owners=learned.owners, started=started)  # fmt: skip
        except Interrupted as exc:
            if runner is not None:
                remove_partial_outputs(runner.dag, runner.records, cwd=cwd, interrupted=True)
            remove_temp_files(plan, workdir)
            return interruptions.die_of(exc.signum)
        finally:
            if runner is not None:
                runner.close()
            remove_temp_files(plan, workdir)


def _missing_dependency() -> str | None:
    """The first of fast_nvcc's dependencies this Python lacks: found, not imported, since a
    compile's common path imports neither (machine/process_tree.py, graph/paths.py), and one
    missing would show only where it is needed, a failure's kill among them."""
    for name in ("networkx", "psutil"):
        if name in sys.modules:
            if sys.modules[name] is None:  # (an import blocked: ImportError, as Python has it)
                return name
        elif importlib.util.find_spec(name) is None:
            return name
    return None


def _open_handlers(config: Config, invocation: Invocation, dag: Dag, *, workdir: str, combine: bool,
                   traced: bool) -> tuple[Dag, dict, StepCache | None, RemoteSteps | None]:  # fmt: skip
    """The cache's handlers and sccache's, and the graph with the steps sccache takes routed to
    it; the cache and sccache to close and conclude after the run.  None of them with device
    traces: a cached or remote cicc or ptxas would write no trace, so every step runs here."""
    if traced:
        return dag, {}, None, None
    env, cwd, plan = os.environ, invocation.cwd, invocation.plan
    handlers, cache = open_handlers(config.cache, nvcc=invocation.nvcc, plan=plan, env=env, cwd=cwd,
                                    workdir=workdir, combined_output=combine)  # fmt: skip
    # sccache's module loads only where --remote or FAST_NVCC_REMOTE asks for it (remote/mode.py).
    if remote_mode(config.remote, env) is None:
        return dag, handlers, cache, None
    from .remote.sccache import open_for_invocation, remote_handler, route_remote

    remote = open_for_invocation(config.remote, plan_env=plan.env, env=env, cwd=cwd, workdir=workdir, say=config.say)
    if remote is not None:
        dag = route_remote(dag, remote)
        handlers[Action.REMOTE] = remote_handler(remote)
    return dag, handlers, cache, remote


def _report(config: Config, invocation: Invocation, dag: Dag, result: RunResult, *, remote: RemoteSteps | None,
            traces: ToolTraces | None, trace_value: str | None, jobs: int, observer: StepObserver | None,
            owners: dict[int, str], started: float) -> int:  # fmt: skip
    """The -v notes, the tools' traces, sccache's account and the reports asked for; the exit
    code, which a trace file that cannot be written makes 1."""
    say_task_notes(dag, result.records, config.say)
    returncode, collected = result.returncode, None
    if traces is not None:
        # Only a compile asked for traces loads their reader (report/device_trace.py).
        from .report.device_trace import finish_traces

        returncode, collected = finish_traces(invocation.plan, dag, result, traces, requested=trace_value,
                                              effective=invocation.effective, sources=invocation.sources,
                                              owners=owners, cwd=invocation.cwd, started=started)  # fmt: skip
    if remote is not None:
        say_remote(remote, dag, result.records, config.say)
    if config.wants_report:
        from .report.writing import ReportOptions, write_reports

        options = ReportOptions(config.graph, config.table, config.trace, config.summary, config.log)
        write_reports(options, invocation, dag, result, jobs=jobs, observer=observer, started=started,
                      mode="sequential" if config.sequential else "dag",
                      tool_events=collected.tool_events if collected and config.device_trace else None)  # fmt: skip
    return returncode
