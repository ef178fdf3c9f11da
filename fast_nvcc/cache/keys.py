"""The keys of the per-step cache (:mod:`fast_nvcc.cache` says what a key covers and leaves
out, and why): one invocation's :class:`KeyMaker`, the :class:`Prepared` lookup of a task, and
this run's temp names hidden in what is stored and put back into what is restored."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..files import read_bytes

if TYPE_CHECKING:
    from ..graph.tasks import Task

FORMAT = b"fast_nvcc step cache 1\n"
# By plan.dryrun.Kind value (plan.dryrun is imported only where keys are made).
CACHEABLE = {"cudafe++": "placeholders", "cicc": "placeholders", "ptxas": "placeholders", "host-compile": "exact"}
TEXT_KINDS = {"cudafe++", "cicc"}  # their outputs are C/PTX/module_id text
TEMP_TAG = re.compile(r"tmpxft_([0-9a-f]{8})_([0-9a-f]{8})")  # as plan.dryrun.TEMP_TAG
# The caller's variables that change what the compilers do (the plan's own are keyed too).
# TMPDIR is not among them: the host compile's key holds its temp paths, the others' outputs
# get this run's paths written back.
ENVIRONMENT = ("LANG", "LC_ALL", "LC_CTYPE", "LC_MESSAGES", "CPATH", "C_INCLUDE_PATH",
               "CPLUS_INCLUDE_PATH", "GCC_EXEC_PREFIX", "COMPILER_PATH", "SOURCE_DATE_EPOCH")  # fmt: skip
TAG_PLACEHOLDER = b"tmpxft_@@@@@@@@_@@@@@@@@"
# Host-compiler options under which gcc's object depends on its own name or on the working
# directory, or gcc writes more files named after the object (measured with gcc 12: -o a.o
# and -o b.o give the same bytes without these; -g embeds the directory, -gsplit-dwarf the .dwo
# name, --coverage/-fprofile-* the .gcda name, -flto its own name).  -g0 turns -g off.
NAME_REACHES = ("-g", "-flto", "-fprofile", "--coverage", "-ftest-coverage", "-save-temps", "--save-temps",
                "-M", "-Wa,", "-Wp,", "-fdump", "-aux-info", "-fstack-usage", "-fcallgraph-info", "-fopt-info",
                "-dump", "-auxbase", "-fplugin", "-specs", "--specs", "-fdebug", "-ffile-prefix",
                "-fmacro-prefix", "-frandom-seed")  # fmt: skip


@dataclass(frozen=True, slots=True)
class Prepared:
    """What a cacheable task needs for a lookup and a store."""

    key: str
    tool: str
    outputs: tuple[str, ...]  # absolute paths
    names: tuple[tuple[bytes, bytes], ...]  # (current spelling, placeholder), longest first
    tag: bytes  # this run's tmpxft_<pid>_<n>
    text: bool
    combined: bool = False  # this run captures each step's stdout and stderr as one file

    def hiding(self) -> tuple[re.Pattern[bytes], dict[bytes, bytes]] | None:
        """One pattern for all of this run's names (longest first, so a name is never cut
        inside a longer one that contains it), for a single pass over a 10 MB .cudafe1.cpp."""
        if not self.names:
            return None
        return re.compile(b"|".join(re.escape(old) for old, _ in self.names)), dict(self.names)

    def showing(self) -> dict[bytes, bytes]:
        return {new: old for old, new in self.names}


class KeyMaker:
    """Computes the keys of one invocation's tasks."""

    def __init__(self, *, nvcc: str, plan_env: Mapping[str, str], assignments: Sequence[tuple[str, str]],
                 caller_env: Mapping[str, str], cwd: str, workdir: str, paths_by_key: Mapping[str, str]) -> None:  # fmt: skip
        self.cwd = cwd
        self.workdir = workdir.rstrip("/") + "/"
        self.path = plan_env.get("PATH")
        self.by_key = paths_by_key
        self._identities: dict[str, str] = {}
        variables = [(n, v) for n, v in assignments if n != "PATH"]
        variables += [(n, caller_env[n]) for n in ENVIRONMENT if n in caller_env]
        self.common = json.dumps({"format": FORMAT.decode(), "nvcc": self.identity(nvcc),
                                  "env": [(n, _normal(v)) for n, v in variables]})  # fmt: skip

    def identity(self, program: str) -> str:
        if program not in self._identities:
            path = program if os.sep in program else shutil.which(program, path=self.path) or program
            try:
                real = os.path.realpath(path)
                info = os.stat(real)
                self._identities[program] = f"{real}:{info.st_size}:{info.st_mtime_ns}"
            except OSError:
                self._identities[program] = program
        return self._identities[program]

    def prepare(self, task: Task, *, combined_output: bool = False, assembly: str | None = None) -> Prepared | None:
        """The key of ``task``; for a split host compile's front, of the ``assembly`` cc1plus
        writes from the placeholder .fatbin.c (guess/host_split.py), which stands where the real one
        will be and is hashed as it."""
        from ..graph.tasks import Action
        from ..plan.dryrun import Kind, output_paths, temp_mentions

        policy = CACHEABLE.get(task.step.kind.value)
        if policy is None or task.action not in (Action.EXEC, Action.HOST_FRONT, Action.HOST_BACK) or not task.argv:
            return None
        argv = list(task.argv)
        # A stub cicc writes to a private path (graph.early_stubs) is keyed as the one nvcc
        # names, so the entry serves the cicc whether or not the host compile is split.
        private_stub = _private_stub(task)
        if private_stub is not None and private_stub[1] in temp_mentions(task.step.argv):
            argv[argv.index(private_stub[0])] = private_stub[1]
        else:
            private_stub = None
        mentions = temp_mentions(argv)
        mentions += [w for w in argv if w.startswith(self.workdir) and w not in mentions]  # the private module_id
        names: list[tuple[bytes, bytes]] = []
        if policy == "placeholders":
            replacements = []
            for number, path in enumerate(mentions):
                replacements.append((path, f"@@FNT{number}@@"))
                base = os.path.basename(path)
                if base != path:
                    replacements.append((base, f"@@FNB{number}@@"))
            if private_stub is not None:  # the stub names itself: hidden as nvcc's name is
                replacements.append((private_stub[0], f"@@FNT{mentions.index(private_stub[1])}@@"))
            replacements.sort(key=lambda r: len(r[0]), reverse=True)
            names = [(old.encode(), new.encode()) for old, new in replacements]
            normal_argv = [_replace_all(word, replacements) for word in argv[1:]]
        else:
            normal_argv = [_normal(word) for word in argv[1:]]
        outputs = [os.path.join(self.cwd, p) for p in output_paths(task.step.kind, task.argv)]
        cwd: str | None = None if task.step.kind is Kind.PTXAS else self.cwd
        if task.step.kind is Kind.HOST_COMPILE and not name_reaches_object(argv):
            normal_argv = _without_output_name(normal_argv)
            cwd = None
        tag_match = TEMP_TAG.search(" ".join(argv))
        tag = tag_match.group(0).encode() if tag_match else b""
        inputs = []
        for key in sorted(task.reads):
            path = self.by_key.get(key, key)
            try:
                digest = _digest_file(path, tag)
            except OSError:
                return None  # a missing input: let the step run and say what is wrong
            label = _replace_all(path, [(o.decode(), n.decode()) for o, n in names]) if names else _normal(path)
            inputs.append((label, digest))
        material = json.dumps({
            "common": self.common,
            "tool": self.identity(argv[0]),
            "argv": normal_argv,
            "inputs": sorted(inputs),
            "outputs": len(outputs),
            "cwd": cwd,
            "part": "assembly" if assembly else "",
        })  # fmt: skip
        if assembly:
            outputs = [assembly]
        return Prepared(
            key=hashlib.blake2b(material.encode(), digest_size=20).hexdigest(),
            tool=task.step.tool,
            outputs=tuple(outputs),
            names=tuple(names),
            tag=tag,
            text=task.step.kind.value in TEXT_KINDS,
            combined=combined_output,
        )


