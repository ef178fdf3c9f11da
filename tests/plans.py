"""Load the captured ``nvcc --dryrun`` transcripts under tests/data/plans."""

from __future__ import annotations

import json
from pathlib import Path

from fast_nvcc.plan.dryrun import Plan, parse_plan

PLANS = Path(__file__).parent / "data" / "plans"


def load(name: str) -> tuple[dict, str]:
    header, body = (PLANS / f"{name}.txt").read_text().split("\n", 1)
    return json.loads(header), body


def load_plan(name: str) -> Plan:
    header, body = load(name)
    return parse_plan(body, env={}, cwd=header["cwd"])


def names() -> list[str]:
    return sorted(p.stem for p in PLANS.glob("*.txt"))


def dag_for(plan: Plan, *, faithful: bool = False, sequential: bool = False, say=lambda message: None):
    """The graph fast_nvcc runs for ``plan`` with no history, as the driver chooses it."""
    import os

    from fast_nvcc.graph.choose import choose_dag
    from fast_nvcc.learn.learned import Learned

    return choose_dag(plan, Learned.nothing(plan), workdir="/w", sequential=sequential, faithful=faithful,
                      watched=False, env=os.environ, say=say)  # fmt: skip
