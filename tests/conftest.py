from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from fast_nvcc.plan.toolchain import pypi_nvccs

from helpers import copy_sources
from sccache_servers import start_redis, stop

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from memory_cgroup import CgroupUnavailable, MemoryCgroup  # noqa: E402


def _toolchains() -> list[str]:
    """Every nvcc found: the one on PATH and those installed from PyPI (pip install '.[cuda]')."""
    found: dict[str, str] = {}
    for path in [shutil.which("nvcc"), *pypi_nvccs()]:
        if path:
            found.setdefault(os.path.realpath(path), path)
    return list(found.values())


TOOLCHAINS = _toolchains()

# Keep the user's ~/.cache/fast_nvcc (history, cache) and slot pool out of the tests.
_SESSION_DIR = tempfile.mkdtemp(prefix="fast_nvcc-tests-")
os.environ["FAST_NVCC_CACHE_DIR"] = os.path.join(_SESSION_DIR, "cache")
os.environ["FAST_NVCC_POOL_DIR"] = os.path.join(_SESSION_DIR, "slots")
atexit.register(shutil.rmtree, _SESSION_DIR, True)


def _toolchain_id(path: str) -> str:
    return "pypi" if "site-packages" in path else "system"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "nvcc" in metafunc.fixturenames:
        if not TOOLCHAINS:
            metafunc.parametrize("nvcc", [pytest.param(None, marks=pytest.mark.skip("no nvcc"))])
        else:
            metafunc.parametrize("nvcc", TOOLCHAINS, ids=[_toolchain_id(p) for p in TOOLCHAINS])


@pytest.fixture
def sources(tmp_path: Path) -> Path:
    """A fresh copy of tests/data/src."""
    return copy_sources(tmp_path / "src")


REDIS_SERVER = shutil.which("redis-server")


@pytest.fixture
def redis(tmp_path):
    """A real redis-server on 127.0.0.1 (a free port), for the tests of shared stores."""
    if REDIS_SERVER is None:
        pytest.skip("redis-server is not installed (scripts/setup-env installs Debian's redis-server as root)")
    server = start_redis(tmp_path / "redis", redis_server=REDIS_SERVER)
    try:
        yield server
    finally:
        stop(server.proc)


@pytest.fixture
def memory_cgroup():
    """Make real memory cgroups of a given size (removed afterwards); skip where this machine
    lets us make none."""
    made = []

    def make(limit: int) -> MemoryCgroup:
        try:
            group = MemoryCgroup(limit, name="fast_nvcc-test")
        except CgroupUnavailable as exc:
            pytest.skip(str(exc))
        made.append(group)
        return group

    yield make
    for group in made:
        group.close()
        assert not os.path.exists(group.path)
