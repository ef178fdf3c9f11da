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
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sqlite3
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from typing import TYPE_CHECKING

from .errors import FastNvccError
from .files import read_bytes, write_atomically
from .history import cache_directory

if TYPE_CHECKING:
    from .graph import Task

FORMAT = b"fast_nvcc step cache 1\n"
DEFAULT_SIZE = 5 * 1024**3
# By plan.Kind value (the plan module is imported only where keys are made).
CACHEABLE = {"cudafe++": "placeholders", "cicc": "placeholders", "ptxas": "placeholders", "host-compile": "exact"}
TEXT_KINDS = {"cudafe++", "cicc"}  # their outputs are C/PTX/module_id text
TEMP_TAG = re.compile(r"tmpxft_([0-9a-f]{8})_([0-9a-f]{8})")  # as plan.TEMP_TAG
# The caller's variables that change what the compilers do (the plan's own are keyed too).
# TMPDIR is not among them: the host compile's key holds its temp paths, the others' outputs
# get this run's paths written back.
ENVIRONMENT = ("LANG", "LC_ALL", "LC_CTYPE", "LC_MESSAGES", "CPATH", "C_INCLUDE_PATH",
               "CPLUS_INCLUDE_PATH", "GCC_EXEC_PREFIX", "COMPILER_PATH", "SOURCE_DATE_EPOCH")  # fmt: skip
TAG_PLACEHOLDER = b"tmpxft_@@@@@@@@_@@@@@@@@"
# Host-compiler options under which gcc's object depends on its own name or on the working
# directory, or gcc writes more files named after the object (measured with gcc 12: -o a.o
# and -o b.o give the same bytes without these; -g embeds the directory, -gsplit-dwarf the .dwo
# name, --coverage/-fprofile-* the .gcda name, -flto its own name).  -g0 turns -g off.
NAME_REACHES = ("-g", "-flto", "-fprofile", "--coverage", "-ftest-coverage", "-save-temps", "--save-temps",
                "-M", "-Wa,", "-Wp,", "-fdump", "-aux-info", "-fstack-usage", "-fcallgraph-info", "-fopt-info",
                "-dump", "-auxbase", "-fplugin", "-specs", "--specs", "-fdebug", "-ffile-prefix",
                "-fmacro-prefix", "-frandom-seed")  # fmt: skip
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


@dataclass(frozen=True, slots=True)
class Prepared:
    """What a cacheable task needs for a lookup and a store."""

    key: str
    tool: str
    outputs: tuple[str, ...]  # absolute paths
    names: tuple[tuple[bytes, bytes], ...]  # (current spelling, placeholder), longest first
    tag: bytes  # this run's tmpxft_<pid>_<n>
    text: bool
    combined: bool = False  # this run captures each step's stdout and stderr as one file

    def hiding(self) -> tuple[re.Pattern[bytes], dict[bytes, bytes]] | None:
        """One pattern for all of this run's names (longest first, so a name is never cut
        inside a longer one that contains it), for a single pass over a 10 MB .cudafe1.cpp."""
        if not self.names:
            return None
        return re.compile(b"|".join(re.escape(old) for old, _ in self.names)), dict(self.names)

    def showing(self) -> dict[bytes, bytes]:
        return {new: old for old, new in self.names}


