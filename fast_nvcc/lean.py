"""Where every core is busy and a compile is known to be light, nvcc runs it as it is.

fast_nvcc's own process costs a light compile about 0.1-0.25 s of cpu (its interpreter, the
imports, the plan, a fork per step and the run's bookkeeping: docs/benchmarks.md, 2026-12-08),
10-20% of what the compile's tools take, and nvcc -t0 spends nothing beyond its tools.  Running
a compile's steps side by side pays for that where cores are idle.  Where every core is busy
and ready steps wait for one, it buys nothing: the cores are the build's floor, and the cpu
fast_nvcc spends is cpu the tools lack.  So before anything else of fast_nvcc is imported, this
module looks (a few ``flock`` tries, one SQLite query: 10-50 ms with the interpreter's start)
and, where all of these hold, fast_nvcc becomes nvcc with the user's command line (``exec``), at
the nice of a compile with slack (:data:`fast_nvcc.run.niceness.NICE`, unless FAST_NVCC_NICE=0):

* the plain form, ``fast_nvcc -- ARGS`` or the launcher form ``fast_nvcc NVCC ARGS``, with none
  of fast_nvcc's options and no variable of fast_nvcc's but those of :data:`QUIET` (a log,
  ``--split``, the caches, ``--remote`` or a report each want fast_nvcc's own run);
* the machine-wide pool (not make's jobserver) has as many compiles running as it has slots
  (each keeps a step running: every core is busy), as their claims under ``work/`` tell
  (:mod:`fast_nvcc.machine.pool_files`), and those of the compiles run so under ``lean/``: such
  a compile posts one there, which nvcc holds (its lock is on a descriptor nvcc inherits), so
  that the compiles after it count it; the pool's rules read ``work/`` alone;
* the command compiles one ``.cu`` (``-c``) that the history knows (a cicc measured) as light:
  its learned steps add up to at most :data:`LIGHT_SECONDS`, the source is older than what was
  learned of it, and its steps' peak memory is small beside what the machine has free.

A compile run so leaves no FAST_NVCC_LOG record and teaches the history nothing (its costs stay
what fast_nvcc measured last time; an edit of the source sends the next compile through
fast_nvcc again).  Its objects, messages and exit code are nvcc's own, being nvcc's.
FAST_NVCC_LEAN=0 turns it off.
"""

from __future__ import annotations

import fcntl
import os
import sys
from collections import namedtuple
from collections.abc import Mapping, Sequence

# A compile whose learned steps add up to at most this many seconds (their wall times, one after
# another: what nvcc takes for it alone).  fast_nvcc's own 0.1-0.25 s is 2-5% of it; below it,
# its steps side by side save little of a compile's wall even where a core is idle.
LIGHT_SECONDS = 5.0
# The learned peak memory of the compile's steps, at most this share of the memory available
# per slot of the pool: the lean compile is not in the memory budget (fast_nvcc.machine.memory).
MEMORY_SHARE = 0.5
# fast_nvcc's variables a lean compile may see: where things are kept, and what it obeys.
QUIET = frozenset({
    "FAST_NVCC_LEAN", "FAST_NVCC_NICE", "FAST_NVCC_CACHE_DIR", "FAST_NVCC_POOL_DIR", "FAST_NVCC_POOL_SIZE",
    "FAST_NVCC_NVCC",
})  # fmt: skip
_OFF = ("0", "off", "no", "false")
_ON = ("", "1", "on", "yes", "true")
_SUBCOMMANDS = ("analyze", "cache", "history")  # (fast_nvcc.cli.SUBCOMMANDS)
WORK = ("work", "w-")  # the pool's compiles (fast_nvcc.machine.pool_files.WorkLeft's claims)
LEAN = ("lean", "l-")  # the compiles run so, one claim each


# (collections' named tuples, not typing's: typing's import would be a fifth of this path's cpu)
# What the history knows of a source: its steps' seconds added up, their highest peak (KiB), and
# when it was last written.
Learned = namedtuple("Learned", "seconds peak_kb updated")
# What the lean path saw, for lean_reason: how many compiles run on the pool; the source's
# Learned (None: no cicc of it in the history); its mtime; the memory free under the machine's
# and its cgroups' limits, in KiB (None: not looked at); the pool's size.
Look = namedtuple("Look", "compiles learned source_mtime available_kb pool_size")


