"""What fast_nvcc needs to know from nvcc's own command line, and nothing more.

The plan carries almost everything; the command line is read only for (1) modes that a plan
cannot reproduce, which go to nvcc unchanged, and (2) the parts of a dependency file that nvcc
computes in-process (its ``-- Filter Dependencies --`` step): the rule's target and its flavour.
Options follow nvcc 13's ``--help``: ``-opt value``, ``-opt=value``, ``--long value`` and
``--long=value``; NVCC_PREPEND_FLAGS, NVCC_APPEND_FLAGS and ``--options-file`` contribute too.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterator, Mapping, Sequence
from typing import NamedTuple

# nvcc's options that take a value (from `nvcc --help`, CUDA 13.0): long name, short name.
_VALUE_OPTIONS = {
    "--dependency-output": "-MF",
    "--output-file": "-o",
    "--pre-include": "-include",
    "--library": "-l",
    "--define-macro": "-D",
    "--undefine-macro": "-U",
    "--include-path": "-I",
    "--system-include": "-isystem",
    "--library-path": "-L",
    "--output-directory": "-odir",
    "--compiler-bindir": "-ccbin",
    "--archiver-binary": "-arbin",
    "--cudart": "-cudart",
    "--cudadevrt": "-cudadevrt",
    "--libdevice-directory": "-ldir",
    "--target-directory": "-target-dir",
    "--optimization-info": "-opt-info",
    "--optimize": "-O",
    "--Ofast-compile": "-Ofc",
    "--dopt": "-dopt",
    "--ftemplate-backtrace-limit": "-ftemplate-backtrace-limit",
    "--ftemplate-depth": "-ftemplate-depth",
    "--x": "-x",
    "--std": "-std",
    "--machine": "-m",
    "--compiler-options": "-Xcompiler",
    "--linker-options": "-Xlinker",
    "--archive-options": "-Xarchive",
    "--ptxas-options": "-Xptxas",
    "--nvlink-options": "-Xnvlink",
    "--static-global-template-stub": "-static-global-template-stub",
    "--device-entity-has-hidden-visibility": "-device-entity-has-hidden-visibility",
    "--threads": "-t",
    "--split-compile": "-split-compile",
    "--split-compile-extended": "-split-compile-extended",
    "--fdevice-time-trace": "-fdevice-time-trace",
    "--keep-dir": "-keep-dir",
    "--time": "-time",
    "--run-args": "-run-args",
    "--input-drive-prefix": "-idp",
    "--dependency-drive-prefix": "-ddp",
    "--drive-prefix": "-dp",
    "--dependency-target-name": "-MT",
    "--gpu-architecture": "-arch",
    "--gpu-code": "-code",
    "--generate-code": "-gencode",
    "--relocatable-device-code": "-rdc",
    "--entries": "-e",
    "--maxrregcount": "-maxrregcount",
    "--ftz": "-ftz",
    "--prec-div": "-prec-div",
    "--prec-sqrt": "-prec-sqrt",
    "--fmad": "-fmad",
    "--default-stream": "-default-stream",
    "--Werror": "-Werror",
    "--diag-error": "-diag-error",
    "--diag-suppress": "-diag-suppress",
    "--diag-warn": "-diag-warn",
    "--host-linker-script": "-hls",
    "--brief-diagnostics": "-brief-diag",
    "--jump-table-density": "-jtd",
    "--device-stack-protector": "-device-stack-protector",
    "--compress-mode": "-compress-mode",
    "--frandom-seed": "-frandom-seed",
    "--sanitize": "-sanitize",
    "--options-file": "-optf",
}
_CANONICAL = {**{long: long for long in _VALUE_OPTIONS}, **{s: l for l, s in _VALUE_OPTIONS.items()}}

# Flags that make nvcc do something other than run a compilation plan, or that change what
# it prints around the plan, with the reason shown under fast_nvcc -v.
_PASSTHROUGH_FLAGS = {
    "--version": "prints nvcc's version",
    "-V": "prints nvcc's version",
    "--help": "prints nvcc's help",
    "-h": "prints nvcc's help",
    "--list-gpu-arch": "lists architectures",
    "-arch-ls": "lists architectures",
    "--list-gpu-code": "lists architectures",
    "-code-ls": "lists architectures",
    "--dryrun": "nvcc only prints its plan",
    "-dryrun": "nvcc only prints its plan",
    "--run": "nvcc runs the program it builds",
    "-run": "nvcc runs the program it builds",
    "--keep": "--keep keeps nvcc's intermediate files under nvcc's names",
    "-keep": "--keep keeps nvcc's intermediate files under nvcc's names",
    "--save-temps": "--save-temps keeps nvcc's intermediate files under nvcc's names",
    "-save-temps": "--save-temps keeps nvcc's intermediate files under nvcc's names",
    "--clean-targets": "nvcc only deletes files",
    "-clean": "nvcc only deletes files",
    "--verbose": "nvcc -v prints each command as it runs it",
    "-v": "nvcc -v prints each command as it runs it",
}
_PASSTHROUGH_VALUES = {
    "--keep-dir": "--keep-dir keeps nvcc's intermediate files under nvcc's names",
    "--time": "nvcc --time writes its own phase timings",
    "--run-args": "nvcc runs the program it builds",
}

_SPLIT_OPTIONS = {"--threads", "--split-compile", "--split-compile-extended"}

_DEPS_ONLY = {"-M", "--generate-dependencies", "-MM", "--generate-nonsystem-dependencies"}
_NONSYSTEM = {
    "-MM",
    "--generate-nonsystem-dependencies",
    "-MMD",
    "--generate-nonsystem-dependencies-with-compile",
}
_PHONY = {"-MP", "--generate-dependency-targets"}


class Option(NamedTuple):
    """One option of nvcc's command line, with its value where it takes one."""

    name: str  # canonical long name for value options, the word itself otherwise
    value: str | None


