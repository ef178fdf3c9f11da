"""What fast_nvcc learned and no compile has used for a while goes away.

The cache directory (:func:`fast_nvcc.learn.history_place.cache_directory`) keeps, for each source and
working directory, a learned stub (:mod:`fast_nvcc.guess.learned_stub`, rewritten by every
compile of it) and rows of step costs and of the guesses' outcomes (:mod:`.history`, whose
``updated`` every compile sets).  A build directory removed, a source renamed, a project no
longer built: their entries would stay forever, and a machine that builds many build
directories (CI runners, one per branch) gathers one stub per source and directory.

So once a day at most (the ``pruned`` file's time), a compile as it ends removes the learned
stubs not rewritten for ``FAST_NVCC_KEEP_DAYS`` days (default :data:`fast_nvcc.settings.KEEP_DAYS`) and the
history's rows not updated for as long, and the temporary files a killed writer left there.
``FAST_NVCC_KEEP_DAYS=0`` keeps everything.  It never fails a compile: what cannot be read or
removed stays.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Mapping

from ..guess.learned_stub import FOLDER as STUBS
from ..settings import keep_days, switch
from .history import History
from .history_place import HISTORY_FILE, cache_directory

EVERY = 24 * 3600.0  # seconds between two prunings of one cache directory
MARKER = "pruned"  # its modification time: the last pruning


def keep_seconds(env: Mapping[str, str]) -> float | None:
    """How long an unused entry is kept (None: for ever), from FAST_NVCC_KEEP_DAYS."""
    days = keep_days(env)
    return days * 24 * 3600 if days > 0 else None


def prune_when_due(env: Mapping[str, str], *, now: float | None = None) -> None:
    """Prune ``env``'s cache directory if its last pruning is EVERY seconds old (or none was)."""
    keep = keep_seconds(env)
    if keep is None:
        return
    now = time.time() if now is None else now
    directory = cache_directory(env)
    marker = os.path.join(directory, MARKER)
    with contextlib.suppress(OSError, sqlite3.Error):
        try:
            if now - os.stat(marker).st_mtime < EVERY:
                return
        except FileNotFoundError:
            if not os.path.isdir(directory):
                return  # nothing learned yet
        with open(marker, "a"):
            os.utime(marker, (now, now))  # claimed: a peer ending now finds it fresh
        prune(directory, before=now - keep, history=switch(env, "FAST_NVCC_HISTORY"))


def prune(directory: str, *, before: float, history: bool = True) -> tuple[int, int]:
    """Remove the learned stubs (and leftover temporary files) under ``directory`` last written
    before ``before`` (Unix time), and the history's rows last updated before it: (stubs, rows)
    removed."""
    stubs = 0
    with contextlib.suppress(OSError), os.scandir(os.path.join(directory, STUBS)) as entries:
        for entry in entries:
            with contextlib.suppress(OSError):
                if entry.is_file(follow_symlinks=False) and entry.stat(follow_symlinks=False).st_mtime < before:
                    os.remove(entry.path)
                    stubs += 1
    rows = 0
    if history:
        path = os.path.join(directory, HISTORY_FILE)
        if os.path.exists(path):
            store = History(path)
            try:
                with contextlib.suppress(sqlite3.Error, OSError):
                    rows = store.forget(before=before)
            finally:
                store.close()
    return stubs, rows
