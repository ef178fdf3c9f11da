"""When fast_nvcc guesses, and what it remembers of the guesses that failed.

Two guesses let a compile's steps start before nvcc's plan allows them, and each is checked
before anything downstream sees its result:

* ``module_id``: a cicc makes its own module_id rather than wait for cudafe++'s
  (:func:`fast_nvcc.graph.module_ids.check_module_ids`).  The guess saves cudafe++'s time (less the
  cicc's own preprocessing); when it fails the cicc is stopped as soon as the ids tell
  (:mod:`fast_nvcc.guess.module_id`), which costs the cores it used until then: at most until
  cudafe++ or cicc's front end wrote its id, whichever is later.
* ``host_split``: the host compile runs on a placeholder ``.fatbin.c``
  (:mod:`fast_nvcc.guess.host_split`); ``early_stub``: and on another cicc's stub
  (:func:`fast_nvcc.graph.host_compile.early_stubs`).  A failure throws the cc1plus away and compiles
  again at the end.

A guess is taken when its expected saving beats its expected loss (:func:`worth_guessing`).
The chance that it fails is what the history says of the source: a guess that failed for a
source is never taken for it again (the causes are properties of the source: no external
definition, stubs that differ per architecture), one that held is taken; for a source not seen
yet, the share of failures among all the sources the history knows, drawn towards
PRIOR_FAILURE while it knows few.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import NamedTuple

MODULE_ID = "module_id"
PREDICTED_MODULE_ID = "predicted_module_id"
HOST_SPLIT = "host_split"
EARLY_STUB = "early_stub"

PRIOR_FAILURE = 0.1  # the chance a guess fails for a source nothing is known of
PRIOR_WEIGHT = 10  # ... worth that many sources' outcomes
# cudafe++ writes the module_id as it ends (nvcc 13.0.88, 2 cores: 40-60 ms before its end,
# heavy.cu and pidheavy.cu); cicc writes its own after its front end (3.6 s into a 5.8 s cicc
# for heavy.cu, 4.3 s into 6.2 s for pidheavy.cu).
FRONT_END_SHARE = 0.7


class Outcome(NamedTuple):
    """How one guess went for one source (and architecture, for a cicc's)."""

    source: str
    guess: str
    arch: str
    held: bool
    why: str = ""
    lost: float = 0.0  # seconds of work thrown away
    detail: str = ""  # a module_id that carried its writer's pid: module_id_detail's JSON


def worth_guessing(failure: float, *, saving: float, waste: float) -> bool:
    """Take a guess whose success saves ``saving`` seconds and whose failure wastes ``waste``,
    when it fails with chance ``failure``?"""
    return (1.0 - failure) * saving > failure * waste


def module_id_saving(*, host_preprocess: float, cudafe: float, device_preprocess: float) -> float:
    """How much earlier a cicc starts with its own module_id than once cudafe++ has written
    nvcc's: cudafe++ waits for the host preprocessing, the cicc for its own."""
    return max(0.0, host_preprocess + cudafe - device_preprocess)


def guess_module_id(failure: float, *, host_preprocess: float, cudafe: float, device_preprocess: float,
                    cicc: float, spare_core: bool = True) -> bool:  # fmt: skip
    """Should a cicc make its own module_id?  A failure is seen once both ids are written (or
    as soon as either is, for an id that carries its writer's pid): the cicc has run until
    cudafe++ ended, or until its own front end wrote its id, whichever is later.

    Without a ``spare_core`` (the build tool holds compiles back: each compile runs about one
    step at a time) the cicc would run instead of the host preprocessing and cudafe++, not
    beside them: nothing is saved, and a wrong guess costs the whole cicc, since cudafe++'s id
    comes only after it (docs/benchmarks.md)."""
    if not spare_core:
        return False
    saving = module_id_saving(host_preprocess=host_preprocess, cudafe=cudafe, device_preprocess=device_preprocess)
    waste = max(saving, FRONT_END_SHARE * cicc)
    return worth_guessing(failure, saving=saving, waste=waste)


def guess_host_split(failure: float, *, host_compile: float) -> bool:
    """Should the host compile start before fatbinary?  It saves up to the host compile's time
    (run beside the device steps, not after them); a failure compiles it twice."""
    return worth_guessing(failure, saving=host_compile, waste=host_compile)


class Memory:
    """What the history knows of the guesses for a compile's sources."""

    def __init__(self, known: Mapping[tuple[str, str, str], bool], rates: Mapping[str, tuple[int, int]],
                 details: Mapping[tuple[str, str, str], str] | None = None) -> None:  # fmt: skip
        self.known = known  # (source, guess, arch) -> did it hold last time
        self.rates = rates  # guess -> (sources it failed for, sources it was tried for)
        self.details = details or {}  # (source, guess, arch) -> what the outcome noted

    def failure(self, source: str, guess: str, arch: str = "") -> float:
        """The chance that ``guess`` fails for ``source`` (and ``arch``)."""
        held = self.known.get((source, guess, arch))
        if held is not None:
            return 0.0 if held else 1.0
        failed, tried = self.rates.get(guess, (0, 0))
        return (failed + PRIOR_FAILURE * PRIOR_WEIGHT) / (tried + PRIOR_WEIGHT)

    def predicted_module_id(self, source: str, arch: str, *, cwd: str) -> str | None:
        """The module_id a cicc of ``source`` may run on before cudafe++ ends: the last one,
        which carried cudafe++'s pid (PID_PLACE where it goes), if it was compiled in ``cwd``
        (the id's second hash follows the working directory: nvcc 13.0, the same source from
        two directories), unless a prediction failed."""
        detail = self.details.get((source, MODULE_ID, arch))
        if not detail or self.known.get((source, PREDICTED_MODULE_ID, arch)) is False:
            return None
        try:
            known = json.loads(detail)
        except ValueError:
            return None
        if not isinstance(known, dict) or known.get("cwd") != cwd or not isinstance(known.get("id"), str):
            return None
        return known["id"]


def module_id_detail(template: str, *, cwd: str) -> str:
    """What the history keeps of a module_id that carried its writer's pid."""
    return json.dumps({"cwd": cwd, "id": template})


NOTHING_KNOWN = Memory({}, {})
