"""The cache's handlers: a plain command, and the split host compile's two tasks, answered from
the step cache where it holds them and stored there where it does not (the package's docstring
says what a key covers)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from .. import settings
from ..files import read_bytes
from ..graph.tasks import Action
from ..learn.history_place import cache_directory
from ..plan.dryrun import Plan

if TYPE_CHECKING:
    from .keys import KeyMaker, Prepared
    from .store import StepCache


def cache_enabled(env: Mapping[str, str], flag: bool) -> bool:
    return flag or settings.switch(env, "FAST_NVCC_CACHE")


def open_cache(env: Mapping[str, str]) -> StepCache:
    # The keys and the store load only where the cache is on: every compile imports this module
    # to ask, and most have it off (7 M instructions, about 3 ms, of each compile's start).
    from .store import DEFAULT_SIZE, StepCache

    limit = settings.cache_size(env)
    return StepCache(cache_directory(env), size_limit=DEFAULT_SIZE if limit is None else limit)


# -- the cached command, as the scheduler runs it ---------------------------------------------


def exec_handler(cache: StepCache, keys: KeyMaker, *, combined_output: bool):
    """A handler for plain commands that serves cacheable steps from ``cache`` and stores what
    they make; anything else runs as usual."""
    from ..run.handlers import Handler, TaskRun
    from ..run.task_records import State

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
    """The step cache for a split host compile (host_split.run_front/run_back): the front's
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
        # (Here: only a compile with the cache on needs dataclasses, docs/development.md.)
        from dataclasses import replace

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
        from ..run.task_records import State

        prepared = self._prepared.get((run.task.id, "object"))
        if prepared is not None and run.record.state is State.DONE:
            self.cache.store(prepared, [(fd, read_bytes(path)) for fd, path in run.record.captures])


def host_handlers(cache: StepCache, keys: KeyMaker, *, combined_output: bool):
    """The split host compile's two tasks, with the step cache (see HostCache)."""
    from ..guess.host_split import run_back, run_front
    from ..run.handlers import Handler

    host = HostCache(cache, keys, combined_output=combined_output)
    return {Action.HOST_FRONT: Handler(lambda run: run_front(run, host)),
            Action.HOST_BACK: Handler(lambda run: run_back(run, host))}  # fmt: skip


def open_handlers(enabled: bool, *, nvcc: str, plan: Plan, env: Mapping[str, str], cwd: str, workdir: str,
                  combined_output: bool) -> tuple[dict, StepCache | None]:  # fmt: skip
    """The handlers this invocation adds to the scheduler's own (graph.tasks.HANDLED_BY) when the
    cache is on (--cache or FAST_NVCC_CACHE), and the cache to close after the run."""
    if not cache_enabled(env, enabled):
        return {}, None
    from .keys import KeyMaker

    keys = KeyMaker(nvcc=nvcc, plan_env=plan.env, assignments=plan.assignments, caller_env=env,
                    cwd=cwd, workdir=workdir, paths_by_key=plan.paths_by_key())  # fmt: skip
    cache = open_cache(env)
    handlers = {Action.EXEC: exec_handler(cache, keys, combined_output=combined_output)}
    handlers.update(host_handlers(cache, keys, combined_output=combined_output))
    return handlers, cache
