"""Where the history and the other learned state live, in a module of its own: the lean path
(:mod:`fast_nvcc.lean`) reads the history before anything else of fast_nvcc is imported."""

from __future__ import annotations

import os
from collections.abc import Mapping

HISTORY_FILE = "history.sqlite"  # in the cache directory


def history_path(env: Mapping[str, str]) -> str:
    return os.path.join(cache_directory(env), HISTORY_FILE)


def cache_directory(env: Mapping[str, str]) -> str:
    if env.get("FAST_NVCC_CACHE_DIR"):
        return env["FAST_NVCC_CACHE_DIR"]
    base = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "fast_nvcc")
