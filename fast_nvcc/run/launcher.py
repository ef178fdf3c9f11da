"""Each started task's handler on a thread of its own, and their ends back to the run's loop
through one queue, in whatever order they come."""

from __future__ import annotations

import queue
import threading

from ..graph.tasks import Task
from .handlers import Handler, RunContext, TaskRun
from .task_records import StepFailed
from .wakeup import Wakeup

# An end: the task, and the exception of a bug in fast_nvcc itself that its handler raised.
End = tuple[int, BaseException | None]


class Launcher:
    def __init__(self, context: RunContext) -> None:
        self.context = context
        self.wakeup = Wakeup()  # the run's loop sleeps on it (Runner.run starts it); each end pokes it
        self._ends: queue.Queue[End] = queue.Queue()
        self._threads: list[threading.Thread] = []

    def launch(self, task: Task, handler: Handler) -> None:
        thread = threading.Thread(target=self._work, args=(task, handler), daemon=True)
        self._threads.append(thread)
        thread.start()

    def next_end(self, *, timeout: float) -> End | None:
        """The next task whose handler returned; None when none did within ``timeout`` seconds
        or before something else woke the loop (another compile freed a slot: wakeup.py)."""
        try:
            return self._ends.get_nowait()
        except queue.Empty:
            self.wakeup.wait(timeout)
        try:
            return self._ends.get_nowait()
        except queue.Empty:
            return None

    def join(self) -> None:
        for thread in self._threads:
            thread.join()
        self._threads.clear()

    def _work(self, task: Task, handler: Handler) -> None:
        error: BaseException | None = None
        run = TaskRun(self.context, task)
        try:
            handler.run(run)
        except StepFailed as exc:
            run.fail(exc.message, exc.returncode)
        except OSError as exc:
            # fast_nvcc's own file work failed (a full disk): say what and where, once.
            where = f"{exc.filename}: " if exc.filename else ""
            run.fail(f"fast_nvcc: error: {task.step.tool}: {where}{exc.strerror or exc}\n", 1)
        except BaseException as exc:  # pragma: no cover - a bug in fast_nvcc itself
            error = exc
        self._ends.put((task.id, error))
        self.wakeup.poke()
