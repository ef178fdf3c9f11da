"""Where a relative FAST_NVCC_LOG goes: the directory the build was started in, not the
compile's.

ninja runs every compile in the build directory and CMake's Makefiles ``cd`` into one directory
per target, so ``FAST_NVCC_LOG=build.jsonl cmake --build build`` would scatter ``build.jsonl``
under ``build/``, where nobody looks.  The user named the file from where they typed the
command, and that command is the outermost process that still holds ``FAST_NVCC_LOG`` with the
same value in the environment it was started with: the chain of ancestors that inherited it
ends there (the shell above it had no such variable, or another value).  A build tool run with
``-C DIR`` (``ninja -C build``), or ``cmake --build DIR``, moved into DIR itself, so where it
holds the variable first, its parent's directory counts.  Read from ``/proc`` (Linux); where it cannot be read, the compile's
own directory counts, as before.
"""

from __future__ import annotations

import os

# Ancestors to climb at most: pip -> python -> setup.py -> cmake -> ninja -> sh -> fast_nvcc is
# seven; the rest is room, never a walk to init.
_MOST_ANCESTORS = 32
# The build tools that chdir into a directory named on their command line, and its options.
_MOVES_ITSELF = {
    "ninja": ("-C",), "samu": ("-C",), "make": ("-C", "--directory"), "gmake": ("-C", "--directory"),
    "cmake": ("--build",),
}  # fmt: skip


def resolve_log_path(path: str, *, name: str = "FAST_NVCC_LOG") -> str:
    """``path`` (the value of the variable ``name``) as an absolute path."""
    if os.path.isabs(path):
        return path
    base = build_start_directory(f"{name}={path}".encode()) or os.getcwd()
    return os.path.normpath(os.path.join(base, path))


def build_start_directory(entry: bytes, *, pid: int | None = None) -> str | None:
    """The working directory of the outermost ancestor of ``pid`` (default: this process)
    started with ``entry`` (``NAME=value``) in its environment; None where none was, or
    ``/proc`` cannot tell."""
    own = os.getpid() if pid is None else pid
    holder = own
    for _ in range(_MOST_ANCESTORS):
        parent = _parent_pid(holder)
        if parent is None or parent <= 1 or entry not in _environment(parent):
            break
        holder = parent
    if holder == own:
        return None
    if _moved_itself(holder):
        parent = _parent_pid(holder)
        holder = parent if parent is not None and parent > 1 else holder
    try:
        return os.readlink(f"/proc/{holder}/cwd")
    except OSError:
        return None


def _parent_pid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split after its last ')'
        return int(stat.rsplit(b")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _environment(pid: int) -> list[bytes]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            return handle.read().split(b"\0")
    except OSError:
        return []


def _moved_itself(pid: int) -> bool:
    """A build tool that moves into the directory it is given: ``ninja -C DIR``,
    ``make -C DIR``, ``cmake --build DIR``."""
    try:
        with open(f"/proc/{pid}/comm", "rb") as handle:
            tool = handle.read().strip().decode(errors="replace")
        if tool not in _MOVES_ITSELF:
            return False
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            argv = handle.read().decode(errors="replace").split("\0")[1:]
    except OSError:
        return False
    return any(arg.startswith(_MOVES_ITSELF[tool]) for arg in argv)
