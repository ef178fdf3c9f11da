"""nvcc's exit code when a step of its plan fails, and the wording of its own failures.

Measured with nvcc 13.0 and 13.5 (docs/nvcc-facts.md, tests/plan/test_exit_codes.py): nvcc runs
its plan in two phases.  A dependency file (-M, -MD and their kin) is made first, one step
after the other, from the preprocessed files that ``-- Filter Dependencies --`` reads.  The
rest of the plan runs one step after the other too, unless ``-t N`` (``--threads N``) asks
for N != 1 threads: then the steps run on nvcc's threads, and a thread that fails reports
-1, which nvcc exits with (255) whatever the step's own code was.  ``--split-compile``
alone changes nothing; the last ``-t`` given counts (``-t 2 -t 1`` is sequential).
"""

from __future__ import annotations

import enum

from .dryrun import Kind, Plan, Step


class Phase(enum.Enum):
    DEPENDENCIES = "dependencies"  # the preprocessing that -M/-MD's dependency filter reads
    COMPILE = "compile"  # everything else: the front ends, cicc, ptxas, fatbinary, links


STEP = None  # nvcc exits with the failed step's own code (sh's 128 + N for a signal)

# (phase of the failed step, nvcc -t N with N != 1) -> nvcc's exit code.
EXIT_CODES: dict[tuple[Phase, bool], int | None] = {
    # Without -t, or with -t 1, nvcc stops at the first failing step and passes its code on:
    # cudafe++ 2, gcc 1, ptxas and nvlink 255, a crash 139 (Segmentation fault).
    (Phase.DEPENDENCIES, False): STEP,
    (Phase.COMPILE, False): STEP,
    # The dependency phase runs before nvcc starts its threads: a missing header under
    # -MD -t 0 still exits 1.
    (Phase.DEPENDENCIES, True): STEP,
    # On nvcc's threads every failure is -1: 255, for one source or several, one architecture
    # or several, --split-compile, -dlink, the host link, a crashed step.
    (Phase.COMPILE, True): 255,
}

# nvcc's own message when it cannot write the dependency file: its threads' logger leaves out
# the tool's name ("fatal   : Could not open output file x.d" under -t 0, rc 1 either way).
_FATAL_PREFIX = {False: "nvcc fatal   : ", True: "fatal   : "}


def uses_threads(threads: str | None) -> bool:
    """Does ``-t threads`` (the last one given; None when absent) run nvcc's threads?"""
    return threads is not None and threads.strip() != "1"


def phase_of(step: Step, plan: Plan) -> Phase:
    return Phase.DEPENDENCIES if _in_dependency_phase(step, _filtered(plan)) else Phase.COMPILE


def before_threads(plan: Plan) -> set[int]:
    """Under -t, the indices of the steps nvcc runs before it starts its threads: the
    dependency phase of every source.  Its threads print the plan in any order (the second
    source's depfile after the first source's cudafe++ in some runs, before it in others), but
    nvcc itself wrote both dependency files in 5 of 5 runs where the first source failed."""
    filtered = _filtered(plan)
    return {s.index for s in plan.steps if _in_dependency_phase(s, filtered)}


def _filtered(plan: Plan) -> set[str]:
    """The files the plan's dependency steps read."""
    return {key for s in plan.steps if s.kind is Kind.DEPFILE for key in s.reads}


def _in_dependency_phase(step: Step, filtered: set[str]) -> bool:
    return step.kind is Kind.DEPFILE or bool(step.writes & filtered)


def nvcc_exit_code(step_code: int, *, step: Step, plan: Plan, threaded: bool) -> int:
    """What nvcc exits with when ``step`` failed with ``step_code``."""
    code = EXIT_CODES[phase_of(step, plan), threaded]
    return step_code if code is STEP else code


def fatal_message(text: str, *, threaded: bool) -> str:
    """One of nvcc's own fatal errors, worded as nvcc prints it."""
    return f"{_FATAL_PREFIX[threaded]}{text}\n"

