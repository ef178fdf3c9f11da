"""Command line: ``fast_nvcc [OPTIONS] -- <nvcc args>`` or ``fast_nvcc [OPTIONS] /path/to/nvcc <nvcc args>``.

The second form is what CMake runs with ``CMAKE_CUDA_COMPILER_LAUNCHER=fast_nvcc``: the first
word that is not one of fast_nvcc's options is the compiler, and everything after it is nvcc's.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from . import __version__
from .arguments import positive_int

PROG = "fast_nvcc"


class UsageError(Exception):
    """A mistake in fast_nvcc's own options: one line, exit code 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # type: ignore[override]
        raise UsageError(message)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        usage=(
            f"{PROG} [OPTIONS] -- <nvcc args>\n"
            f"       {PROG} [OPTIONS] /path/to/nvcc <nvcc args>\n"
            f"       {PROG} analyze [PATHS...]   (see {PROG} analyze --help)\n"
            f"       {PROG} cache stats|clear\n"
            f"       {PROG} history export|import FILE [--root DIR]"
        ),
        description=(
            "A drop-in nvcc that runs nvcc's own plan (nvcc --dryrun) as a dataflow graph, "
            "independent steps in parallel, with outputs identical to nvcc's."
        ),
        allow_abbrev=False,
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    parser.add_argument("--nvcc", metavar="PATH", help="the nvcc to use (else FAST_NVCC_NVCC, PATH, CUDA_HOME, PyPI)")
    parser.add_argument(
        "-j", "--jobs", type=positive_int, metavar="N",
        help="run at most N steps at once (default: FAST_NVCC_JOBS, else the usable CPUs)",
    )
    parser.add_argument(
        "--faithful", action="store_true",
        help="run nvcc's commands exactly as printed, through sh, with no rewriting",
    )
    parser.add_argument(
        "--sequential", action="store_true",
        help="run the plan in nvcc's order, one step at a time",
    )
    parser.add_argument(
        "-v", dest="verbose", action="count", default=0,
        help="say what fast_nvcc decides (fallbacks to plain nvcc and why)",
    )
    parser.add_argument(
        "--cache", action="store_true",
        help="reuse cudafe++, cicc, ptxas and host-compile results from the per-step cache"
        " (also FAST_NVCC_CACHE=1; directory FAST_NVCC_CACHE_DIR, limit FAST_NVCC_CACHE_SIZE)",
    )
    parser.add_argument(
        "--remote", metavar="sccache|none",
        help="run cicc and ptxas through sccache: its cache and its sccache-dist build servers, as sccache is"
        " configured (also FAST_NVCC_REMOTE=sccache)",
    )
    parser.add_argument(
        "--split", type=positive_int, metavar="N",
        help="add nvcc's --split-compile N to every compile of a .cu source (or those of --split-sources): "
        "nvcc's split objects, cicc and ptxas on up to N idle cores (also FAST_NVCC_SPLIT=N)",
    )
    parser.add_argument(
        "--split-sources", metavar="GLOB[,GLOB]|@FILE",
        help="--split only for sources matching one of these globs: a file name (*_grouped.cu), or a path"
        " with a / (*/activation/*.cu); @FILE reads them from FILE, one a line, # comments (as analyze"
        " --write-split writes it; relative to the current directory; no pattern: nothing split)"
        " (also FAST_NVCC_SPLIT_SOURCES)",
    )
    reports = parser.add_argument_group("where the time goes (none of these changes the compile)")
    reports.add_argument(
        "--device-trace", action="store_true",
        help="collect cicc's and ptxas's own time traces (templates, headers, functions) into --trace"
        " and FAST_NVCC_LOG (also FAST_NVCC_DEVICE_TRACE=1; docs/device-trace.md)",
    )
    reports.add_argument(
        "--graph", metavar="FILE",
        help="the execution DAG with durations and the critical path: .dot, or .svg/.png/.pdf (needs Graphviz)",
    )
    reports.add_argument("--table", metavar="FILE.csv", help="one CSV row per step: times, exit code, sizes")
    reports.add_argument(
        "--trace", metavar="FILE.json", help="a Chrome trace (Perfetto, chrome://tracing), one lane per job slot"
    )
    reports.add_argument(
        "--verbose", dest="plan_listing", metavar="FILE",
        help="nvcc's plan as it would run it, one argument per line",
    )
    reports.add_argument("--save", dest="save_dir", metavar="DIR", help="keep a copy of every intermediate file, per step")
    reports.add_argument("--summary", action="store_true", help="after the compile, a short account on stderr")
    return parser


