"""One invocation's command line read, and nvcc's own plan for it, or why nvcc runs it as it is.

nvcc runs the command line unchanged when fast_nvcc is switched off (FAST_NVCC_DISABLE), when
its options say so (:func:`fast_nvcc.plan.nvcc_args.passthrough_reason`: no compile to run in
parallel), when ``nvcc --dryrun`` gives no plan (then nvcc prints its own error), and when the
plan is one this version cannot read.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from ..settings import switch
from .dryrun import Plan, PlanError, parse_plan, retarget, run_dryrun
from .nvcc_args import effective_args, input_files, passthrough_reason


class Invocation(NamedTuple):
    """One nvcc command line as fast_nvcc reads it: nvcc's plan for it, or why nvcc runs it
    unchanged."""

    nvcc: str
    args: tuple[str, ...]
    cwd: str
    effective: tuple[str, ...] | None = None  # the options, with nvcc's option files read
    plan: Plan | None = None
    passthrough: str | None = None  # why nvcc runs the command line unchanged

    @property
    def sources(self) -> list[str]:
        return input_files(self.effective or self.args)


def read_invocation(nvcc: str, args: Sequence[str], *, env: Mapping[str, str], cwd: str) -> Invocation:
    """``nvcc args``'s plan, or the reason nvcc runs it unchanged."""
    args = tuple(args)
    if switch(env, "FAST_NVCC_DISABLE"):
        return Invocation(nvcc, args, cwd, passthrough="FAST_NVCC_DISABLE is set")
    try:
        effective = tuple(effective_args(args, env, cwd=cwd))
    except (OSError, ValueError) as exc:
        return Invocation(nvcc, args, cwd, passthrough=f"cannot read nvcc's options ({exc})")
    reason = passthrough_reason(effective)
    if reason:
        return Invocation(nvcc, args, cwd, effective, passthrough=reason)
    dry = run_dryrun(nvcc, args)
    if dry.returncode != 0 or dry.stdout:
        return Invocation(nvcc, args, cwd, effective, passthrough="nvcc --dryrun gave no plan")
    try:
        plan = parse_plan(retarget(dry.stderr, pid=os.getpid()), env=env, cwd=cwd)
    except PlanError as exc:
        return Invocation(nvcc, args, cwd, effective, passthrough=f"cannot read the plan: {exc}")
    return Invocation(nvcc, args, cwd, effective, plan)
