"""The per-step cache on disk (:mod:`fast_nvcc.cache` says what it holds and why): the
entries, their SQLite index, and a step's outputs going in and coming back with this run's temp
names."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import threading
import time
from collections.abc import Mapping, Sequence

from ..files import read_bytes, write_atomically
from .keys import FORMAT, Prepared, hide_names, restore_names

DEFAULT_SIZE = 5 * 1024**3


class StepCache:
    """The per-step cache: a step's outputs and captured output, stored under its key with this
    run's temp names hidden (:mod:`.keys`), and restored on a hit."""

    def __init__(self, directory: str, *, size_limit: int = DEFAULT_SIZE) -> None:
        self.directory = directory
        self.entries = os.path.join(directory, "steps")
        self.size_limit = size_limit
        self.index = CacheIndex(directory, entries=self.entries)
        self.files = EntryFiles(self.entries, self.index, size_limit=size_limit)

    def fetch(self, prepared: Prepared) -> list[tuple[int, bytes]] | None:
        """Restore the outputs of a hit and return its (fd, output) captures; None on a miss."""
        path = self.files.entry_path(prepared.key)
        payload = self.files.read(path)
        if payload is None:
            self.index.count(prepared.tool, hit=False)
            return None
        header, files, captures = payload
        combined = bool(header.get("combined", False))
        if len(files) != len(prepared.outputs) or not replayable(captures, stored_combined=combined,
                                                                 combined=prepared.combined):  # fmt: skip
            self.files.discard(path, prepared.key)
            self.index.count(prepared.tool, hit=False)
            return None
        for output, data in zip(prepared.outputs, files):
            write_atomically(output, restore_names(data, prepared, text=prepared.text))
        self.index.count(prepared.tool, hit=True)
        self.index.execute("UPDATE entries SET last_used = ? WHERE key = ?", (time.time(), prepared.key))
        return [(fd, restore_names(data, prepared, text=True)) for fd, data in captures]

    def store(self, prepared: Prepared, captures: Sequence[tuple[int, bytes]]) -> None:
        try:
            files = [hide_names(read_bytes(output), prepared, text=prepared.text) for output in prepared.outputs]
        except OSError:
            return  # an output the step did not write after all: not worth caching
        hidden = [(fd, hide_names(data, prepared, text=True)) for fd, data in captures]
        self.files.write_blob(prepared.key, prepared.tool, files, hidden, {"combined": prepared.combined})

    def stats(self) -> dict:
        entries = self.index.execute("SELECT COUNT(*), COALESCE(SUM(size), 0) FROM entries")
        count, size = entries[0] if entries else (0, 0)
        tools = {tool: {"hits": hits, "misses": misses}
                 for tool, hits, misses in self.index.execute("SELECT tool, hits, misses FROM counts ORDER BY tool")}  # fmt: skip
        return {"directory": self.directory, "entries": count, "bytes": size, "limit": self.size_limit,
                "tools": tools}  # fmt: skip

    def clear(self) -> None:
        self.close()
        shutil.rmtree(self.entries, ignore_errors=True)
        self.index.remove()


    def close(self) -> None:
        self.index.close()


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


class EntryFiles:
    """The entries on disk, one file per key under ``steps/``: FORMAT, a BLAKE2 checksum, a
    JSON header, then the files' and the captured output's bytes.  Past the size limit the least
    recently used go."""

    def __init__(self, directory: str, index: CacheIndex, *, size_limit: int) -> None:
        self.directory = directory
        self.index = index
        self.size_limit = size_limit

    def entry_path(self, key: str) -> str:
        return os.path.join(self.directory, key[:2], key)

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
        self.index.execute("INSERT OR REPLACE INTO entries VALUES (?, ?, ?, ?)", (key, tool, len(blob), time.time()))
        self.evict()
        return True

    def read(self, path: str):
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
            self.discard(path, os.path.basename(path))
            return None

    def discard(self, path: str, key: str) -> None:
        try:
            os.remove(path)
        except OSError:
            pass
        self.index.execute("DELETE FROM entries WHERE key = ?", (key,))

    def evict(self) -> None:
        """Least recently used first, down to 90% of the limit once over it."""
        rows = self.index.execute("SELECT COALESCE(SUM(size), 0) FROM entries")
        total = rows[0][0] if rows else 0
        if total <= self.size_limit:
            return
        target = int(self.size_limit * 0.9)
        for key, size in self.index.execute("SELECT key, size FROM entries ORDER BY last_used"):
            if total <= target:
                break
            self.discard(self.entry_path(key), key)
            total -= size


class CacheIndex:
    """The SQLite index beside the entries: each entry's tool, size and last use, and per-tool
    hit and miss counts.  A busy or broken index costs statistics, never a compile."""

    def __init__(self, directory: str, *, entries: str) -> None:
        self.directory = directory
        self.entries = entries  # made with the index: entries go nowhere else
        self._db: sqlite3.Connection | None = None
        self._lock = threading.Lock()  # steps finish on several threads; one connection

    def _connect(self) -> sqlite3.Connection:
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

    def count(self, tool: str, *, hit: bool) -> None:
        column = "hits" if hit else "misses"
        self.execute(
            f"INSERT INTO counts VALUES (?, ?, ?) ON CONFLICT (tool) DO UPDATE SET {column} = {column} + 1",
            (tool, int(hit), int(not hit)),
        )

    def execute(self, sql: str, parameters: Sequence = ()) -> list:
        try:
            with self._lock:
                return self._connect().execute(sql, parameters).fetchall()
        except (sqlite3.Error, OSError):
            return []  # a busy index costs statistics, never a compile

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    def remove(self) -> None:
        for name in ("cache-index.sqlite", "cache-index.sqlite-wal", "cache-index.sqlite-shm"):
            try:
                os.remove(os.path.join(self.directory, name))
            except OSError:
                pass
