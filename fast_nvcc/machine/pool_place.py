"""Where the machine-wide pool's files live, in a module of its own: the lean path
(:mod:`fast_nvcc.lean`) looks at the pool before anything else of fast_nvcc is imported."""

from __future__ import annotations

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
