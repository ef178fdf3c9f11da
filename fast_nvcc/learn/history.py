"""What each step cost last time, to schedule the next compile: seconds and peak memory per
(source, tool, architecture), in an SQLite file shared by all fast_nvcc processes of the user.

A step never seen before borrows the average of its (tool, architecture) over every source,
then of its tool, then a per-tool default (and a first guess per architecture,
:func:`arch_weight`): what matters to critical-path-first scheduling is the
ratio between cudafe++, cicc and the host compile, and that ratio is much the same across the
sources of one project on one machine.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import sys
import time
from collections.abc import Iterable, Mapping
from typing import NamedTuple

from ..guess.decisions import NOTHING_KNOWN, Memory, Outcome
from ..plan.dryrun import Kind
from .history_place import history_path

# First-run guesses, in seconds and MiB: Thrust/CUB-sized sources on a current x86 machine
# (nvcc --time on the 16-core machine: cicc 6-9 s, host compile 4 s, cudafe++ 3-4 s,
# each preprocessing 1.3 s, ptxas 1-2 s; cicc peaks near 800 MB).  cudafe++ and the host
# compile sit a little above those: heavy.cu on 2 cores took 3.9-4.5 s and 5.7-7.1 s, and a
# template library's host side is as heavy as a cicc (CUTLASS: cudafe++ 2.8-16.6 s, the host
# compile 2.7-13.5 s, cicc for sm_80 4-39 s).
DEFAULT_SECONDS: Mapping[Kind, float] = {
    Kind.PREPROCESS: 1.3,
    Kind.CUDAFE: 4.5,
    Kind.CICC: 8.0,
    Kind.PTXAS: 1.4,
    Kind.FATBINARY: 0.1,
    Kind.NVLINK: 0.5,
    Kind.HOST_COMPILE: 5.5,
    Kind.LINK: 1.0,
    Kind.ARCHIVE: 0.2,
    Kind.DEPFILE: 0.05,
    Kind.REMOVE: 0.0,
    Kind.OTHER: 0.5,
}
DEFAULT_MIB: Mapping[Kind, int] = {
    Kind.PREPROCESS: 170,
    Kind.CUDAFE: 650,
    Kind.CICC: 800,
    Kind.PTXAS: 100,
    Kind.FATBINARY: 30,
    Kind.NVLINK: 200,
    Kind.HOST_COMPILE: 450,
    Kind.LINK: 300,
    Kind.ARCHIVE: 20,
    Kind.DEPFILE: 0,
    Kind.REMOVE: 0,
    Kind.OTHER: 100,
}
SMOOTHING = 0.5  # weight of the newest measurement


class Cost(NamedTuple):
    """What a step is expected to take: its seconds and its peak memory."""

    seconds: float  # on one core: a split step's (-split-compile N) is its cpu
    rss_kb: int
    # A split step's serial share: of its seconds, those its threads ran one at a time, which no
    # core shortens (cicc's front end and tail; None: never measured split, take the tool's).
    serial: float | None = None


# The back of a split host compile: as on the assembly (measured 0.1-0.3 s).
ASSEMBLE = Cost(0.2, 100 * 1024)


class Measurement(NamedTuple):
    """One step's measured cost, as the history stores it per source, tool and architecture."""

    source: str
    tool: str
    arch: str
    seconds: float
    rss_kb: int
    serial: float | None = None  # a split step's serial share (Cost.serial)




