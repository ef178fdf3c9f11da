"""``fast_nvcc analyze``'s command line.  argparse stops here: reading, parsing, the model and
the output see ``Options`` only."""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from ..arguments import positive_int
from .advice import split_file_text
from .load import load_build
from .model import analyze
from .output import write_atomically, write_text
from .plot import check_plot_path, write_plot, write_template_plot
from .records import AnalysisError, WhatIfRule
from .report import format_markdown, format_text
from .schema import json_report
from .trace import write_trace

PROG = "fast_nvcc analyze"
FORMATS = ("text", "markdown", "json")


@dataclass(frozen=True, slots=True)
class Options:
    """What the command line asks for; the core never sees argparse."""

    paths: tuple[str, ...]
    jobs: int | None = None
    top: int = 10
    interval: float | None = None
    what_if: tuple[WhatIfRule, ...] = ()
    format: str = "text"
    plot: str | None = None
    trace: str | None = None
    build: int = -1
    what_if_templates: tuple[str, ...] = ()
    template_plot: str | None = None
    write_split: str | None = None


# -- the command line --------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # type: ignore[override]
        raise AnalysisError(message)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description=(
            "Where a build's time went: wall time, parallelism, concurrency over time, long poles, "
            "a what-if on the wall-time bound, and (with FAST_NVCC_LOG) time per nvcc phase and "
            "architecture.  PATHS: a .ninja_log or a build directory holding one, and/or "
            "FAST_NVCC_LOG files (default: the current directory)."
        ),
        allow_abbrev=False,
    )
    parser.add_argument(
        "paths",
        nargs="*",
        metavar="PATH",
        help=".ninja_log, build directory, or FAST_NVCC_LOG (.jsonl)",
    )
    parser.add_argument(
        "-j",
        "--jobs",
        type=positive_int,
        metavar="N",
        help="the build's job slots (default: the most jobs seen running at once)",
    )
    parser.add_argument("--top", type=positive_int, default=10, metavar="N",
                        help="how many long poles to list (10)")  # fmt: skip
    parser.add_argument(
        "--interval",
        type=_positive_float,
        metavar="SECONDS",
        help="time between rows of the concurrency profile (default: about 20 rows)",
    )
    parser.add_argument(
        "--what-if",
        dest="what_if",
        action="append",
        type=_what_if_rule,
        default=[],
        metavar="PATTERN=SECONDS",
        help="recompute the wall-time bound with the jobs whose output matches the glob at SECONDS "
        "(repeatable; the last matching rule wins)",
    )
    parser.add_argument(
        "--what-if-template",
        dest="what_if_templates",
        action="append",
        default=[],
        metavar="NAME",
        help="the wall-time bound were the instantiations of the templates matching the glob gone "
        "(needs compiles run with --device-trace; repeatable)",
    )
    parser.add_argument(
        "--template-plot",
        metavar="FILE.png|svg",
        help="draw the costliest templates, flame-style (needs --device-trace costs and matplotlib)",
    )
    parser.add_argument(
        "--format", choices=FORMATS, default="text", help="the report's format (text)"
    )
    parser.add_argument(
        "--plot", metavar="FILE.png|svg", help="draw the jobs running over time (needs matplotlib)"
    )
    parser.add_argument(
        "--trace", metavar="FILE.json", help="the build as a Chrome trace, one lane per job slot"
    )
    parser.add_argument(
        "--write-split", metavar="FILE",
        help="write the sources the advice splits to FILE, one a line, for fast_nvcc --split-sources @FILE"
        " (only a # header where it advises no split)",
    )  # fmt: skip
    parser.add_argument(
        "--build",
        type=_build_index,
        default=-1,
        metavar="N",
        help="which build of the log: 1 the first, -1 the last (default)",
    )
    return parser


def parse_options(argv: Sequence[str]) -> Options:
    namespace = build_parser().parse_args(list(argv))
    return Options(
        paths=tuple(namespace.paths),
        jobs=namespace.jobs,
        top=namespace.top,
        interval=namespace.interval,
        what_if=tuple(namespace.what_if),
        format=namespace.format,
        plot=namespace.plot,
        trace=namespace.trace,
        build=namespace.build,
        what_if_templates=tuple(namespace.what_if_templates),
        template_plot=namespace.template_plot,
        write_split=namespace.write_split,
    )


def run(options: Options) -> str:
    """Do what the options ask; return the report to print."""
    for plot in (options.plot, options.template_plot):
        if plot:
            check_plot_path(plot)
    build = load_build(options.paths, build=options.build)
    analysis = analyze(
        build,
        slots=options.jobs,
        top=options.top,
        interval=options.interval,
        what_if=options.what_if,
        what_if_templates=options.what_if_templates,
    )
    if options.plot:
        write_plot(analysis, options.plot)
    if options.trace:
        write_trace(build, options.trace)
    if options.template_plot:
        write_template_plot(analysis, options.template_plot)
    if options.write_split:
        text = split_file_text(analysis.advice)
        write_atomically(options.write_split, lambda tmp: write_text(tmp, text))
    if options.format == "json":
        return json.dumps(json_report(analysis), indent=1) + "\n"
    if options.format == "markdown":
        return format_markdown(analysis)
    return format_text(analysis)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        options = parse_options(sys.argv[1:] if argv is None else argv)
        report = run(options)
    except (AnalysisError, OSError) as exc:
        print(f"fast_nvcc: error: {exc}", file=sys.stderr)
        return 2
    except SystemExit as exc:  # --help
        return exc.code if isinstance(exc.code, int) else 0
    except KeyboardInterrupt:
        return 130
    sys.stdout.write(report)
    return 0


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0 or math.isinf(value):
        raise argparse.ArgumentTypeError(f"must be more than 0: {text!r}")
    return value


def _build_index(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value == 0:
        raise argparse.ArgumentTypeError("builds count from 1 (the first) or -1 (the last)")
    return value


def _what_if_rule(text: str) -> WhatIfRule:
    pattern, sep, seconds = text.rpartition("=")
    if not sep or not pattern:
        raise argparse.ArgumentTypeError(f"{text!r}: use PATTERN=SECONDS, e.g. 'activation/*=0'")
    try:
        value = float(seconds)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: {seconds!r} is not a number of seconds"
        ) from None
    if value < 0 or math.isnan(value) or math.isinf(value):
        raise argparse.ArgumentTypeError(f"{text!r}: seconds must be 0 or more")
    return WhatIfRule(pattern, value)
