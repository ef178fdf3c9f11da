"""Where the machine-wide pool's files live, and whether a claim among them is live, in a module
of its own: the lean path (:mod:`fast_nvcc.lean`) looks at the pool before anything else of
fast_nvcc is imported (:mod:`.pool_files` holds what the files mean)."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Mapping


def pool_directory(env: Mapping[str, str]) -> str:
    """One place per user and machine, whatever ``$TMPDIR`` a build sets (a build that points
    TMPDIR at a private directory must still share the machine's cores): FAST_NVCC_POOL_DIR,
    else the user's runtime directory, else /dev/shm, else /tmp (never $TMPDIR)."""
    if env.get("FAST_NVCC_POOL_DIR"):
        return env["FAST_NVCC_POOL_DIR"]
    runtime = env.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isdir(runtime):
        return os.path.join(runtime, "fast_nvcc-slots")
    for base in ("/dev/shm", "/tmp"):
        if os.path.isdir(base) and os.access(base, os.W_OK | os.X_OK):
            return os.path.join(base, f"fast_nvcc-slots-{os.getuid()}")
    return os.path.join(os.path.expanduser("~"), ".cache", "fast_nvcc", "slots")


def live(directory: str, prefix: str) -> list[str]:
    """The names of live claims in ``directory`` starting with ``prefix``, sorted."""
    try:
        names = sorted(n for n in os.listdir(directory) if n.startswith(prefix))
    except OSError:
        return []
    return [n for n in names if is_live(os.path.join(directory, n))]


def is_live(path: str) -> bool:
    """Its owner holds an flock on it; a claim we can lock belongs to a dead process (and
    goes)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False  # gone meanwhile (granted or withdrawn)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True
    else:
        with contextlib.suppress(OSError):
            os.remove(path)
        return False
    finally:
        os.close(fd)
