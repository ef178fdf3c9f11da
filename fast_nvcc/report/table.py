"""--table: one CSV row per task."""

from __future__ import annotations

import csv
import shlex

from ..files import replace_atomically
from .run_report import RunReport


TABLE_COLUMNS = (
    "index", "task", "tool", "arch", "state", "start", "end", "seconds", "cpu_seconds",
    "max_rss_kb", "exit_code", "critical", "bytes_read", "bytes_written", "slot", "wait_seconds", "cache", "command", "remote",
)  # fmt: skip


def write_table(report: RunReport, path: str) -> None:
    rows = []
    for step in sorted(report.steps, key=lambda s: (s.index, s.task)):
        rows.append(
            {
                "index": step.index,
                "task": step.task,
                "tool": step.tool,
                "arch": step.arch or "",
                "state": step.state,
                "start": _fmt(step.start),
                "end": _fmt(step.end),
                "seconds": f"{step.seconds:.6f}",
                "cpu_seconds": _fmt(step.cpu_seconds),
                "max_rss_kb": "" if step.max_rss_kb is None else step.max_rss_kb,
                "exit_code": "" if step.exit_code is None else step.exit_code,
                "critical": int(step.critical),
                "bytes_read": step.bytes_read,
                "bytes_written": step.bytes_written,
                "slot": "" if step.slot is None else step.slot,
                "wait_seconds": f"{step.waited:.6f}" if step.start is not None else "",
                "cache": {None: "", True: "hit", False: "miss"}[step.cached],
                # An internal task's words may hold a NUL (the learned stub's key), which a CSV
                # cannot: Python 3.10's csv module refuses it, most readers stop at it.
                "command": shlex.join(step.command).replace("\0", "\\0"),
                "remote": step.remote or "",
            }
        )

    def write(tmp: str) -> None:
        with open(tmp, "w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=TABLE_COLUMNS)
            writer.writeheader()
            writer.writerows(rows)

    replace_atomically(path, write)


def _fmt(value: float | None) -> str:
    return "" if value is None else f"{value:.6f}"