class StepCache:
    def __init__(self, directory: str, *, size_limit: int = DEFAULT_SIZE) -> None:
        self.directory = directory
        self.entries = os.path.join(directory, "steps")
        self.size_limit = size_limit
        self._db: sqlite3.Connection | None = None
        self._lock = threading.Lock()  # steps finish on several threads; one connection

    # -- the index ------------------------------------------------------------------------

    def _index(self) -> sqlite3.Connection:
        if self._db is None:
            os.makedirs(self.entries, exist_ok=True)
            self._db = sqlite3.connect(os.path.join(self.directory, "cache-index.sqlite"), timeout=10.0,
                                       isolation_level=None, check_same_thread=False)  # fmt: skip
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute("CREATE TABLE IF NOT EXISTS entries (key TEXT PRIMARY KEY, tool TEXT, size INTEGER,"
                             " last_used REAL)")  # fmt: skip
            self._db.execute("CREATE TABLE IF NOT EXISTS counts (tool TEXT PRIMARY KEY, hits INTEGER, misses INTEGER)")
        return self._db

    def _count(self, tool: str, *, hit: bool) -> None:
        column = "hits" if hit else "misses"
        self._execute(
            f"INSERT INTO counts VALUES (?, ?, ?) ON CONFLICT (tool) DO UPDATE SET {column} = {column} + 1",
            (tool, int(hit), int(not hit)),
        )

    def _execute(self, sql: str, parameters: Sequence = ()) -> list:
        try:
            with self._lock:
                return self._index().execute(sql, parameters).fetchall()
        except (sqlite3.Error, OSError):
            return []  # a busy index costs statistics, never a compile

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    # -- entries --------------------------------------------------------------------------

    def entry_path(self, key: str) -> str:
        return os.path.join(self.entries, key[:2], key)

    def fetch(self, prepared: Prepared) -> list[tuple[int, bytes]] | None:
        """Restore the outputs of a hit and return its (fd, output) captures; None on a miss."""
        path = self.entry_path(prepared.key)
        payload = self._read_entry(path)
        if payload is None:
            self._count(prepared.tool, hit=False)
            return None
        header, files, captures = payload
        combined = bool(header.get("combined", False))
        if len(files) != len(prepared.outputs) or not replayable(captures, stored_combined=combined,
                                                                 combined=prepared.combined):  # fmt: skip
            self._discard(path, prepared.key)
            self._count(prepared.tool, hit=False)
            return None
        for output, data in zip(prepared.outputs, files):
            write_atomically(output, restore_names(data, prepared, text=prepared.text))
        self._count(prepared.tool, hit=True)
        self._execute("UPDATE entries SET last_used = ? WHERE key = ?", (time.time(), prepared.key))
        return [(fd, restore_names(data, prepared, text=True)) for fd, data in captures]

    def store(self, prepared: Prepared, captures: Sequence[tuple[int, bytes]]) -> None:
        try:
            files = [hide_names(read_bytes(output), prepared, text=prepared.text) for output in prepared.outputs]
        except OSError:
            return  # an output the step did not write after all: not worth caching
        hidden = [(fd, hide_names(data, prepared, text=True)) for fd, data in captures]
        self.write_blob(prepared.key, prepared.tool, files, hidden, {"combined": prepared.combined})

    def write_blob(self, key: str, tool: str, files: Sequence[bytes], captures: Sequence[tuple[int, bytes]],
                   extra: Mapping | None = None) -> bool:  # fmt: skip
        """One entry: files and captured output, with a header of ``extra`` fields."""
        header = json.dumps({
            **(extra or {}),
            "tool": tool,
            "files": [len(f) for f in files],
            "captures": [[fd, len(data)] for fd, data in captures],
        }).encode() + b"\n"  # fmt: skip
        body = header + b"".join(files) + b"".join(data for _, data in captures)
        blob = FORMAT + hashlib.blake2b(body, digest_size=32).hexdigest().encode() + b"\n" + body
        path = self.entry_path(key)
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            write_atomically(path, blob)
        except OSError:
            return False
        self._execute("INSERT OR REPLACE INTO entries VALUES (?, ?, ?, ?)", (key, tool, len(blob), time.time()))
        self.evict()
        return True

    def _read_entry(self, path: str):
        try:
            with open(path, "rb") as handle:
                blob = handle.read()
        except OSError:
            return None
        try:
            if not blob.startswith(FORMAT):
                raise ValueError("format")
            digest, body = blob[len(FORMAT) :].split(b"\n", 1)
            if hashlib.blake2b(body, digest_size=32).hexdigest().encode() != digest:
                raise ValueError("checksum")
            header_line, data = body.split(b"\n", 1)
            header = json.loads(header_line)
            files, offset = [], 0
            for size in header["files"]:
                files.append(data[offset : offset + size])
                offset += size
            captures = []
            for fd, size in header["captures"]:
                captures.append((int(fd), data[offset : offset + size]))
                offset += size
            if offset != len(data):
                raise ValueError("length")
            return header, files, captures
        except (ValueError, KeyError, TypeError):
            self._discard(path, os.path.basename(path))
            return None

    def _discard(self, path: str, key: str) -> None:
        try:
            os.remove(path)
        except OSError:
            pass
        self._execute("DELETE FROM entries WHERE key = ?", (key,))

    def evict(self) -> None:
        """Least recently used first, down to 90% of the limit once over it."""
        rows = self._execute("SELECT COALESCE(SUM(size), 0) FROM entries")
        total = rows[0][0] if rows else 0
        if total <= self.size_limit:
            return
        target = int(self.size_limit * 0.9)
        for key, size in self._execute("SELECT key, size FROM entries ORDER BY last_used"):
            if total <= target:
                break
            self._discard(self.entry_path(key), key)
            total -= size

    def stats(self) -> dict:
        entries = self._execute("SELECT COUNT(*), COALESCE(SUM(size), 0) FROM entries")
        count, size = entries[0] if entries else (0, 0)
        tools = {tool: {"hits": hits, "misses": misses}
                 for tool, hits, misses in self._execute("SELECT tool, hits, misses FROM counts ORDER BY tool")}  # fmt: skip
        return {"directory": self.directory, "entries": count, "bytes": size, "limit": self.size_limit,
                "tools": tools}  # fmt: skip

    def clear(self) -> None:
        self.close()
        shutil.rmtree(self.entries, ignore_errors=True)
        for name in ("cache-index.sqlite", "cache-index.sqlite-wal", "cache-index.sqlite-shm"):
            try:
                os.remove(os.path.join(self.directory, name))
            except OSError:
                pass


