"""Each step's files as it ends: what it read and wrote (the report's sizes), and copies for
--save (later steps may overwrite or remove the temp files)."""

from __future__ import annotations

import os
import shutil
import sys

from ..graph.tasks import Task
from ..plan.dryrun import Plan
from ..run.task_records import Record, State


class StepObserver:
    def __init__(self, plan: Plan, save_dir: str | None) -> None:
        self.paths = plan.paths_by_key()
        self.save_dir = save_dir
        self.sizes: dict[int, tuple[int, int]] = {}

    def path(self, key: str) -> str:
        return self.paths.get(key, key)

    def on_event(self, what: str, task: Task, record: Record) -> None:
        if what != "end":
            return
        step = task.step
        read = sum(_size(self.path(k)) for k in step.reads)
        written = sum(_size(self.path(k)) for k in step.writes)
        self.sizes[task.id] = (read, written)
        if self.save_dir and record.state in (State.DONE, State.FAILED):
            self._save(task, record)

    def _save(self, task: Task, record: Record) -> None:
        name = "-".join(p for p in (f"{task.step.index:02d}", task.label.split(" ", 1)[1], str(task.id)) if p)
        target = os.path.join(self.save_dir, name.replace(" ", "_").replace("/", "_"))
        try:
            os.makedirs(target, exist_ok=True)
            for key in task.step.writes:
                path = self.path(key)
                if os.path.isfile(path):
                    shutil.copy2(path, os.path.join(target, os.path.basename(path)))
            for fd, path in record.captures:
                if os.path.isfile(path):
                    shutil.copy2(path, os.path.join(target, "stdout" if fd == 1 else "stderr"))
        except OSError as exc:
            print(f"fast_nvcc: warning: --save: {exc}", file=sys.stderr, flush=True)


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0
