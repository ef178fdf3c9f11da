"""Run commands inside a fresh memory cgroup of a given size: what a container's ``--memory`` or a
CI runner's limit does to a build, on a machine where we are root.

    with MemoryCgroup(int(1.2 * 2**30)) as group:
        subprocess.run(group.wrap(["ninja", "-j32"]))
        print(group.oom_kills(), group.peak())

The cgroup is made under this process's own memory cgroup (v1), or under the nearest v2 cgroup
that can delegate the memory controller; :func:`MemoryCgroup.unavailable` says why neither
works.  On exit, what still runs in it is killed and the directory removed.
"""

from __future__ import annotations

import itertools
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fast_nvcc.machine.headroom import Cgroup, read_level, this_process_cgroups

_SERIALS = itertools.count(1)

# Writes its own pid into the cgroup, then execs the command: everything it starts is inside.
_ENTER = "import os, sys; open(sys.argv[1], 'w').write(str(os.getpid())); os.execvp(sys.argv[2], sys.argv[2:])"


class CgroupUnavailable(Exception):
    pass


class MemoryCgroup:
    def __init__(self, limit: int, *, name: str = "fast_nvcc-bench") -> None:
        self.limit = limit
        self.cgroup = _make(f"{name}-{os.getpid()}-{next(_SERIALS)}", limit)

    @staticmethod
    def unavailable() -> str | None:
        """Why no memory cgroup can be made here; None when one can."""
        try:
            MemoryCgroup(64 << 20, name="fast_nvcc-probe").close()
        except CgroupUnavailable as exc:
            return str(exc)
        return None

    @property
    def path(self) -> str:
        return self.cgroup.path

    @property
    def procs(self) -> str:
        return os.path.join(self.path, "cgroup.procs")

    def wrap(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside this cgroup (a Python shim enters it, then execs the command)."""
        return [sys.executable, "-c", _ENTER, self.procs, *argv]

    def oom_kills(self) -> int:
        level = read_level(self.cgroup)
        return 0 if level is None else level.oom_kills

    def peak(self) -> int:
        """The most memory the cgroup held (page cache included), in bytes."""
        name = "memory.max_usage_in_bytes" if self.cgroup.version == 1 else "memory.peak"
        try:
            return int(Path(self.path, name).read_text())
        except (OSError, ValueError):
            return 0

    def close(self) -> None:
        for _ in range(50):
            pids = _pids(self.procs)
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.1)
        for _ in range(50):
            try:
                os.rmdir(self.path)
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.1)  # the kernel frees the last task's memory a moment after it exits

    def __enter__(self) -> MemoryCgroup:  # noqa: PYI034 (typing.Self: Python 3.11)
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _make(name: str, limit: int) -> Cgroup:
    mine = this_process_cgroups()
    if not mine:
        raise CgroupUnavailable("no memory cgroup is mounted here (/proc/self/cgroup, /proc/self/mountinfo)")
    reasons = []
    for parent in mine:
        path = os.path.join(parent.path, name)
        try:
            os.mkdir(path)
        except OSError as exc:
            reasons.append(f"{parent.path}: {exc.strerror}")
            continue
        child = Cgroup(parent.version, path)
        limit_file = "memory.limit_in_bytes" if parent.version == 1 else "memory.max"
        if parent.version == 2 and not os.path.exists(os.path.join(path, limit_file)):
            try:  # delegate the memory controller; refused where the parent holds processes
                Path(parent.path, "cgroup.subtree_control").write_text("+memory")
            except OSError as exc:
                reasons.append(f"{parent.path}: memory controller not delegated ({exc.strerror})")
                os.rmdir(path)
                continue
        try:
            Path(path, limit_file).write_text(str(limit))
            if parent.version == 1 and os.path.exists(os.path.join(path, "memory.memsw.limit_in_bytes")):
                Path(path, "memory.memsw.limit_in_bytes").write_text(str(limit))  # no swap either
            elif parent.version == 2 and os.path.exists(os.path.join(path, "memory.swap.max")):
                Path(path, "memory.swap.max").write_text("0")
        except OSError as exc:
            reasons.append(f"{path}: {exc.strerror}")
            os.rmdir(path)
            continue
        return child
    raise CgroupUnavailable("cannot make a memory cgroup: " + "; ".join(reasons))


def _pids(procs: str) -> list[int]:
    try:
        return [int(p) for p in Path(procs).read_text().split()]
    except (OSError, ValueError):
        return []
