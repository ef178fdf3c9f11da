"""The reports one invocation asked for, written after its run: --graph, --table, --trace,
--summary and the FAST_NVCC_LOG record.  A report that cannot be written is worth a warning,
never a different exit code."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

from .log import append_log, log_record
from .run_report import ReportError, build_report

if TYPE_CHECKING:
    from ..graph.tasks import Dag
    from ..plan.invocation import Invocation
    from ..run.task_records import RunResult
    from .observer import StepObserver


class ReportOptions(NamedTuple):
    graph: str | None = None
    table: str | None = None
    trace: str | None = None
    summary: bool = False
    log: str | None = None  # FAST_NVCC_LOG


def write_reports(
    options: ReportOptions,
    invocation: Invocation,
    dag: Dag,
    result: RunResult,
    *,
    jobs: int,
    mode: str,
    started: float,
    observer: StepObserver | None,
    tool_events: dict[int, list[dict]] | None = None,
) -> None:
    report = build_report(
        dag,
        result.records,
        wall_seconds=result.wall_seconds,
        exit_code=result.returncode,
        jobs=jobs,
        sizes=observer.sizes if observer else None,
        started_at=result.started_at,
    )
    cwd, plan = invocation.cwd, invocation.plan
    outputs = sorted({os.path.normpath(os.path.join(cwd, o)) for s in plan.steps for o in s.outputs})
    sources = invocation.sources
    title = f"nvcc {' '.join(invocation.args)}"
    # Each report's module loads where it is asked for (FAST_NVCC_LOG's alone is common).
    if options.graph:
        from .graph_file import write_graph

        try_report(lambda: write_graph(report, options.graph, title=title), "--graph")
    if options.table:
        from .table import write_table

        try_report(lambda: write_table(report, options.table), "--table")
    if options.trace:
        from .trace import write_trace

        try_report(lambda: write_trace(report, options.trace, name=title, tool_events=tool_events), "--trace")
    if options.summary:
        from .summary import format_summary

        what = " ".join(os.path.basename(s) for s in sources) + " -> " + " ".join(os.path.relpath(o, cwd) for o in outputs)
        sys.stderr.write(format_summary(report, what=what))
        sys.stderr.flush()
    if options.log:
        record = log_record(
            nvcc=invocation.nvcc, args=invocation.args, cwd=cwd, sources=sources, outputs=outputs,
            exit_code=result.returncode, wall_seconds=result.wall_seconds, started=started,
            mode=mode, report=report,
        )  # fmt: skip
        if tool_events is not None:
            from . import device_trace

            sidecar = device_trace.sidecar_path(options.log)
            record["device_trace"] = {"file": sidecar, "id": f"{os.getpid()}-{started}"}
            line = device_trace.sidecar_line(record["device_trace"]["id"], plan, tool_events)
            try_report(lambda: append_log(sidecar, line), "FAST_NVCC_LOG device traces")
        try_report(lambda: append_log(options.log, record), "FAST_NVCC_LOG")


def try_report(write: Callable[[], object], what: str) -> None:
    """Write one report; a failure is a one-line warning."""
    try:
        write()
    except (OSError, ReportError) as exc:
        print(f"fast_nvcc: warning: {what}: {exc}", file=sys.stderr, flush=True)
    except Exception as exc:  # graphviz's own errors, for one
        print(f"fast_nvcc: warning: {what}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
