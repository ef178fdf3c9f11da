"""Finding nvcc: ``--nvcc``, then FAST_NVCC_NVCC, PATH, CUDA_HOME/CUDA_PATH, then PyPI's CUDA."""

from __future__ import annotations

import glob
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping

from ..errors import FastNvccError


class ToolchainError(FastNvccError):
    """No usable nvcc."""


def find_nvcc(explicit: str | None = None, *, env: Mapping[str, str] = os.environ,
              given_as: str = "--nvcc") -> str:  # fmt: skip
    """The nvcc to run: ``explicit`` (``given_as`` says how the user gave it: ``--nvcc``, or
    the compiler in the launcher form), else the first found in FAST_NVCC_NVCC, PATH, ..."""
    for source, candidate in _candidates(explicit, env, given_as):
        if candidate is None:
            continue
        path = shutil.which(candidate, path=env.get("PATH")) if os.sep not in candidate else candidate
        if path and os.access(path, os.X_OK) and not os.path.isdir(path) and not _is_us(path):
            return path
        if source in (given_as, "FAST_NVCC_NVCC"):
            raise ToolchainError(f"{source} names {candidate!r}, which is not an executable nvcc")
    raise ToolchainError(
        "cannot find nvcc: pass --nvcc PATH, set FAST_NVCC_NVCC or CUDA_HOME, put nvcc on PATH,"
        " or install a CUDA toolchain from PyPI (pip install 'fast_nvcc[cuda]')"
    )


def pypi_nvccs() -> list[str]:
    """nvcc binaries of CUDA toolchains installed from PyPI (``nvidia-cuda-nvcc``)."""
    spec = importlib.util.find_spec("nvidia")
    if spec is None or not spec.submodule_search_locations:
        return []
    found = []
    for root in spec.submodule_search_locations:
        for path in sorted(glob.glob(os.path.join(root, "cu*", "bin", "nvcc"))):
            if os.access(path, os.X_OK):
                found.append(path)
        legacy = os.path.join(root, "cuda_nvcc", "bin", "nvcc")
        if os.access(legacy, os.X_OK):
            found.append(legacy)
    return found


def _candidates(explicit: str | None, env: Mapping[str, str], given_as: str):
    yield given_as, explicit
    yield "FAST_NVCC_NVCC", env.get("FAST_NVCC_NVCC") or None
    yield "PATH", "nvcc"
    for variable in ("CUDA_HOME", "CUDA_PATH"):
        root = env.get(variable)
        yield variable, os.path.join(root, "bin", "nvcc") if root else None
    for path in pypi_nvccs():
        yield "PyPI", path


def _is_us(path: str) -> bool:
    """A wrapper named nvcc that is fast_nvcc itself would call itself forever."""
    try:
        return os.path.samefile(path, sys.argv[0])
    except OSError:
        return False


def has_option(nvcc: str, option: str) -> bool:
    """Whether ``nvcc``'s ``--help`` lists ``option``: options come and go between versions
    (11.8 has no ``--split-compile``; 11.8, 12.4 and 12.5 no ``--fdevice-time-trace``, and their
    cicc rejects ``--device-time-trace``).  ``nvcc --help`` takes about 5 ms."""
    try:
        done = subprocess.run([nvcc, "--help"], capture_output=True, text=True, check=False)
    except OSError:
        return False
    return re.search(rf"(^|\s){re.escape(option)}(?![\w-])", done.stdout, re.MULTILINE) is not None
