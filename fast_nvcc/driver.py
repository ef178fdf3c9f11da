"""One nvcc invocation, run as a DAG: plan, graph, run, clean up, exit code.

The driver owns the invocation's lifetime: its private work directory, the temp files the plan
names, signals, and the decision to hand a command line to nvcc unchanged.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field

from . import depfile, nvcc_args
from .graph import Dag, build_dag, default_costs, priorities, sequential_dag
from .plan import Plan, PlanError, Step, parse_plan, retarget, run_dryrun
from .scheduler import Internal, Interrupted, Runner, RunResult, State, StepFailed
from .toolchain import find_nvcc

_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@dataclass(frozen=True, slots=True)
class Config:
    """fast_nvcc's own options, parsed."""

    nvcc: str | None = None
    jobs: int | None = None
    faithful: bool = False
    sequential: bool = False
    verbose: int = 0


@dataclass(slots=True)
class Invocation:
    """What one run produced, for reports."""

    nvcc: str
    args: list[str]
    plan: Plan | None = None
    dag: Dag | None = None
    result: RunResult | None = None
    passthrough: str | None = None
    notes: list[str] = field(default_factory=list)


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
    nvcc = find_nvcc(config.nvcc, env=env)
    if env.get("FAST_NVCC_DISABLE", "") not in ("", "0"):
        return exec_nvcc(nvcc, args, reason="FAST_NVCC_DISABLE is set", config=config)
    invocation = Invocation(nvcc=nvcc, args=list(args))
    cwd = os.getcwd()
    try:
        effective = nvcc_args.effective_args(args, env, cwd=cwd)
    except (OSError, ValueError) as exc:
        return exec_nvcc(nvcc, args, reason=f"cannot read nvcc's options ({exc})", config=config)
    reason = nvcc_args.passthrough_reason(effective)
    if reason:
        return exec_nvcc(nvcc, args, reason=reason, config=config)

    dry = run_dryrun(nvcc, args)
    if dry.returncode != 0 or dry.stdout:
        return exec_nvcc(nvcc, args, reason="nvcc --dryrun did not give a plan", config=config)
    try:
        plan = parse_plan(retarget(dry.stderr, pid=os.getpid()), env=env, cwd=cwd)
    except PlanError as exc:
        return exec_nvcc(nvcc, args, reason=f"cannot read the plan: {exc}", config=config)
    invocation.plan = plan
    return _run_plan(config, invocation, plan, effective, cwd=cwd)


def exec_nvcc(nvcc: str, args: Sequence[str], *, reason: str, config: Config) -> int:
    """Become nvcc: same output, same exit code, same signals."""
    _say(config, f"running nvcc unchanged: {reason}")
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(nvcc, [nvcc, *args])
    return 127  # pragma: no cover - execv does not return


def _run_plan(
    config: Config, invocation: Invocation, plan: Plan, effective: list[str], *, cwd: str
) -> int:
    workdir = tempfile.mkdtemp(prefix="fast_nvcc-")
    previous = {sig: signal.signal(sig, _interrupt) for sig in _SIGNALS}
    runner: Runner | None = None
    try:
        shell = config.faithful
        dag = build_dag(plan, shell=shell, speculate=not (config.faithful or config.sequential), workdir=workdir)
        if dag.problems:
            for problem in dag.problems:
                _say(config, f"running the plan in nvcc's order: {problem}")
            dag = sequential_dag(plan, shell=shell)
        elif config.sequential:
            dag = sequential_dag(plan, shell=shell)
        invocation.dag = dag
        jobs = jobs_for(config)
        _say(config, f"{len(plan.steps)} steps, {len(dag.tasks)} tasks, {jobs} jobs")
        runner = Runner(
            dag,
            env=plan.env,
            cwd=cwd,
            workdir=workdir,
            jobs=jobs,
            priorities=priorities(dag, default_costs(dag)),
            internal=_PlanInternal(plan, effective, cwd=cwd),
            messages=plan.messages,
            combine_output=_same_output(),
        )
        result = runner.run()
        invocation.result = result
        for task, record in zip(dag.tasks, result.records):
            if record.reran:
                _say(config, f"{task.step.label}: its module_id differs from nvcc's; reran it as printed")
        _remove_partial_outputs(dag, result.records, cwd=cwd)
        return result.returncode
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
        _cleanup(plan, workdir)
        for sig, handler in previous.items():
            if signal.getsignal(sig) is _interrupt:
                signal.signal(sig, handler)


class _PlanInternal(Internal):
    def __init__(self, plan: Plan, effective: list[str], *, cwd: str) -> None:
        self.options = nvcc_args.dependency_options(effective)
        self.cwd = cwd

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
            _write_atomically(os.path.join(self.cwd, step.outputs[0]), text)
        except OSError:
            raise StepFailed(f"nvcc fatal   : Could not open output file {step.outputs[0]}\n") from None
        return None

    def remove(self, step: Step) -> None:
        for word in step.argv[1:]:
            try:
                os.remove(os.path.join(self.cwd, word))
            except FileNotFoundError:
                pass  # nvcc removes files it may not have created, and says nothing


def _write_atomically(path: str, data: bytes) -> None:
    directory = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(prefix=".fast_nvcc-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.remove(tmp)
        except FileNotFoundError:
            pass
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _remove_partial_outputs(dag: Dag, records, *, cwd: str, interrupted: bool = False) -> None:
    """A step killed halfway may leave half a file: remove what it was writing."""
    for task, record in zip(dag.tasks, records):
        if record.state is State.KILLED or (interrupted and record.start is not None and record.end is None):
            for output in task.step.outputs:
                try:
                    os.remove(os.path.join(cwd, output))
                except (FileNotFoundError, IsADirectoryError):
                    pass


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