class History:
    def __init__(self, path: str) -> None:
        self.path = path
        self._db: sqlite3.Connection | None = None

    def _connect(self) -> sqlite3.Connection:
        if self._db is None:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            self._db = sqlite3.connect(self.path, timeout=5.0, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS costs (source TEXT, tool TEXT, arch TEXT,"
                " seconds REAL, rss_kb INTEGER, runs INTEGER, updated REAL,"
                " PRIMARY KEY (source, tool, arch))"
            )
            columns = {row[1] for row in self._db.execute("PRAGMA table_info(costs)")}
            if "serial" not in columns:  # a history written before split steps' shares were learned
                with contextlib.suppress(sqlite3.OperationalError):  # (a peer added it a moment ago)
                    self._db.execute("ALTER TABLE costs ADD COLUMN serial REAL")
            # How fast_nvcc's guesses went per source (fast_nvcc.guess.decisions): the last outcome,
            # why it failed, the seconds it lost then.
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS guesses (source TEXT, guess TEXT, arch TEXT,"
                " held INTEGER, why TEXT, lost REAL, detail TEXT, updated REAL,"
                " PRIMARY KEY (source, guess, arch))"
            )
        return self._db

    def lookup(self, sources: Iterable[str]) -> dict[tuple[str, str, str], Cost]:
        """Known costs for these sources, plus averages under source '' (per tool and arch) and
        source '*' with arch '' (per tool)."""
        try:
            db = self._connect()
            rows = _rows_of(db, "SELECT source, tool, arch, seconds, rss_kb, serial FROM costs", sources)
            result = {(s, t, a): Cost(sec, rss, share) for s, t, a, sec, rss, share in rows}
            for tool, arch, sec, rss, share in db.execute(
                "SELECT tool, arch, AVG(seconds), MAX(rss_kb), AVG(serial) FROM costs GROUP BY tool, arch"
            ):
                result[("", tool, arch)] = Cost(sec, rss, share)
            for tool, sec, rss, share in db.execute(
                "SELECT tool, AVG(seconds), MAX(rss_kb), AVG(serial) FROM costs GROUP BY tool"
            ):
                result[("*", tool, "")] = Cost(sec, rss, share)
            return result
        except (sqlite3.Error, OSError):
            return {}  # an unreadable history only costs scheduling quality

    def guesses(self, sources: Iterable[str]) -> Memory:
        """What is known of the guesses for these sources, and how often each kind of guess
        failed over every source known."""
        try:
            db = self._connect()
            rows = _rows_of(db, "SELECT source, guess, arch, held, detail FROM guesses", sources)
            rates = {guess: (int(failed or 0), int(tried)) for guess, failed, tried in db.execute(
                "SELECT guess, COUNT(DISTINCT CASE WHEN held = 0 THEN source END), COUNT(DISTINCT source)"
                " FROM guesses GROUP BY guess")}  # fmt: skip
            return Memory({(s, g, a): bool(h) for s, g, a, h, _ in rows}, rates,
                          {(s, g, a): d for s, g, a, _, d in rows if d})  # fmt: skip
        except (sqlite3.Error, OSError):
            return NOTHING_KNOWN

    def record_guesses(self, outcomes: Iterable[Outcome]) -> None:
        now = time.time()
        self._write([("INSERT OR REPLACE INTO guesses VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                      (o.source, o.guess, o.arch, int(o.held), o.why, o.lost, o.detail, now)) for o in outcomes])  # fmt: skip

    def _write(self, statements: list[tuple[str, tuple]]) -> None:
        """Run ``statements`` in one transaction; a busy or broken history only costs
        scheduling quality (or a guess taken again), never the compile."""
        if not statements:
            return
        try:
            db = self._connect()
            db.execute("BEGIN IMMEDIATE")
            for statement, values in statements:
                db.execute(statement, values)
            db.execute("COMMIT")
        except (sqlite3.Error, OSError):
            pass

    def record(self, measurements: Iterable[Measurement]) -> None:
        now = time.time()
        self._write([(
            "INSERT INTO costs VALUES (?, ?, ?, ?, ?, 1, ?, ?) ON CONFLICT (source, tool, arch) DO UPDATE SET"
            " seconds = ? * excluded.seconds + (1 - ?) * seconds,"
            " rss_kb = MAX(excluded.rss_kb, rss_kb), runs = runs + 1, updated = excluded.updated,"
            # smoothed where both are known (NULL arithmetic), else whichever is
            " serial = COALESCE(? * excluded.serial + (1 - ?) * serial, excluded.serial, serial)",
            (m.source, m.tool, m.arch, m.seconds, m.rss_kb, now, m.serial, SMOOTHING, SMOOTHING, SMOOTHING,
             SMOOTHING),
        ) for m in measurements])  # fmt: skip

    def export_rows(self, *, root: str) -> list[dict]:
        """The learned costs of the sources under ``root``, relative to it (so that another
        checkout of the project, elsewhere, finds them).  The history is the user's, shared by
        every project built on the machine: other projects' sources stay out of the export."""
        db = self._connect()
        rows = db.execute(
            "SELECT source, tool, arch, seconds, rss_kb, runs, serial FROM costs ORDER BY source, tool, arch")
        return [{"source": relative, "tool": tool, "arch": arch, "seconds": seconds, "rss_kb": rss_kb, "runs": runs,
                 **({} if serial is None else {"serial": serial})}
                for source, tool, arch, seconds, rss_kb, runs, serial in rows
                if (relative := _under(source, root)) is not None]  # fmt: skip

    def export_guesses(self, *, root: str) -> list[dict]:
        """The last outcome of each guess, for the sources under ``root`` as in :meth:`export_rows`."""
        db = self._connect()
        rows = db.execute(
            "SELECT source, guess, arch, held, why, lost, detail FROM guesses ORDER BY source, guess, arch")
        return [{"source": relative, "guess": guess, "arch": arch, "held": bool(held), "why": why, "lost": lost,
                 "detail": detail} for source, guess, arch, held, why, lost, detail in rows
                if (relative := _under(source, root)) is not None]  # fmt: skip

    def import_guesses(self, rows: Iterable[Mapping], *, root: str) -> int:
        """Add exported outcomes; what this machine learned itself stays."""
        return self._import(
            "INSERT OR IGNORE INTO guesses VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows, root=root,
            values=lambda row, now: (str(row["guess"]), str(row["arch"]), int(bool(row["held"])),
                                     str(row.get("why", "")), float(row.get("lost", 0.0)),
                                     str(row.get("detail") or ""), now),
        )  # fmt: skip

    def import_rows(self, rows: Iterable[Mapping], *, root: str) -> int:
        """Add exported costs, relative sources under ``root``; what this machine learned
        itself stays.  Returns how many were added."""
        return self._import(
            "INSERT OR IGNORE INTO costs VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows, root=root,
            values=lambda row, now: (str(row["tool"]), str(row["arch"]), float(row["seconds"]), int(row["rss_kb"]),
                                     int(row.get("runs", 1)), now,
                                     None if row.get("serial") is None else float(row["serial"])),
        )  # fmt: skip

    def _import(self, insert: str, rows: Iterable[Mapping], *, root: str, values) -> int:
        """One transaction of ``insert`` per row (its source made absolute under ``root``, then
        ``values(row, now)``); how many rows were new."""
        db = self._connect()
        now, added = time.time(), 0
        db.execute("BEGIN IMMEDIATE")
        try:
            for row in rows:
                source = row["source"] if os.path.isabs(row["source"]) else os.path.join(root, row["source"])
                added += db.execute(insert, (source, *values(row, now))).rowcount
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return added

    def forget(self, *, before: float) -> int:
        """Remove the costs and guesses no compile has updated since ``before`` (Unix time): a
        source removed or renamed, a build directory gone.  Returns how many rows went."""
        gone = 0
        db = self._connect()
        for table in ("costs", "guesses"):
            gone += db.execute(f"DELETE FROM {table} WHERE updated < ?", (before,)).rowcount
        return gone

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None


def estimate(
    known: Mapping[tuple[str, str, str], Cost], *, source: str, tool: str, arch: str, kind: Kind,
    default: Cost | None = None,
) -> Cost:
    for key in ((source, tool, arch), ("", tool, arch), ("*", tool, "")):
        cost = known.get(key)
        if cost is not None:
            return cost
    if default is not None:
        return default
    return Cost(DEFAULT_SECONDS[kind] * arch_weight(arch), DEFAULT_MIB[kind] * 1024)


def arch_weight(arch: str) -> float:
    """How much more a device step for ``arch`` is guessed to cost than the per-tool default,
    before anything is known: twice for an architecture-specific target (``sm_90a``,
    ``compute_100f``), where libraries keep the kernels that only that chip runs
    (docs/benchmarks.md); and, as a tie-break, a newer architecture before an older one, since
    more code is compiled under ``__CUDA_ARCH__ >= N``.  So on a first build a compile runs its
    likely longest cicc first."""
    digits = "".join(c for c in arch if c.isdigit())
    if not digits:
        return 1.0
    specific = 2.0 if arch[-1:] in ("a", "f") else 1.0
    return specific * (1.0 + int(digits) / 10000)


def _rows_of(db: sqlite3.Connection, select: str, sources: Iterable[str]) -> list[tuple]:
    """``select``'s rows whose source is one of ``sources``."""
    wanted = list(dict.fromkeys(sources))
    if not wanted:
        return []
    return db.execute(f"{select} WHERE source IN ({','.join('?' * len(wanted))})", wanted).fetchall()


def _under(source: str, root: str) -> str | None:
    """``source`` relative to ``root`` if it lies under it, else None (another project's
    source, or none: a link's steps work for no one source)."""
    if not os.path.isabs(source):
        return None
    relative = os.path.relpath(source, root)
    return None if relative == os.curdir or relative.split(os.sep, 1)[0] == os.pardir else relative


# -- fast_nvcc history export|import ---------------------------------------------------------


def build_parser():
    """``fast_nvcc history``'s options (docs/options.md names each: tests/test_options_doc.py)."""
    import argparse

    parser = argparse.ArgumentParser(prog="fast_nvcc history", description=main.__doc__)
    parser.add_argument("action", choices=("export", "import"))
    parser.add_argument("file", help="the JSON file ('-': standard output or input)")
    parser.add_argument("--root", default=os.getcwd(),
                        help="export: only the sources under this directory, relative to it; import: relative"
                        " sources are made absolute under it (default: here)")  # fmt: skip
    return parser


def main(argv: Iterable[str]) -> int:
    """Carry learned costs to another machine or a CI runner's next build: ``export`` writes
    those of the sources under --root as JSON, relative to it; ``import`` adds them to this
    machine's."""
    options = build_parser().parse_args(list(argv))
    root = os.path.abspath(options.root)
    history = History(history_path(os.environ))
    try:
        if options.action == "export":
            document = {"version": 1, "costs": history.export_rows(root=root),
                        "guesses": history.export_guesses(root=root)}  # fmt: skip
            text = json.dumps(document, indent=1) + "\n"
            if options.file == "-":
                sys.stdout.write(text)
            else:
                with open(options.file, "w", encoding="utf-8") as handle:
                    handle.write(text)
            return 0
        with sys.stdin if options.file == "-" else open(options.file, encoding="utf-8") as handle:
            document = json.load(handle)
        if not isinstance(document, dict) or document.get("version") != 1:
            raise ValueError("not a fast_nvcc history export (version 1)")
        added = history.import_rows(document["costs"], root=root)
        print(f"{added} of {len(document['costs'])} costs added to {history.path}")
        guesses = document.get("guesses", [])
        if guesses:
            added = history.import_guesses(guesses, root=root)
            print(f"{added} of {len(guesses)} guesses' outcomes added")
        return 0
    except (OSError, sqlite3.Error, ValueError, KeyError, TypeError) as exc:
        print(f"fast_nvcc: error: history {options.action}: {exc}", file=sys.stderr)
        return 1
    finally:
        history.close()
