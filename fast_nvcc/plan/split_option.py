"""``--split N``: nvcc's ``--split-compile N`` added to the compiles the user names.

An opt-in for users who accept nvcc's split output: cicc and ptxas then optimize in N threads,
which the pool widens onto idle cores while the step runs (:mod:`fast_nvcc.run.core_grants`).
The objects are exactly those of ``nvcc --split-compile N`` for the same command line: the flag
depends on the command line and the patterns only, never on timing or history.  N=0 (nvcc's
"every CPU") is refused: it would make the object depend on the machine.

* ``--split N`` / ``FAST_NVCC_SPLIT=N``: every compile of a CUDA source;
* ``--split-sources PATTERNS`` / ``FAST_NVCC_SPLIT_SOURCES``: only sources matching one of the
  comma-separated globs; a pattern with a ``/`` matches the source's absolute path (``*`` spans
  folders), one without matches its file name (``*_grouped.cu``);
* ``--split-sources @FILE`` (also in the environment): the patterns from FILE, one per line
  (commas allowed; blank lines and ``#`` lines ignored), as ``fast_nvcc analyze --write-split``
  writes them (:func:`split_file`); a relative FILE is taken from this process's directory.
  A file with no pattern splits no compile.

A command line that sets ``--split-compile`` itself keeps its own.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Mapping, Sequence

from ..errors import FastNvccError
from ..settings import count
from . import nvcc_args

# What nvcc compiles for the device: other inputs (objects, .cpp) get no split.
CUDA_SUFFIXES = (".cu", ".CU")

# The share of a split step's time that its threads do not shorten (cicc's front end), by tool:
# split onto k cores, a step of t seconds takes about t * (s + (1 - s) / k).  Measured on 16
# cores, TransformerEngine's cast_grouped.cu, sm_90 (docs/benchmarks.md); analyze's model and the
# ranks of split steps' cores (fast_nvcc.run.core_grants) both use it.
SERIAL_SHARE = {"cicc": 0.37, "ptxas": 0.16}


# A split step's own serial share is read from steps this long at least: ten of its grant's looks
# (fast_nvcc.run.holdings.Holdings.GRANTS_POLL), which count its threads a tenth of a second
# apart; a 0.2 s split cicc on 2 cores logged 0.00 s one thread at a time.
MEASURED_SECONDS = 1.0


def measured_share(serial_seconds: float, cpu_seconds: float, *, seconds: float) -> float | None:
    """A split step's own serial share, as it ran: the seconds its threads ran one at a time
    (FAST_NVCC_LOG's ``serial_seconds``) over its cpu, what one core would take; None for a step
    of ``seconds`` under MEASURED_SECONDS, of which the looks saw next to nothing, whatever its
    threads did.  The cost history learns it, and analyze reads it from the log."""
    if seconds < MEASURED_SECONDS or cpu_seconds <= 0:
        return None
    return min(1.0, serial_seconds / cpu_seconds)


def settings(split: int | None, sources: str | None, env: Mapping[str, str], *,
             cwd: str | None = None) -> tuple[int | None, tuple[str, ...]]:  # fmt: skip
    """The thread count and the patterns, from the options or else the environment; ``(None,
    ())`` where an ``@FILE`` holds no pattern (no compile is split)."""
    if split is None:
        split = count(env, "FAST_NVCC_SPLIT")
    where = "--split-sources"
    if sources is None:
        where, sources = "FAST_NVCC_SPLIT_SOURCES", env.get("FAST_NVCC_SPLIT_SOURCES") or None
    lines = [sources or ""]
    from_file = lines[0].startswith("@")
    if from_file:
        text = _read_file(lines[0][1:], where, cwd=os.getcwd() if cwd is None else cwd)
        lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    patterns = tuple(p.strip() for line in lines for p in line.split(",") if p.strip())
    if patterns and split is None:
        raise FastNvccError("--split-sources (FAST_NVCC_SPLIT_SOURCES) needs --split N (FAST_NVCC_SPLIT)")
    if from_file and not patterns:
        return None, ()  # an empty list: nothing to split (an empty pattern list means "all")
    return split, patterns


def _read_file(name: str, where: str, *, cwd: str) -> str:
    path = os.path.join(cwd, name)  # an absolute name stays as it is
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        why = getattr(exc, "strerror", None) or str(exc)
        raise FastNvccError(f"{where} @{name}: cannot read {path}: {why}") from None


def split_file(names: Sequence[str], header: Sequence[str]) -> str:
    """The text of a ``--split-sources @FILE`` that names exactly these file names: the
    ``header`` lines as ``#`` comments, then one pattern a line (what :func:`settings` reads)."""
    return "".join(f"# {line}\n" for line in header) + "".join(f"{literal(name)}\n" for name in names)


def literal(name: str) -> str:
    """A pattern that matches ``name``: its glob characters and a leading ``#`` in brackets, as
    fnmatch reads them (``a[1].cu`` -> ``a[[]1].cu``); a comma, which would part the line, ``?``."""
    pattern = re.sub(r"([*?\[])", r"[\1]", name).replace(",", "?")
    return f"[#]{pattern[1:]}" if pattern.startswith("#") else pattern


def with_split(args: Sequence[str], threads: int | None, patterns: Sequence[str], *,
               env: Mapping[str, str], cwd: str) -> list[str]:  # fmt: skip
    """``args`` with ``--split-compile threads`` added where the user asked for it."""
    if threads is None or threads < 2:
        return list(args)
    try:
        effective = nvcc_args.effective_args(args, env, cwd=cwd)
    except (OSError, ValueError):
        return list(args)  # nvcc gets them as they are, and says what is wrong
    options = list(nvcc_args.iter_options(effective))
    if any(o.name == "--split-compile" for o in options):
        return list(args)
    sources = [o.name for o in options if o.value is None and o.name.endswith(CUDA_SUFFIXES)]
    if not sources:
        return list(args)
    if patterns and not any(matches(p, os.path.join(cwd, s)) for p in patterns for s in sources):
        return list(args)
    return [*args, "--split-compile", str(threads)]


def matches(pattern: str, path: str) -> bool:
    """Does ``pattern`` name the source at the absolute ``path``?"""
    path = os.path.normpath(path)
    if "/" in pattern:
        return fnmatch.fnmatchcase(path, pattern) or fnmatch.fnmatchcase(path, f"*/{pattern.lstrip('/')}")
    return fnmatch.fnmatchcase(os.path.basename(path), pattern)


_SPLIT = re.compile(r"-split-compile(?:-extended)?(?:=(\d+))?")


def split_threads(argv: Sequence[str], *, machine_cpus: int | None = None) -> int | None:
    """How many threads a step optimizes in: its last ``-split-compile N`` (cicc, nvlink),
    ``-split-compile=N`` (ptxas) or ``-split-compile-extended N`` (nvlink); N=0 is every CPU of
    the machine, as cicc counts them.  None: not a split step (or N=1)."""
    found: int | None = None
    for index, word in enumerate(argv):
        match = _SPLIT.fullmatch(word)
        if match is None:
            continue
        value = match.group(1)
        if value is None and index + 1 < len(argv) and argv[index + 1].isdigit():
            value = argv[index + 1]
        if value is not None:
            count = int(value)
            found = count if count > 0 else (machine_cpus or os.cpu_count() or 1)
    return found if found is not None and found > 1 else None
