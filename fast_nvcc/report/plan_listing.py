"""--verbose FILE: the plan as nvcc would run it, each command expanded, one argument a line."""

from __future__ import annotations

import shlex

from ..plan.dryrun import Plan
from .run_report import write_text


def write_plan_listing(plan: Plan, path: str) -> None:
    """The plan as nvcc would run it: its variables, then each command expanded, one argument
    per line."""
    lines = ["# nvcc's variables, set in the environment of every command"]
    lines += [f"{name}={value}" for name, value in plan.assignments]
    for step in plan.steps:
        lines.append("")
        lines.append(f"# {step.label}")
        if step.needs_shell or not step.argv:
            lines.append(step.text)
            continue
        lines.extend(shlex.quote(word) for word in step.argv)
        lines.extend(f"{'' if r.fd == 1 else r.fd}{'>>' if r.append else '>'} {shlex.quote(r.target)}" for r in step.redirects)
    write_text(path, "\n".join(lines) + "\n")
