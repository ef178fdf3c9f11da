"""Forwards a run's captured output in nvcc's order: each task's stdout and stderr, task after
task, as soon as every earlier one has been forwarded, and nothing after a failure."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import BinaryIO

from ..graph.tasks import Task
from .task_records import Record, State


class Emitter:
    """Forwards captured output in nvcc's order."""

    def __init__(
        self,
        tasks: Sequence[Task],
        records: Sequence[Record],
        messages: Sequence[tuple[int, str]],
        *,
        stdout: BinaryIO | None,
        stderr: BinaryIO | None,
    ) -> None:
        self.records = records  # the run's, filled in as its tasks end
        self.stdout = stdout  # None: write to fd 1 and 2 themselves
        self.stderr = stderr
        self.order = sorted(tasks, key=lambda t: t.order)
        self.cursor = 0
        self.messages = sorted(messages, key=lambda m: m[0])
        self.message_cursor = 0
        self.broken = False
        self.stopped = False  # a failure was forwarded: nvcc prints nothing after it

    def forward(self, *, upto: tuple[int, int, int] | None, final: bool = False) -> None:
        records = self.records
        while self.cursor < len(self.order) and not self.stopped:
            task = self.order[self.cursor]
            if upto is not None and task.order > upto:
                return
            record = records[task.id]
            if task.optional:  # its output is nobody's: the step it helps prints its own
                self.cursor += 1
                continue
            if record.state not in (State.DONE, State.FAILED) or not (final or self._settled(task)):
                return
            self._messages_before(task.step.index)
            if not self._superseded(task):
                for fd, path in record.captures:
                    self._write(fd, path)
            self.cursor += 1
            # A step's state is set in its own thread before the main loop handles its end, so
            # a failure earlier in nvcc's order than the one being handled can show up here
            # first (cudafe++ and cicc report one error within milliseconds): it is the
            # compile's failure, and nothing after it is nvcc's.
            self.stopped = record.state is State.FAILED
        if final:
            self._messages_before(None)

    def _settled(self, task: Task) -> bool:
        """Whether a cicc's output can be judged yet: once its module_id check has run, which
        may rerun cicc and print the same warnings anew (only the rerun's count).
        A failed cicc fails as it would have with nvcc's module_id: its output stands."""
        check = task.checked_by
        if check is None or self.records[task.id].state is State.FAILED:
            return True
        return self.records[check].state is not State.SKIPPED

    def _superseded(self, task: Task) -> bool:
        check = task.checked_by
        return check is not None and self.records[check].reran

    def _messages_before(self, index: int | None) -> None:
        while self.message_cursor < len(self.messages):
            at, text = self.messages[self.message_cursor]
            if index is not None and at > index:
                return
            self._write_bytes(2, text.encode("utf-8", "surrogateescape"))
            self.message_cursor += 1

    def _write(self, fd: int, path: str) -> None:
        try:
            with open(path, "rb") as handle:
                while chunk := handle.read(1 << 20):
                    self._write_bytes(fd, chunk)
        except FileNotFoundError:
            pass

    def _write_bytes(self, fd: int, data: bytes) -> None:
        if self.broken or not data:
            return
        stream = self.stdout if fd == 1 else self.stderr
        try:
            if stream is not None:
                stream.write(data)
                stream.flush()
            else:
                _write_all(fd, data)
        except BrokenPipeError:
            self.broken = True


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]
