"""Real servers on 127.0.0.1 for the remote tests: an sccache-dist scheduler and build server
(token auth, the overlay builder in bubblewrap), an sccache client server with its own port
and cache, and a Redis server.  Each is a child of the test process, started in the
foreground (SCCACHE_NO_DAEMON) so that stopping it is a kill of a known pid."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

START_TIMEOUT = 30.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_port(port: int, proc: subprocess.Popen, log: Path, *, timeout: float = START_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[0]} exited ({proc.returncode}):\n{log.read_text(errors='replace')}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"{proc.args[0]} did not listen on {port}:\n{log.read_text(errors='replace')}")


def stop(proc: subprocess.Popen | None) -> None:
    """SIGTERM, then SIGKILL: its whole process group (sccache-dist's server runs bwrap)."""
    if proc is None or proc.poll() is not None:
        return
    for signum, grace in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, signum)
        except ProcessLookupError:
            pass
        try:
            proc.wait(grace)
            return
        except subprocess.TimeoutExpired:
            continue


def spawn(argv: list[str], *, env: dict[str, str], log: Path, cwd: Path) -> subprocess.Popen:
    with open(log, "ab") as out:
        return subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                cwd=cwd, start_new_session=True)  # fmt: skip


def namespaces_refusal(bwrap: str) -> str | None:
    """Why the overlay builder cannot sandbox here (None when it can)."""
    if os.geteuid() != 0:
        return "sccache-dist's overlay builder must run as root"
    probe = subprocess.run([bwrap, "--ro-bind", "/", "/", "--unshare-all", "true"], capture_output=True, check=False)
    if probe.returncode != 0:
        return f"bubblewrap cannot create namespaces here: {probe.stderr.decode(errors='replace').strip()}"
    return None


@dataclass
class Cluster:
    """A scheduler and one build server; ``client_token`` is what clients must present."""

    root: Path
    scheduler_url: str
    client_token: str
    scheduler: subprocess.Popen
    server: subprocess.Popen | None
    server_port: int
    sccache_dist: str
    bwrap: str

    def client_config(self, path: Path, *, token: str | None = None) -> Path:
        # The clients of one cluster share where they keep packaged toolchains (cicc is
        # packaged once, not once per test), and none is left in the user's ~/.cache.
        path.write_text(
            "[dist]\n"
            f'scheduler_url = "{self.scheduler_url}"\n'
            f'cache_dir = "{self.root / "client-toolchains"}"\n'
            "toolchains = []\n"
            "[dist.auth]\n"
            'type = "token"\n'
            f'token = "{token or self.client_token}"\n'
        )
        return path

    def start_server(self, *, bwrap: str | None = None) -> None:
        """The build server, with ``bwrap`` as its sandbox program (a stand-in that kills the
        server mid-compile, for one test)."""
        conf = self.root / f"server-{self.server_port}.conf"
        build = self.root / "build"
        conf.write_text(
            f'cache_dir = "{self.root / "toolchains"}"\n'
            f'public_addr = "127.0.0.1:{self.server_port}"\n'
            f'scheduler_url = "{self.scheduler_url}"\n'
            "[builder]\n"
            'type = "overlay"\n'
            f'build_dir = "{build}"\n'
            f'bwrap_path = "{bwrap or self.bwrap}"\n'
            "[scheduler_auth]\n"
            'type = "token"\n'
            'token = "server token"\n'
        )
        env = {**os.environ, "SCCACHE_NO_DAEMON": "1", "SCCACHE_LOG": "info"}
        log = self.root / "server.log"
        self.server = spawn([self.sccache_dist, "server", "--config", str(conf)], env=env, log=log, cwd=self.root)
        wait_for_port(self.server_port, self.server, log)

    def stop_server(self) -> None:
        stop(self.server)
        self.server = None

    def stop(self) -> None:
        """Everything down, and the packaged toolchains (hundreds of MB) gone: pytest keeps
        its last temp directories."""
        self.stop_server()
        stop(self.scheduler)
        for name in ("toolchains", "build", "client-toolchains"):
            shutil.rmtree(self.root / name, ignore_errors=True)