def replayable(captures: Sequence[tuple[int, bytes]], *, stored_combined: bool, combined: bool) -> bool:
    """May output captured one way be replayed onto streams arranged the other way?  Output
    kept as one file cannot be split again; output kept apart can be joined unless both
    streams hold something (their interleaving was not kept)."""
    if stored_combined == combined:
        return True
    written = {fd for fd, data in captures if data}
    if stored_combined:
        return not written
    return len(written) < 2


# -- keys ---------------------------------------------------------------------------------


class KeyMaker:
    """Computes the keys of one invocation's tasks."""

    def __init__(self, *, nvcc: str, plan_env: Mapping[str, str], assignments: Sequence[tuple[str, str]],
                 caller_env: Mapping[str, str], cwd: str, workdir: str, paths_by_key: Mapping[str, str]) -> None:  # fmt: skip
        self.cwd = cwd
        self.workdir = workdir.rstrip("/") + "/"
        self.path = plan_env.get("PATH")
        self.by_key = paths_by_key
        self._identities: dict[str, str] = {}
        variables = [(n, v) for n, v in assignments if n != "PATH"]
        variables += [(n, caller_env[n]) for n in ENVIRONMENT if n in caller_env]
        self.common = json.dumps({"format": FORMAT.decode(), "nvcc": self.identity(nvcc),
                                  "env": [(n, _normal(v)) for n, v in variables]})  # fmt: skip

    def identity(self, program: str) -> str:
        if program not in self._identities:
            path = program if os.sep in program else shutil.which(program, path=self.path) or program
            try:
                real = os.path.realpath(path)
                info = os.stat(real)
                self._identities[program] = f"{real}:{info.st_size}:{info.st_mtime_ns}"
            except OSError:
                self._identities[program] = program
        return self._identities[program]

    def prepare(self, task: Task, *, combined_output: bool = False, assembly: str | None = None) -> Prepared | None:
        """The key of ``task``; for a split host compile's front, of the ``assembly`` cc1plus
        writes from the placeholder .fatbin.c (hostsplit.py), which stands where the real one
        will be and is hashed as it."""
        from .graph import Action
        from .plan import Kind, output_paths, temp_mentions

        policy = CACHEABLE.get(task.step.kind.value)
        if policy is None or task.action not in (Action.EXEC, Action.HOST_FRONT, Action.HOST_BACK) or not task.argv:
            return None
        argv = list(task.argv)
        # A stub cicc writes to a private path (graph.early_stubs) is keyed as the one nvcc
        # names, so the entry serves the cicc whether or not the host compile is split.
        private_stub = _private_stub(task)
        if private_stub is not None and private_stub[1] in temp_mentions(task.step.argv):
            argv[argv.index(private_stub[0])] = private_stub[1]
        else:
            private_stub = None
        mentions = temp_mentions(argv)
        mentions += [w for w in argv if w.startswith(self.workdir) and w not in mentions]  # the private module_id
        names: list[tuple[bytes, bytes]] = []
        if policy == "placeholders":
            replacements = []
            for number, path in enumerate(mentions):
                replacements.append((path, f"@@FNT{number}@@"))
                base = os.path.basename(path)
                if base != path:
                    replacements.append((base, f"@@FNB{number}@@"))
            if private_stub is not None:  # the stub names itself: hidden as nvcc's name is
                replacements.append((private_stub[0], f"@@FNT{mentions.index(private_stub[1])}@@"))
            replacements.sort(key=lambda r: len(r[0]), reverse=True)
            names = [(old.encode(), new.encode()) for old, new in replacements]
            normal_argv = [_replace_all(word, replacements) for word in argv[1:]]
        else:
            normal_argv = [_normal(word) for word in argv[1:]]
        outputs = [os.path.join(self.cwd, p) for p in output_paths(task.step.kind, task.argv)]
        cwd: str | None = None if task.step.kind is Kind.PTXAS else self.cwd
        if task.step.kind is Kind.HOST_COMPILE and not name_reaches_object(argv):
            normal_argv = _without_output_name(normal_argv)
            cwd = None
        tag_match = TEMP_TAG.search(" ".join(argv))
        tag = tag_match.group(0).encode() if tag_match else b""
        inputs = []
        for key in sorted(task.reads):
            path = self.by_key.get(key, key)
            try:
                digest = _digest_file(path, tag)
            except OSError:
                return None  # a missing input: let the step run and say what is wrong
            label = _replace_all(path, [(o.decode(), n.decode()) for o, n in names]) if names else _normal(path)
            inputs.append((label, digest))
        material = json.dumps({
            "common": self.common,
            "tool": self.identity(argv[0]),
            "argv": normal_argv,
            "inputs": sorted(inputs),
            "outputs": len(outputs),
            "cwd": cwd,
            "part": "assembly" if assembly else "",
        })  # fmt: skip
        if assembly:
            outputs = [assembly]
        return Prepared(
            key=hashlib.blake2b(material.encode(), digest_size=20).hexdigest(),
            tool=task.step.tool,
            outputs=tuple(outputs),
            names=tuple(names),
            tag=tag,
            text=task.step.kind.value in TEXT_KINDS,
            combined=combined_output,
        )


