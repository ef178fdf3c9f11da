"""10. Where a build's time went: ``fast_nvcc analyze [PATHS...]``.

Reads ninja's build log (``.ninja_log``) and/or fast_nvcc's own log (``FAST_NVCC_LOG``) and
reports the wall time, the sum of job times, the effective parallelism, how many jobs ran over
time, the long poles, a what-if on the wall-time bound, and the time per nvcc phase and per
architecture; optionally a plot and a Chrome trace.  The bound's model is in docs/analyze.md.

The files follow the data, in this order (reading, parsing, the model, the output, the command
line; steps of the analysis, not stages of the package):

    load.py      load_build: the only reader of files
    readers.py   parse_ninja_log / parse_fast_nvcc_log -> split_builds -> build_jobs
                 -> join_records                      (lines in, Jobs out)
    model.py     analyze: bound, profile, long poles, what-if, phases   (Jobs in, Analysis out)
    device.py    sum_device_costs: templates, headers, functions from --device-trace; the
                 template what-if
    idle.py      idle_cores: the core-seconds no step held, and those steps held but left
                 idle (the report's idle cores)
    advice.py    advise: the compiles that set the floor, what --split or cutting a source
                 would give it, the settings to use (the report's last table);
                 split_file_text: --write-split's file
    report.py    format_text / format_markdown
    schema.py    json_report: the JSON schema, in one place
    plot.py      write_plot
    trace.py     write_trace
    cli.py       the command line: parse_options -> run -> main

``records.py`` holds the records they pass on.  Everything between the reader and the writers
is plain loops over tuples, so a log of 100k entries takes about a second.
"""

from __future__ import annotations

from .bound import wall_bound
from .cli import FORMATS, PROG, Options, build_parser, main, parse_options, run
from .load import load_build
from .model import (
    analyze,
    apply_what_if,
    find_long_poles,
    max_concurrency,
    nice_interval,
    sample_profile,
    sum_phases,
)
from .plot import PLOT_FORMATS, check_plot_path, concurrency_steps, write_plot
from .readers import (
    CLOCK_SLACK_SECONDS,
    FAST_NVCC_LOG_VERSIONS,
    JOIN_TOLERANCE_SECONDS,
    NINJA_HEADER,
    NINJA_VERSIONS,
    SESSION_GAP_SECONDS,
    build_jobs,
    jobs_of_records,
    join_records,
    parse_fast_nvcc_log,
    parse_ninja_log,
    parse_ninja_version,
    split_builds,
    split_sessions,
)
from .records import (
    BOOKKEEPING_TOOLS,
    Analysis,
    AnalysisError,
    Bound,
    Build,
    CompileRecord,
    Job,
    LongPole,
    NinjaEntry,
    PhaseTotal,
    ProfileRow,
    Step,
    WhatIf,
    WhatIfRule,
)
from .report import Table, format_markdown, format_text, report_tables
from .schema import JSON_SCHEMA_VERSION, AnalysisJson, json_report
from .trace import assign_slots, assign_step_lanes, trace_events, write_trace

__all__ = [
    "BOOKKEEPING_TOOLS",
    "CLOCK_SLACK_SECONDS",
    "FAST_NVCC_LOG_VERSIONS",
    "FORMATS",
    "JOIN_TOLERANCE_SECONDS",
    "JSON_SCHEMA_VERSION",
    "NINJA_HEADER",
    "NINJA_VERSIONS",
    "PLOT_FORMATS",
    "PROG",
    "SESSION_GAP_SECONDS",
    "Analysis",
    "AnalysisError",
    "AnalysisJson",
    "Bound",
    "Build",
    "CompileRecord",
    "Job",
    "LongPole",
    "NinjaEntry",
    "Options",
    "PhaseTotal",
    "ProfileRow",
    "Step",
    "Table",
    "WhatIf",
    "WhatIfRule",
    "analyze",
    "apply_what_if",
    "assign_slots",
    "assign_step_lanes",
    "build_jobs",
    "build_parser",
    "check_plot_path",
    "concurrency_steps",
    "find_long_poles",
    "format_markdown",
    "format_text",
    "jobs_of_records",
    "join_records",
    "json_report",
    "load_build",
    "main",
    "max_concurrency",
    "nice_interval",
    "parse_fast_nvcc_log",
    "parse_ninja_log",
    "parse_ninja_version",
    "parse_options",
    "report_tables",
    "run",
    "sample_profile",
    "split_builds",
    "split_sessions",
    "sum_phases",
    "trace_events",
    "wall_bound",
    "write_plot",
    "write_trace",
]