class DependencyOptions(NamedTuple):
    """What nvcc's dependency filter needs besides the preprocessed files."""

    target: str | None  # -MT, or the output object (-o) when given; None: from the source
    output_dir: str | None  # -odir: nvcc puts it before whichever target, "dir/" + target
    phony_targets: bool  # -MP
    nonsystem: bool  # -MM/-MMD: leave out headers from system directories

    def target_for(self, source: str) -> str:
        """The rule's target; nvcc derives the default from the source's name, and writes any
        target under -odir as the directory, a slash and the target (``-odir o -MT /a.o``:
        ``o//a.o``)."""
        target = self.target
        if target is None:
            target = os.path.splitext(os.path.basename(source))[0] + ".o"
        return f"{self.output_dir}/{target}" if self.output_dir is not None else target


def effective_args(args: Sequence[str], env: Mapping[str, str], *, cwd: str) -> list[str]:
    """``args`` as nvcc sees them: with NVCC_PREPEND_FLAGS/NVCC_APPEND_FLAGS around them and
    the contents of options files (``-optf``) in their place."""
    words = [
        *shlex.split(env.get("NVCC_PREPEND_FLAGS", "")),
        *args,
        *shlex.split(env.get("NVCC_APPEND_FLAGS", "")),
    ]
    return _splice_options_files(words, cwd=cwd, depth=0)


def _splice_options_files(words: Sequence[str], *, cwd: str, depth: int) -> list[str]:
    if depth > 8:
        raise ValueError("options files nest too deeply")
    result: list[str] = []
    position = 0
    for option in iter_options(words):
        consumed = 1 if option.value is None or "=" in words[position] else 2
        if option.name == "--options-file" and option.value is not None:
            for name in option.value.split(","):
                with open(os.path.join(cwd, name), encoding="utf-8") as handle:
                    inner = shlex.split(handle.read())
                result.extend(_splice_options_files(inner, cwd=cwd, depth=depth + 1))
        else:
            result.extend(words[position : position + consumed])
        position += consumed
    return result


def iter_options(args: Sequence[str]) -> Iterator[Option]:
    """nvcc's arguments, one option (with its value) at a time."""
    position = 0
    while position < len(args):
        word = args[position]
        position += 1
        name, sep, value = word.partition("=")
        canonical = _CANONICAL.get(name)
        if canonical and sep:
            yield Option(canonical, value)
        elif canonical and word == name:
            if position < len(args):
                yield Option(canonical, args[position])
                position += 1
            else:
                yield Option(canonical, None)
        else:
            yield Option(word, None)


def passthrough_reason(args: Sequence[str]) -> str | None:
    """Why this command line must go to nvcc unchanged; None when fast_nvcc can run it."""
    names: set[str] = set()
    for option in iter_options(args):
        if option.value is None and option.name in _PASSTHROUGH_FLAGS:
            return _PASSTHROUGH_FLAGS[option.name]
        if option.name in _PASSTHROUGH_VALUES:
            return _PASSTHROUGH_VALUES[option.name]
        if option.name == "--gpu-architecture" and option.value == "native":
            return "-arch=native asks the GPU of this machine"
        if option.name == "-":
            return "the source comes from stdin, which nvcc copies to a temp file of its own"
        names.add(option.name)
    if "--fdevice-time-trace" in names and names & _SPLIT_OPTIONS:
        # nvcc 13.0's own trace with -t N is not valid JSON (nor found by nvcc): stay as broken.
        return "--fdevice-time-trace with -t/--split-compile: nvcc's own trace"
    return None


# The canonical name (iter_options's); nvcc takes -fdevice-time-trace too.
TRACE_OPTION = "--fdevice-time-trace"


def requested_trace(args: Sequence[str]) -> str | None:
    """The value of the last --fdevice-time-trace (nvcc takes the last), or None.  Read here,
    not in tool_traces.py: every compile asks, and only one that traces loads that module."""
    value = None
    for option in iter_options(args):
        if option.name == TRACE_OPTION:
            value = option.value
    return value


def threads(args: Sequence[str]) -> str | None:
    """The value of the last ``-t``/``--threads`` (nvcc takes the last); None without one.
    nvcc also reads the value glued to the short name (``-t0``), as llm.c's Makefile writes it."""
    found = None
    for option in iter_options(args):
        if option.name == "--threads":
            found = option.value
        elif option.name.startswith("-t") and option.name[2:].isdigit():
            found = option.name[2:]
    return found


def dependency_options(args: Sequence[str]) -> DependencyOptions:
    target = None
    output = None
    output_dir = None
    deps_only = False
    nonsystem = False
    phony = False
    for option in iter_options(args):
        if option.name == "--dependency-target-name":
            target = option.value
        elif option.name == "--output-file":
            output = option.value
        elif option.name == "--output-directory":
            output_dir = option.value
        elif option.name in _PHONY:
            phony = True
        if option.name in _DEPS_ONLY:
            deps_only = True
        if option.name in _NONSYSTEM:
            nonsystem = True
    if target is None and output is not None and not deps_only:
        # With -M/-MM the -o file is the dependency file itself; otherwise it is the target.
        target = output
    return DependencyOptions(
        target=target, output_dir=output_dir, phony_targets=phony, nonsystem=nonsystem
    )



def input_files(args: Sequence[str]) -> list[str]:
    """The files nvcc compiles: the words that are neither an option nor an option's value."""
    return [o.name for o in iter_options(args) if o.value is None and not o.name.startswith("-")]
