from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from fast_nvcc.plan.toolchain import pypi_nvccs

from helpers import copy_sources, nvcc_version
from sccache_servers import start_redis, stop

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from memory_cgroup import CgroupUnavailable, MemoryCgroup  # noqa: E402


def _toolchains() -> list[str]:
    """Every nvcc found: the one on PATH, those installed from PyPI (pip install '.[cuda]') and
    those FAST_NVCC_TOOLCHAINS names (docs/toolchains.md)."""
    found: dict[str, str] = {}
    named = _named_toolchains(os.environ.get("FAST_NVCC_TOOLCHAINS", ""))
    for path in [shutil.which("nvcc"), *pypi_nvccs(), *named]:
        if path:
            found.setdefault(os.path.realpath(path), path)
    return list(found.values())


def _named_toolchains(value: str) -> list[str]:
    """FAST_NVCC_TOOLCHAINS: toolchain folders (FOLDER/bin/nvcc) or nvcc paths, colon-separated,
    as scripts/toolchains prints them. One that names no nvcc stops the session: a release run
    that silently tested fewer versions would claim what it did not check."""
    paths = []
    for entry in filter(None, value.split(os.pathsep)):
        path = os.path.join(entry, "bin", "nvcc") if os.path.isdir(entry) else entry
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            msg = f"FAST_NVCC_TOOLCHAINS names {entry!r}, which has no executable nvcc"
            raise pytest.UsageError(msg)
        paths.append(path)
    return paths


TOOLCHAINS = _toolchains()

# Keep the user's ~/.cache/fast_nvcc (history, cache) and slot pool out of the tests.
_SESSION_DIR = tempfile.mkdtemp(prefix="fast_nvcc-tests-")
os.environ["FAST_NVCC_CACHE_DIR"] = os.path.join(_SESSION_DIR, "cache")
os.environ["FAST_NVCC_POOL_DIR"] = os.path.join(_SESSION_DIR, "slots")
atexit.register(shutil.rmtree, _SESSION_DIR, True)


def _toolchain_id(path: str) -> str:
    """system (nvcc on PATH), pypi, or nvccX.Y for those FAST_NVCC_TOOLCHAINS names: select
    one version's cases with ``-k nvcc11.8``."""
    if path == shutil.which("nvcc"):
        return "system"
    if "site-packages" in path:
        return "pypi"
    major, minor = nvcc_version(path)
    return f"nvcc{major}.{minor}"


# The tests of what fast_nvcc itself decides (its schedule, pool, cache, servers, signals) run
# against the first toolchain only: another nvcc version changes nothing they check, and each one
# more toolchain adds minutes to CI.  FAST_NVCC_EVERY_TOOLCHAIN=1 (the release tier,
# docs/toolchains.md) runs them against every toolchain too.
EVERY_TOOLCHAIN = os.environ.get("FAST_NVCC_EVERY_TOOLCHAIN") == "1"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "nvcc" in metafunc.fixturenames:
        toolchains = TOOLCHAINS
        if metafunc.definition.get_closest_marker("one_toolchain") and not EVERY_TOOLCHAIN:
            toolchains = TOOLCHAINS[:1]
        if not toolchains:
            metafunc.parametrize("nvcc", [pytest.param(None, marks=pytest.mark.skip("no nvcc"))])
        else:
            metafunc.parametrize("nvcc", toolchains, ids=[_toolchain_id(p) for p in toolchains])


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