def start_cluster(root: Path, *, sccache_dist: str, bwrap: str) -> Cluster:
    root.mkdir(parents=True, exist_ok=True)
    port = free_port()
    conf = root / "scheduler.conf"
    conf.write_text(
        f'public_addr = "127.0.0.1:{port}"\n'
        "[client_auth]\n"
        'type = "token"\n'
        'token = "team token"\n'
        "[server_auth]\n"
        'type = "token"\n'
        'token = "server token"\n'
    )
    env = {**os.environ, "SCCACHE_NO_DAEMON": "1", "SCCACHE_LOG": "info"}
    log = root / "scheduler.log"
    scheduler = spawn([sccache_dist, "scheduler", "--config", str(conf)], env=env, log=log, cwd=root)
    try:
        wait_for_port(port, scheduler, log)
    except BaseException:
        stop(scheduler)
        raise
    return Cluster(root, f"http://127.0.0.1:{port}", "team token", scheduler, None, free_port(), sccache_dist, bwrap)


@dataclass
class Client:
    """An sccache client server: its port, cache and configuration, as the variables a
    compile needs to reach it."""

    env: dict[str, str]
    proc: subprocess.Popen
    sccache: str
    log: Path

    def stats(self) -> dict:
        out = subprocess.run([self.sccache, "--show-stats", "--stats-format", "json"], env={**os.environ, **self.env},
                             capture_output=True, check=True)  # fmt: skip
        return json.loads(out.stdout)["stats"]

    def dist_status(self) -> dict:
        out = subprocess.run([self.sccache, "--dist-status"], env={**os.environ, **self.env}, capture_output=True,
                             check=True)  # fmt: skip
        return json.loads(out.stdout)


def start_client(root: Path, *, sccache: str, config: Path | None, extra_env: dict[str, str] | None = None,
                 log_level: str = "sccache::compiler::compiler=debug") -> Client:
    """A client server (the tests read its compiler decisions from the log at ``log_level``;
    a benchmark asks for less)."""
    root.mkdir(parents=True, exist_ok=True)
    port = free_port()
    env = {
        "SCCACHE_SERVER_PORT": str(port),
        "SCCACHE_DIR": str(root / "cache"),
        "SCCACHE_IDLE_TIMEOUT": "0",
        # no config of the user's may leak in: an empty file when the test wants no cluster
        "SCCACHE_CONF": str(config or _empty(root / "no-dist.conf")),
        **(extra_env or {}),
    }
    log = root / "client.log"
    proc = spawn([sccache], env={**os.environ, **env, "SCCACHE_START_SERVER": "1", "SCCACHE_NO_DAEMON": "1",
                                  "SCCACHE_LOG": log_level}, log=log, cwd=root)  # fmt: skip
    try:
        wait_for_port(port, proc, log)
    except BaseException:
        stop(proc)
        raise
    return Client(env, proc, sccache, log)


def wait_for_servers(client: Client, count: int, *, timeout: float = START_TIMEOUT) -> None:
    """Until the scheduler has ``count`` build servers (a server registers after it listens)."""
    deadline = time.monotonic() + timeout
    status: dict = {}
    while time.monotonic() < deadline:
        status = client.dist_status()
        scheduler = status.get("SchedulerStatus")
        if scheduler and scheduler[1].get("num_servers") == count:
            return
        time.sleep(0.1)
    raise RuntimeError(f"the scheduler never had {count} build servers: {status}")


def _empty(path: Path) -> Path:
    path.write_text("")
    return path


@dataclass
class Redis:
    url: str
    proc: subprocess.Popen


def start_redis(root: Path, *, redis_server: str) -> Redis:
    root.mkdir(parents=True, exist_ok=True)
    port = free_port()
    log = root / "redis.log"
    proc = spawn([redis_server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                  "--dir", str(root)], env=dict(os.environ), log=log, cwd=root)  # fmt: skip
    try:
        wait_for_port(port, proc, log)
    except BaseException:
        stop(proc)
        raise
    return Redis(f"redis://127.0.0.1:{port}", proc)