def lean_reason(look: Look) -> str | None:
    """Why this compile goes to nvcc as it is, or None where fast_nvcc runs it."""
    if look.compiles < look.pool_size:
        return None  # a core may be idle: fast_nvcc's steps side by side use it
    learned = look.learned
    if learned is None or learned.seconds > LIGHT_SECONDS:
        return None
    if look.source_mtime is None or look.source_mtime >= learned.updated:
        return None  # edited since its costs were learned: fast_nvcc measures it again
    if look.available_kb is None or learned.peak_kb > MEMORY_SHARE * look.available_kb / max(1, look.pool_size):
        return None
    return (f"lean: {look.compiles} compiles on a pool of {look.pool_size}, a light compile"
            f" ({learned.seconds:.1f} s learned)")  # fmt: skip


def command_of(argv: Sequence[str], env: Mapping[str, str]) -> tuple[str, list[str]] | None:
    """The nvcc to run and its arguments, for a plain command line a lean compile may take; None
    for anything else (fast_nvcc's options, a subcommand, a variable that wants fast_nvcc's run)."""
    if not argv or argv[0] in _SUBCOMMANDS:
        return None
    if argv[0] == "--":
        given, args = None, list(argv[1:])
    elif argv[0].startswith("-"):
        return None  # fast_nvcc's own options
    else:
        given, args = argv[0], list(argv[1:])
    if any(name.startswith("FAST_NVCC_") and name not in QUIET for name in env):
        return None
    if env.get("FAST_NVCC_LEAN", "").strip().lower() not in _ON:
        return None  # off, or a value fast_nvcc's run says is wrong
    if env.get("FAST_NVCC_NICE", "").strip().lower() not in _ON + _OFF:
        return None
    if "--jobserver" in env.get("MAKEFLAGS", ""):
        return None  # make's jobserver: its tokens are the slots (fast_nvcc.machine.jobserver)
    nvcc = _find(given or env.get("FAST_NVCC_NVCC") or "nvcc", env)
    return (nvcc, args) if nvcc else None


def pool_size_of(env: Mapping[str, str]) -> int | None:
    """FAST_NVCC_POOL_SIZE, else the usable CPUs; None for a value fast_nvcc's run refuses (and
    says why: fast_nvcc.settings, which this path does not import)."""
    size = env.get("FAST_NVCC_POOL_SIZE", "").strip()
    if not size:
        return len(os.sched_getaffinity(0))
    return int(size) if size.isdigit() and int(size) > 0 else None


def source_of(args: Sequence[str]) -> str | None:
    """The one ``.cu`` a ``-c`` command line compiles, or None (several, none, or options that
    hide the command line: an options file, nvcc's own split)."""
    if "-c" not in args and "--compile" not in args:
        return None
    hidden = ("-optf", "--options-file", "-split-compile", "--split-compile")
    if any(a.split("=", 1)[0] in hidden for a in args):
        return None
    sources = [a for a in args if a.endswith(".cu") and not a.startswith("-")]
    return sources[0] if len(sources) == 1 else None


def running_compiles(directory: str) -> int:
    """How many compiles run on the pool: the live claims under ``work/`` (one per compile of
    fast_nvcc's own run: :class:`fast_nvcc.machine.pool_files.WorkLeft`) and ``lean/``."""
    from .machine.pool_place import live

    return sum(len(live(os.path.join(directory, folder), prefix)) for folder, prefix in (WORK, LEAN))


