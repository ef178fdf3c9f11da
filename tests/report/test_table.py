"""--table's CSV (fast_nvcc.report.table): one row per step, in a file any CSV reader takes."""

from __future__ import annotations

import csv
import io
import shlex

from fast_nvcc.report.run_report import RunReport, StepReport
from fast_nvcc.report.table import TABLE_COLUMNS, write_table


def _step(command: tuple[str, ...]) -> StepReport:
    return StepReport(
        task=3, index=3, label="learned stub", tool="learned stub", kind="internal", arch=None,
        action="learned-stub", start=1.0, end=1.2, seconds=0.2, cpu_seconds=None, max_rss_kb=None,
        exit_code=0, state="done", critical=False, slot=None, waited=0.0, bytes_read=0,
        bytes_written=0, cached=None, command=command, preds=(),
    )  # fmt: skip


def test_a_nul_in_a_tasks_words_is_spelt_out(tmp_path):
    """The learned stub's key joins a source's path and its commands with NULs: the table spells
    each as \\0 (Python 3.10's csv module raised "need to escape" on it, failing --table)."""
    path = tmp_path / "t.csv"
    key = "/src/kernel.cu\0cicc --c++17 kernel.cpp1.ii"
    write_table(RunReport(steps=(_step((key, "out.stub.c")),), wall_seconds=1.2, exit_code=0, jobs=2), str(path))
    data = path.read_bytes()
    assert b"\0" not in data
    [row] = list(csv.DictReader(io.StringIO(data.decode("utf-8"), newline="")))
    assert list(row) == list(TABLE_COLUMNS)
    assert row["command"] == shlex.join(("/src/kernel.cu\\0cicc --c++17 kernel.cpp1.ii", "out.stub.c"))
    assert row["tool"] == "learned stub" and row["state"] == "done"
