"""A cicc or ptxas step written the way sccache runs it (:mod:`.sccache`).

Why cicc runs in a staging directory: sccache keys cicc on its arguments, and nvcc's argv
names temp files (``--include_file_name tmpxft_<pid>..._k.fatbin.c``, ``--module_id_file_name
/tmp/tmpxft_<pid>...``) whose pid part changes every run, so no second compile would ever hit.
In a private directory, as cwd, every temp file gets a relative name with a fixed tag instead;
the outputs come back with this run's names written in (cicc's outputs are text; the stub
names itself in a ``# 1 "..."`` line, and #includes the .fatbin.c by name).  ptxas's key holds
no temp name (only -arch, -m64 and such; its cubin embeds no name), so it runs as printed.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..files import read_bytes, write_atomically
from ..graph.tasks import Task
from ..plan.dryrun import TEMP_TAG, Kind, output_paths, temp_mentions

CANONICAL_TAG = "tmpxft_00000000_00000000"


@dataclass(frozen=True, slots=True)
class Staged:
    """One step as sccache runs it: its argv and cwd, and for a staged cicc the staged
    outputs to bring back (staged path, real path) and the names to write back."""

    argv: tuple[str, ...]
    cwd: str
    directory: str | None = None
    outputs: tuple[tuple[str, str], ...] = ()
    names: tuple[tuple[str, str], ...] = ()  # (staged name, real word), longest first


class Staging:
    """Writes a step the way sccache runs it, and brings a staged cicc's outputs back."""

    def __init__(self, sccache_path: str, *, env: Mapping[str, str], cwd: str, workdir: str) -> None:
        self.sccache_path = sccache_path
        self.env = env
        self.cwd = cwd
        self.workdir = workdir.rstrip("/") + "/"
        self._programs: dict[str, str | None] = {}

    def program(self, name: str) -> str | None:
        if name not in self._programs:
            self._programs[name] = shutil.which(name, path=self.env.get("PATH")) if os.sep not in name else name
        return self._programs[name]

    def stage(self, task: Task) -> Staged:
        argv = list(task.argv)
        program = self.program(argv[0]) or argv[0]
        if task.step.kind is not Kind.CICC:
            return Staged((self.sccache_path, program, *argv[1:]), self.cwd)
        directory = tempfile.mkdtemp(prefix=f"remote.{task.id}.", dir=self.workdir)
        outputs = output_paths(task.step.kind, argv)
        words = temp_mentions(argv) + [w for w in argv if w.startswith(self.workdir)]
        words += [w for w in outputs if w not in words]
        staged_names: dict[str, str] = {}
        for number, word in enumerate(words):
            base = os.path.basename(word)
            staged_names[word] = TEMP_TAG.sub(CANONICAL_TAG, base) if TEMP_TAG.search(base) else f"o{number}.{base}"
        if len(set(staged_names.values())) != len(staged_names):
            # names that would collide: as printed
            return Staged((self.sccache_path, program, *_input_third_from_last(argv[1:])), self.cwd, directory)
        for word, name in staged_names.items():
            real = os.path.join(self.cwd, word)
            if word not in outputs and os.path.isfile(real):
                _link_or_copy(real, os.path.join(directory, name))
        replacements = sorted(staged_names.items(), key=lambda item: len(item[0]), reverse=True)
        staged_argv = _input_third_from_last([_replace_words(word, replacements) for word in argv[1:]])
        return Staged(
            argv=(self.sccache_path, program, *staged_argv),
            cwd=directory,
            directory=directory,
            outputs=tuple((os.path.join(directory, staged_names[w]), os.path.join(self.cwd, w)) for w in outputs),
            names=tuple(sorted(((n, w) for w, n in staged_names.items()), key=lambda p: len(p[0]), reverse=True)),
        )

    def bring_back(self, task: Task, staged: Staged) -> str | None:
        """Move a successful step's outputs where nvcc has them; the reason when one is
        missing (then the step runs here)."""
        if staged.directory is None or not staged.outputs:
            missing = [p for p in output_paths(task.step.kind, task.argv) if not os.path.exists(os.path.join(self.cwd, p))]
            return f"sccache wrote no {missing[0]}" if missing else None
        pattern = re.compile("|".join(re.escape(n) for n, _ in staged.names).encode())
        table = {n.encode(): w.encode() for n, w in staged.names}
        for source, destination in staged.outputs:
            try:
                data = read_bytes(source)
            except OSError:
                return f"sccache wrote no {os.path.basename(destination)}"
            write_atomically(destination, pattern.sub(lambda m: table[m.group(0)], data))
        return None

    def discard(self, staged: Staged) -> None:
        if staged.directory is not None:
            shutil.rmtree(staged.directory, ignore_errors=True)


def _input_third_from_last(argv: list[str]) -> list[str]:
    """sccache 0.16 takes cicc's input to be the third word from the end (before ``-o X``);
    CUDA 13.5's nvcc puts ``--simt-only`` between the two.  Options before the input mean the
    same to cicc (the outputs are compared with nvcc's in the tests)."""
    inputs = [i for i, word in enumerate(argv) if word.endswith(".cpp1.ii")]
    if len(inputs) != 1 or len(argv) < 3 or argv[-2] != "-o" or inputs[0] == len(argv) - 3:
        return argv
    at = inputs[0]
    return argv[:at] + argv[at + 1 : -2] + [argv[at]] + argv[-2:]


def _replace_words(word: str, replacements: Sequence[tuple[str, str]]) -> str:
    for old, new in replacements:
        if old in word:
            word = word.replace(old, new)
    return word


def _link_or_copy(source: str, destination: str) -> None:
    try:
        os.link(source, destination)
    except OSError:
        shutil.copyfile(source, destination)