def claim_lean(directory: str) -> None:
    """Post this compile's claim under ``lean/``, locked on a descriptor that the exec of nvcc
    and nvcc's own steps inherit: it lives as long as they run (the next reader that can lock
    it removes it: :func:`fast_nvcc.machine.pool_place.is_live`).  Locked under a hidden name,
    then shown, as :class:`fast_nvcc.machine.pool_files.Claim` does: a reader that could lock it
    would take its owner for dead."""
    folder = os.path.join(directory, LEAN[0])
    os.makedirs(folder, mode=0o700, exist_ok=True)
    hidden = os.path.join(folder, f".new-{os.getpid()}")
    fd = os.open(hidden, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    os.set_inheritable(fd, True)  # (Python opens them close-on-exec: nvcc keeps this one)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.rename(hidden, os.path.join(folder, f"{LEAN[1]}{os.getpid()}"))


def learned_of(history: str, source: str) -> Learned | None:
    """The history's costs of ``source`` (fast_nvcc.learn.history's ``costs`` table), where it
    holds a cicc of it."""
    import sqlite3  # (here: only a compile on a full machine pays its import)

    if not os.path.exists(history):
        return None
    try:
        db = sqlite3.connect(history, timeout=1.0)  # (read only; it exists: nothing is created)
        try:
            rows = db.execute("SELECT tool, seconds, rss_kb, updated FROM costs WHERE source = ?",
                              (source,)).fetchall()  # fmt: skip
        finally:
            db.close()
    except sqlite3.Error:
        return None
    if not any(tool == "cicc" for tool, *_ in rows):
        return None
    return Learned(sum(s or 0.0 for _, s, _, _ in rows), max(r or 0 for _, _, r, _ in rows),
                   max(u or 0.0 for *_, u in rows))  # fmt: skip


def exec_if_lean(argv: Sequence[str], env: Mapping[str, str] = os.environ) -> int | None:
    """Become nvcc where :func:`lean_reason` says so.  Otherwise None, also where a file could
    not be read or nvcc could not be started (fast_nvcc's run then says why); 70 after one line
    on a bug of this path, as fast_nvcc.cli answers its own."""
    try:
        _exec_if_lean(argv, env)
    except (OSError, ValueError):
        return None
    except Exception as exc:
        print(f"fast_nvcc: internal error: {type(exc).__name__}: {exc} (FAST_NVCC_LEAN=0 skips the lean path)",
              file=sys.stderr)  # fmt: skip
        return 70  # EX_SOFTWARE
    return None


def _exec_if_lean(argv: Sequence[str], env: Mapping[str, str]) -> None:
    command = command_of(argv, env)
    if command is None:
        return
    nvcc, args = command
    source = source_of(args)
    if source is None:
        return
    from .machine.pool_place import pool_directory

    pool_size = pool_size_of(env)
    if pool_size is None:
        return
    directory = pool_directory(env)
    compiles = running_compiles(directory)
    if compiles < pool_size:
        return
    from .learn.history_place import history_path

    path = os.path.join(os.getcwd(), source)
    history = history_path(env)
    try:
        mtime: float | None = os.stat(path).st_mtime
    except OSError:
        mtime = None
    learned = learned_of(history, path)
    look = Look(compiles, learned, mtime, _available_kb() if learned is not None else None, pool_size)
    if lean_reason(look) is None:
        return
    claim_lean(directory)  # held by nvcc from here on
    if env.get("FAST_NVCC_NICE", "").strip().lower() not in _OFF:
        from .run.niceness import NICE

        os.nice(NICE)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(nvcc, [nvcc, *args])


def _find(name: str, env: Mapping[str, str]) -> str | None:
    """``name`` as nvcc's path: as given where it has a slash, else the first on PATH; None where
    it is not an executable or is fast_nvcc itself (fast_nvcc.plan.toolchain says so properly)."""
    candidates = [name] if os.sep in name else [os.path.join(d, name) for d in env.get("PATH", "").split(os.pathsep) if d]
    for path in candidates:
        if os.path.isfile(path) and os.access(path, os.X_OK):
            try:
                if os.path.samefile(path, sys.argv[0]):
                    return None
            except OSError:
                pass
            return path
    return None


def _available_kb() -> int | None:
    """What is free under the machine's memory and every memory cgroup this process sits in
    (fast_nvcc.machine.headroom, as the memory budget reads it), in KiB."""
    from .machine.headroom import read_headroom, this_process_cgroups

    return read_headroom(this_process_cgroups()).free // 1024