def _private_stub(task: Task) -> tuple[str, str] | None:
    """(the stub path this cicc writes, the one nvcc's plan names) where the two differ."""
    from ..graph.host_compile import stub_path
    from ..plan.dryrun import Kind

    if task.step.kind is not Kind.CICC:
        return None
    ours, nvccs = stub_path(task.argv), stub_path(task.step.argv)
    return (ours, nvccs) if ours and nvccs and ours != nvccs else None


def name_reaches_object(argv: Sequence[str]) -> bool:
    """Does any of the host compile's options let the object depend on its name or the
    working directory (NAME_REACHES)?"""
    return any(word != "-g0" and word.startswith(NAME_REACHES) for word in argv[1:])


def _without_output_name(argv: list[str]) -> list[str]:
    """gcc's ``-o NAME`` with the name left out (``-oNAME`` too)."""
    result, skip = [], False
    for word in argv:
        if skip:
            result.append("@@OUTPUT@@")
            skip = False
        elif word == "-o":
            result.append(word)
            skip = True
        elif word.startswith("-o") and len(word) > 2:
            result.append("-o@@OUTPUT@@")
        else:
            result.append(word)
    return result


_PLACEHOLDER = re.compile(rb"@@FN[TB]\d+@@")


def hide_names(data: bytes, prepared: Prepared, *, text: bool) -> bytes:
    """This run's temp names out of an output, for storage.  Text gets every name replaced by
    its placeholder; binary output only the pid part of the names, which keeps the length."""
    hiding = prepared.hiding() if text else None
    if hiding is not None:
        pattern, table = hiding
        data = pattern.sub(lambda m: table[m.group(0)], data)
    return data.replace(prepared.tag, TAG_PLACEHOLDER) if prepared.tag else data


def restore_names(data: bytes, prepared: Prepared, *, text: bool) -> bytes:
    """This run's temp names into a stored output."""
    if prepared.tag:
        data = data.replace(TAG_PLACEHOLDER, prepared.tag)
    if text and prepared.names:
        table = prepared.showing()
        data = _PLACEHOLDER.sub(lambda m: table.get(m.group(0), m.group(0)), data)
    return data


def _replace_all(text: str, replacements: Sequence[tuple[str, str]]) -> str:
    for old, new in replacements:
        text = text.replace(old, new)
    return _normal(text)


def _normal(text: str) -> str:
    return TEMP_TAG.sub("tmpxft_@", text)


def _digest_file(path: str, tag: bytes) -> str:
    """The content's hash, with this run's temp tag normalised: fatbinary embeds its inputs'
    names and the .cudafe1.cpp #includes the stub by name, so the tag would make every run's
    key new."""
    data = read_bytes(path)
    if tag:
        data = data.replace(tag, TAG_PLACEHOLDER)
    return hashlib.blake2b(data, digest_size=20).hexdigest()


