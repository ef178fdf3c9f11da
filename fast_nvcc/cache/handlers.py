"""A per-step compile cache: cudafe++, cicc, ptxas and the host compile, each keyed on all it
depends on, with no daemon.  ``fast_nvcc cache stats|clear`` is its command line.

What a key covers, and why:

* the tool binary (real path, size, mtime) and nvcc's (its headers and libdevice come along);
* the command line, with temporary names normalised: nvcc's names change with every run and
  with the set of architectures (``-8_k.compute_80.cpp1.ii`` vs ``-7_k.cpp1.ii``).  For cicc,
  cudafe++ and ptxas every temp path becomes a numbered placeholder, because their outputs are
  text, where a name can be rewritten on the way back, or ptxas's cubin, which embeds none
  (measured).  The host compile embeds its input's name in the object (the STT_FILE symbol,
  debug info), so its names stay in the key and only the pid part (same length) is rewritten;
* the content of every file the step reads, the .cpp1.ii, the .ptx, the module_id, and for the
  host compile the stub and the .fatbin.c that the .cudafe1.cpp #includes;
* the plan's variables (but PATH: the tool is identified by its binary) and the caller's
  variables that change what a compiler does (LANG, CPATH, SOURCE_DATE_EPOCH, ...);
* the working directory, except for ptxas, whose only paths are temporary, and for a host
  compile none of whose options lets the object depend on it (below).

What a key leaves out, and why:

* how fast_nvcc's own output is captured (stdout and stderr apart, or one file as on a
  terminal): a report flag such as ``--summary ... 2>&1`` must not change any key.  The entry
  says how its output was captured; an entry captured apart replays onto one file unless one
  step wrote to both streams (their interleaving is lost), and one captured as one file
  replays apart only when it is empty.  Anything else is a miss, and the step's new entry
  replaces it;
* the host compile's object name (``-o a.o`` vs ``-o b.o``) and the working directory, unless
  one of its options lets them reach the object or make files named after it (``-g``,
  ``-gsplit-dwarf``, ``--coverage``, ``-fprofile-*``, ``-flto``, ``-save-temps``, gcc's ``-M``
  flags, ...: ``NAME_REACHES``; measured with gcc 12 in tests/test_cache.py).

Preprocessing always runs: its output is part of the key.  A hit writes the outputs and replays
the step's stdout and stderr, so warnings come back as they were.  Entries are written to a
temporary file and renamed, carry a BLAKE2 checksum, and a corrupt or unreadable entry is a miss
(and is removed), never a wrong object.  An SQLite index keeps sizes, last use and per-tool
hit/miss counts; past FAST_NVCC_CACHE_SIZE the least recently used entries go.

Keys are :mod:`.cache_keys`'s, the entries and their index :mod:`.cache_store`'s; this module
holds the cache's command line and the handlers through which the scheduler runs cached steps.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import replace

from .keys import KeyMaker, Prepared
from .store import DEFAULT_SIZE, StepCache
from ..errors import FastNvccError
from ..files import read_bytes
from ..learn.history import cache_directory

_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?", re.IGNORECASE)


class CacheError(FastNvccError):
    pass


def cache_enabled(env: Mapping[str, str], flag: bool) -> bool:
    return flag or env.get("FAST_NVCC_CACHE", "") not in ("", "0")


def parse_size(text: str) -> int:
    match = _SIZE.fullmatch(text.strip())
    if not match:
        raise CacheError(f"FAST_NVCC_CACHE_SIZE={text!r}: use a size such as 500M or 5G")
    number, unit = match.groups()
    return int(float(number) * 1024 ** "_KMGT".index(unit.upper() or "_"))


def open_cache(env: Mapping[str, str]) -> StepCache:
    size = env.get("FAST_NVCC_CACHE_SIZE")
    return StepCache(cache_directory(env), size_limit=parse_size(size) if size else DEFAULT_SIZE)


# -- fast_nvcc cache stats|clear -------------------------------------------------------------


def main(argv: Sequence[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="fast_nvcc cache", description="fast_nvcc's per-step compile cache")
    parser.add_argument("action", choices=("stats", "clear"))
    parser.add_argument("--json", action="store_true", help="stats as JSON")
    try:
        options = parser.parse_args(list(argv))
        cache = open_cache(os.environ)
    except CacheError as exc:
        print(f"fast_nvcc: error: {exc}", file=sys.stderr)
        return 2
    if options.action == "clear":
        cache.clear()
        print(f"cleared {cache.directory}")
        return 0
    stats = cache.stats()
    cache.close()
    if options.json:
        print(json.dumps(stats, indent=2))
        return 0
    print(f"cache directory  {stats['directory']}")
    print(f"entries          {stats['entries']}")
    print(f"size             {_human(stats['bytes'])} of {_human(stats['limit'])}")
    if stats["tools"]:
        print(f"\nsteps run with the step cache\n{'tool':12} {'hits':>8} {'misses':>8} {'hit rate':>9}")
        for tool, counts in stats["tools"].items():
            total = counts["hits"] + counts["misses"]
            rate = f"{100 * counts['hits'] / total:.0f}%" if total else "-"
            print(f"{tool:12} {counts['hits']:8d} {counts['misses']:8d} {rate:>9}")
    return 0


def _human(size: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.1f} {unit}" if unit != "B" else f"{size} B"
        size /= 1024
    return f"{size:.1f} GiB"


# -- the cached command, as the scheduler runs it ---------------------------------------------


def exec_handler(cache: StepCache, keys: KeyMaker, *, combined_output: bool):
    """A handler for plain commands that serves cacheable steps from ``cache`` and stores what
    they make; anything else runs as usual."""
    from ..run.scheduler import Handler, State, TaskRun

    def run_cached(run: TaskRun) -> None:
        task, record = run.task, run.record
        prepared = keys.prepare(task, combined_output=combined_output)
        if prepared is None:
            run.exec(task.argv)
            return
        captures = cache.fetch(prepared)
        if captures is not None:  # a hit: the outputs are restored; replay what it printed
            record.cached = True
            for fd, data in captures:
                run.capture(fd, data)
            run.finish(0)
            return
        record.cached = False
        run.exec(task.argv)
        if record.state is State.DONE:
            cache.store(prepared, [(fd, read_bytes(path)) for fd, path in record.captures])

    return Handler(run_cached)


class HostCache:
    """The step cache for a split host compile (hostsplit.run_front/run_back): the front's
    assembly, keyed on what cc1plus reads (the placeholder in place of the .fatbin.c), and the
    object, keyed as an unsplit host compile's once the real .fatbin.c is there."""

    def __init__(self, cache: StepCache, keys: KeyMaker, *, combined_output: bool) -> None:
        self.cache = cache
        self.keys = keys
        self.combined = combined_output
        self._prepared: dict[tuple[int, str], Prepared] = {}

    def fetch_assembly(self, run, assembly: str) -> list[tuple[int, str]] | None:
        """The assembly of a hit written to ``assembly``; cc1plus's output as capture files."""
        prepared = self.keys.prepare(run.task, combined_output=self.combined, assembly=assembly)
        if prepared is None:
            return None
        prepared = replace(prepared, tool="cc1plus")
        self._prepared[(run.task.id, "assembly")] = prepared
        captures = self.cache.fetch(prepared)
        run.record.cached = captures is not None
        if captures is None:
            return None
        paths = []
        for fd, data in captures:
            path = os.path.join(run.workdir, f"{run.task.id}cc1-cached.{fd}")
            with open(path, "wb") as handle:
                handle.write(data)
            paths.append((fd, path))
        return paths

    def store_assembly(self, run, captures: Sequence[tuple[int, str]]) -> None:
        prepared = self._prepared.get((run.task.id, "assembly"))
        if prepared is not None:
            self.cache.store(prepared, [(fd, read_bytes(path)) for fd, path in captures])

    def fetch_object(self, run) -> bool:
        """Serve the whole host compile (object restored, its output replayed); True on a hit."""
        prepared = self.keys.prepare(run.task, combined_output=self.combined)
        if prepared is None:
            return False
        self._prepared[(run.task.id, "object")] = prepared
        captures = self.cache.fetch(prepared)
        run.record.cached = captures is not None
        if captures is None:
            return False
        for fd, data in captures:
            run.capture(fd, data)
        run.finish(0)
        return True

    def store_object(self, run) -> None:
        from ..run.scheduler import State

        prepared = self._prepared.get((run.task.id, "object"))
        if prepared is not None and run.record.state is State.DONE:
            self.cache.store(prepared, [(fd, read_bytes(path)) for fd, path in run.record.captures])


def host_handlers(cache: StepCache, keys: KeyMaker, *, combined_output: bool):
    """The split host compile's two tasks, with the step cache (see HostCache)."""
    from ..graph.dag import Action
    from ..guess.host_split import run_back, run_front
    from ..run.scheduler import Handler

    host = HostCache(cache, keys, combined_output=combined_output)
    return {Action.HOST_FRONT: Handler(lambda run: run_front(run, host)),
            Action.HOST_BACK: Handler(lambda run: run_back(run, host))}  # fmt: skip
