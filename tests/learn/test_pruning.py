"""What no compile used for FAST_NVCC_KEEP_DAYS goes (fast_nvcc/learn/pruning.py): learned stubs
not rewritten and history rows not updated for that long, once a day at most; real files, a
real sqlite history, and one real compile that prunes as it ends."""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path

import pytest
from helpers import assert_same, compare

from fast_nvcc.learn.history import History, Measurement
from fast_nvcc.learn.pruning import EVERY, MARKER, prune_when_due
from fast_nvcc.settings import KEEP_DAYS

DAY = 24 * 3600.0


def aged(path: Path, days: float, *, now: float) -> Path:
    os.utime(path, (now - days * DAY, now - days * DAY))
    return path


def cache(tmp_path: Path, *, now: float) -> Path:
    """A cache directory as compiles leave it: two learned stubs (one unused for 90 days), a
    writer's leftover temporary file, and the history of two sources (one not built for 90 days)."""
    assert 1 < KEEP_DAYS < 90  # (what the ages below are chosen around)
    directory = tmp_path / "cache"
    stubs = directory / "learned-stubs"
    stubs.mkdir(parents=True)
    (stubs / "fresh.json").write_text("{}")
    aged(stubs / "fresh.json", 1, now=now)
    (stubs / "old.json").write_text("{}")
    aged(stubs / "old.json", 90, now=now)
    (stubs / ".fast_nvcc-leftover").write_text("")
    aged(stubs / ".fast_nvcc-leftover", 90, now=now)
    history = History(str(directory / "history.sqlite"))
    history.record([Measurement("/p/new.cu", "cicc", "compute_90", 10.0, 1000),
                    Measurement("/p/gone.cu", "cicc", "compute_90", 20.0, 1000)])  # fmt: skip
    history.close()
    with sqlite3.connect(directory / "history.sqlite") as db:
        db.execute("UPDATE costs SET updated = ? WHERE source = '/p/gone.cu'", (now - 90 * DAY,))
    return directory


def sources_known(directory: Path) -> set[str]:
    with sqlite3.connect(directory / "history.sqlite") as db:
        return {source for (source,) in db.execute("SELECT source FROM costs")}


def test_a_compile_prunes_at_most_once_a_day(tmp_path):
    now = time.time()
    directory = cache(tmp_path, now=now)
    env = {"FAST_NVCC_CACHE_DIR": str(directory)}
    prune_when_due(env, now=now)
    assert sorted(p.name for p in (directory / "learned-stubs").iterdir()) == ["fresh.json"]
    assert sources_known(directory) == {"/p/new.cu"}
    assert (directory / MARKER).exists()
    # Within the day nothing is looked at again; a day later it is.
    later = directory / "learned-stubs" / "later.json"
    later.write_text("{}")
    aged(later, 90, now=now)
    prune_when_due(env, now=now + EVERY / 2)
    assert later.exists()
    prune_when_due(env, now=now + EVERY + 1)
    assert not later.exists() and (directory / "learned-stubs" / "fresh.json").exists()


@pytest.mark.parametrize("setting", [{"FAST_NVCC_KEEP_DAYS": "0"}, {"FAST_NVCC_KEEP_DAYS": "100"}])
def test_keep_days_zero_keeps_everything_and_more_days_keep_more(tmp_path, setting):
    now = time.time()
    directory = cache(tmp_path, now=now)
    prune_when_due({"FAST_NVCC_CACHE_DIR": str(directory), **setting}, now=now)
    assert (directory / "learned-stubs" / "old.json").exists()
    assert sources_known(directory) == {"/p/new.cu", "/p/gone.cu"}


def test_no_history_is_touched_under_history_off_and_no_cache_directory_is_made(tmp_path):
    now = time.time()
    directory = cache(tmp_path, now=now)
    prune_when_due({"FAST_NVCC_CACHE_DIR": str(directory), "FAST_NVCC_HISTORY": "0"}, now=now)
    assert not (directory / "learned-stubs" / "old.json").exists()
    assert sources_known(directory) == {"/p/new.cu", "/p/gone.cu"}
    prune_when_due({"FAST_NVCC_CACHE_DIR": str(tmp_path / "none")}, now=now)
    assert not (tmp_path / "none").exists()


@pytest.mark.nvcc
@pytest.mark.one_toolchain  # what fast_nvcc keeps, not what nvcc makes
def test_a_real_compile_prunes_as_it_ends_and_keeps_its_own(nvcc, tmp_path):
    """A compile with one architecture keeps its learned stub; a stub of a build directory
    removed 90 days ago goes as that compile ends, and the objects are nvcc's."""
    now = time.time()
    directory = cache(tmp_path, now=now)
    work = tmp_path / "w"
    work.mkdir()
    (work / "k.cu").write_text("__global__ void k(float *p) { p[threadIdx.x] *= 2; }\n")
    env = {"FAST_NVCC_CACHE_DIR": str(directory), "FAST_NVCC_POOL_DIR": str(tmp_path / "pool")}
    result = compare(nvcc, ["-c", "k.cu", "-arch=sm_90", "-o", "k.o"], cwd=work, env=env)
    assert_same(result)
    stubs = {p.name for p in (directory / "learned-stubs").iterdir()}
    assert "old.json" not in stubs and "fresh.json" in stubs and len(stubs) == 2  # fresh, and this compile's
    assert sources_known(directory) >= {"/p/new.cu"} and "/p/gone.cu" not in sources_known(directory)