def split_command_line(argv: Sequence[str], parser: argparse.ArgumentParser):
    """Split ``argv`` into fast_nvcc's options, the nvcc to run (launcher form) and nvcc's args."""
    actions = parser._option_string_actions  # noqa: SLF001 - argparse offers no public lookup
    index = 0
    while index < len(argv):
        word = argv[index]
        if word == "--":
            return list(argv[:index]), None, list(argv[index + 1 :])
        if word.startswith("-") and word != "-":
            name = word.split("=", 1)[0]
            if name.startswith("--"):
                action = actions.get(name)
            else:
                action = actions.get(word[:2])
            if action is None:
                raise UsageError(f"unrecognized option {word!r}{_did_you_mean(name, actions)}"
                                 " (nvcc's arguments go after '--')")
            takes_value = action.nargs != 0 and not isinstance(
                action, (argparse._StoreTrueAction, argparse._CountAction, argparse._VersionAction)  # noqa: SLF001
            )
            glued = "=" in word or (not name.startswith("--") and len(word) > 2)
            if takes_value and not glued:
                if index + 1 >= len(argv) or argv[index + 1] == "--":
                    raise UsageError(f"{name} needs a value ({action.metavar or action.dest}) before '--'")
                index += 1
            index += 1
            continue
        return list(argv[:index]), word, list(argv[index + 1 :])
    return list(argv), None, None


def _did_you_mean(name: str, options: Sequence[str]) -> str:
    """A typo's nearest option of ours (as argparse itself suggests for choices): `--sumary`."""
    import difflib

    close = difflib.get_close_matches(name, list(options), n=1, cutoff=0.7)
    return f", did you mean {close[0]!r}?" if close else ""


# `fast_nvcc SUBCOMMAND ...`: each lives in its own module with a main(argv) -> int.
SUBCOMMANDS = {
    "analyze": "fast_nvcc.analysis",
    "cache": "fast_nvcc.cache.cli",
    "history": "fast_nvcc.learn.history",
}


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in SUBCOMMANDS:
        import importlib

        return importlib.import_module(SUBCOMMANDS[argv[0]]).main(argv[1:])
    parser = build_parser()
    try:
        ours, nvcc, nvcc_args = split_command_line(argv, parser)
        options = parser.parse_args(ours)
        if nvcc_args is None:
            raise UsageError("no nvcc command line: use 'fast_nvcc [OPTIONS] -- <nvcc args>'")
    except UsageError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2

    import os

    from .errors import FastNvccError

    log = os.environ.get("FAST_NVCC_LOG") or None
    if log:
        from .report.log_path import resolve_log_path  # relative to where the build started

        log = resolve_log_path(log)
    try:
        from . import settings as environment
        from .driver import Config, run
        from .plan.split_option import settings

        environment.check(os.environ)
        device_trace = options.device_trace or environment.switch(os.environ, "FAST_NVCC_DEVICE_TRACE")
        split, split_sources = settings(options.split, options.split_sources, os.environ)
        config = Config(
            nvcc=nvcc or options.nvcc,
            nvcc_given_as="the compiler of the launcher form 'fast_nvcc COMPILER <args>'" if nvcc else "--nvcc",
            jobs=options.jobs,
            faithful=options.faithful,
            sequential=options.sequential,
            verbose=options.verbose,
            graph=options.graph,
            table=options.table,
            trace=options.trace,
            plan_listing=options.plan_listing,
            save_dir=options.save_dir,
            summary=options.summary,
            log=log,
            cache=options.cache,
            device_trace=device_trace,
            remote=options.remote,
            split=split,
            split_sources=split_sources,
        )
        return run(config, nvcc_args)
    except FastNvccError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # a bug in fast_nvcc: say so in one line, never a traceback
        print(
            f"{PROG}: internal error: {type(exc).__name__}: {exc} (FAST_NVCC_DISABLE=1 runs plain nvcc)",
            file=sys.stderr,
        )
        return 70  # EX_SOFTWARE