def _private_stub(task: Task) -> tuple[str, str] | None:
    """(the stub path this cicc writes, the one nvcc's plan names) where the two differ."""
    from .graph import stub_path
    from .plan import Kind

    if task.step.kind is not Kind.CICC:
        return None
    ours, nvccs = stub_path(task.argv), stub_path(task.step.argv)
    return (ours, nvccs) if ours and nvccs and ours != nvccs else None


def name_reaches_object(argv: Sequence[str]) -> bool:
    """Does any of the host compile's options let the object depend on its name or the
    working directory (NAME_REACHES)?"""
    return any(word != "-g0" and word.startswith(NAME_REACHES) for word in argv[1:])


def _without_output_name(argv: list[str]) -> list[str]:
    """gcc's ``-o NAME`` with the name left out (``-oNAME`` too)."""
    result, skip = [], False
    for word in argv:
        if skip:
            result.append("@@OUTPUT@@")
            skip = False
        elif word == "-o":
            result.append(word)
            skip = True
        elif word.startswith("-o") and len(word) > 2:
            result.append("-o@@OUTPUT@@")
        else:
            result.append(word)
    return result


_PLACEHOLDER = re.compile(rb"@@FN[TB]\d+@@")


def hide_names(data: bytes, prepared: Prepared, *, text: bool) -> bytes:
    """This run's temp names out of an output, for storage.  Text gets every name replaced by
    its placeholder; binary output only the pid part of the names, which keeps the length."""
    hiding = prepared.hiding() if text else None
    if hiding is not None:
        pattern, table = hiding
        data = pattern.sub(lambda m: table[m.group(0)], data)
    return data.replace(prepared.tag, TAG_PLACEHOLDER) if prepared.tag else data


def restore_names(data: bytes, prepared: Prepared, *, text: bool) -> bytes:
    """This run's temp names into a stored output."""
    if prepared.tag:
        data = data.replace(TAG_PLACEHOLDER, prepared.tag)
    if text and prepared.names:
        table = prepared.showing()
        data = _PLACEHOLDER.sub(lambda m: table.get(m.group(0), m.group(0)), data)
    return data


def _replace_all(text: str, replacements: Sequence[tuple[str, str]]) -> str:
    for old, new in replacements:
        text = text.replace(old, new)
    return _normal(text)


def _normal(text: str) -> str:
    return TEMP_TAG.sub("tmpxft_@", text)


def _digest_file(path: str, tag: bytes) -> str:
    """The content's hash, with this run's temp tag normalised: fatbinary embeds its inputs'
    names and the .cudafe1.cpp #includes the stub by name, so the tag would make every run's
    key new."""
    data = read_bytes(path)
    if tag:
        data = data.replace(tag, TAG_PLACEHOLDER)
    return hashlib.blake2b(data, digest_size=20).hexdigest()


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
    from .scheduler import Handler, State, TaskRun

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
        from .scheduler import State

        prepared = self._prepared.get((run.task.id, "object"))
        if prepared is not None and run.record.state is State.DONE:
            self.cache.store(prepared, [(fd, read_bytes(path)) for fd, path in run.record.captures])


def host_handlers(cache: StepCache, keys: KeyMaker, *, combined_output: bool):
    """The split host compile's two tasks, with the step cache (see HostCache)."""
    from .graph import Action
    from .hostsplit import run_back, run_front
    from .scheduler import Handler

    host = HostCache(cache, keys, combined_output=combined_output)
    return {Action.HOST_FRONT: Handler(lambda run: run_front(run, host)),
            Action.HOST_BACK: Handler(lambda run: run_back(run, host))}  # fmt: skip
