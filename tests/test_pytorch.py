"""PyTorch extensions through fast_nvcc: ``PYTORCH_NVCC="fast_nvcc /path/to/nvcc"``.

``torch.utils.cpp_extension`` writes a build.ninja whose CUDA compile rule runs
``$nvcc_from_env --generate-dependencies-with-compile --dependency-output $out.d $cuda_cflags
-c $in -o $out $cuda_post_cflags``, ``nvcc_from_env`` being ``PYTORCH_NVCC`` when it is set
(older versions put it in ``$nvcc`` itself), so the variable takes a launcher as users give it
ccache.  The same two-architecture extension (``TORCH_CUDA_ARCH_LIST``) is built by
``cpp_extension.load`` with plain nvcc and through fast_nvcc, in the same directory, and the
objects are compared byte for byte after masking nvcc's temp names; where a GPU is present,
the kernel runs.  A third build puts ccache in front (``PYTORCH_NVCC="ccache nvcc"``,
``CCACHE_PREFIX=fast_nvcc``, docs/cache.md).

Needs torch with CUDA, its CUDA toolkit (``CUDA_HOME``) and ninja; skipped where they are not
installed (CI has no torch).
"""

from __future__ import annotations

import ctypes
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import mask

torch = pytest.importorskip("torch", reason="torch is not installed: the PyTorch extension test needs it")
cpp_extension = pytest.importorskip("torch.utils.cpp_extension", reason="torch has no cpp_extension")

REPO = Path(__file__).resolve().parent.parent
NAME = "fast_nvcc_axpy"
ARCH_LIST = "8.0;9.0+PTX"  # sm_80 and sm_90 machine code, compute_90 PTX for later GPUs

SOURCE = """
#include <cuda_runtime.h>

template <typename T>
__global__ void axpy_kernel(T a, const T* x, T* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

extern "C" int fast_nvcc_axpy(float a, const float* x, float* y, int n) {
  axpy_kernel<float><<<(n + 255) / 256, 256>>>(a, x, y, n);
  return static_cast<int>(cudaDeviceSynchronize());
}
"""

# A fresh interpreter per build: load() names a rebuilt extension anew within one process.
BUILD = """
import sys
import torch.utils.cpp_extension as cpp_extension
cpp_extension.load(name=sys.argv[1], sources=[sys.argv[2]], build_directory=sys.argv[3],
                   with_cuda=True, is_python_module=False, verbose=True)
"""


def _skip_reason() -> str | None:
    if torch.version.cuda is None:
        return "torch is built without CUDA"
    if cpp_extension.CUDA_HOME is None:
        return "no CUDA toolkit for torch (CUDA_HOME)"
    if not cpp_extension.is_ninja_available():
        return "no ninja: cpp_extension.load needs it (and PYTORCH_NVCC only reaches ninja builds)"
    return None


pytestmark = [pytest.mark.nvcc, pytest.mark.skipif(_skip_reason() is not None, reason=str(_skip_reason()))]


def build(source: Path, directory: Path, pytorch_nvcc: str, log: Path | None, *,
          extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    directory.mkdir()
    keep = ("FAST_NVCC_CACHE_DIR", "FAST_NVCC_POOL_DIR")  # the test session's, as helpers.run_tool
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAST_NVCC_") or k in keep}
    env.update(
        PYTORCH_NVCC=pytorch_nvcc,
        TORCH_CUDA_ARCH_LIST=ARCH_LIST,
        PYTHONPATH=os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p),
    )
    if log is not None:
        env["FAST_NVCC_LOG"] = str(log)
    env.update(extra_env or {})
    done = subprocess.run([sys.executable, "-c", BUILD, NAME, str(source), str(directory)], env=env,
                          capture_output=True, text=True, timeout=600, check=False)  # fmt: skip
    assert done.returncode == 0, f"PYTORCH_NVCC={pytorch_nvcc}:\n{done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    """The extension built by plain nvcc and by fast_nvcc, one after the other in one directory
    (the object path is on the command line); the plain build is moved aside."""
    root = tmp_path_factory.mktemp("pytorch")
    source = root / "axpy.cu"
    source.write_text(SOURCE)
    nvcc = os.path.join(cpp_extension.CUDA_HOME, "bin", "nvcc")
    directory = root / "build"
    plain_run = build(source, directory, shlex.quote(nvcc), None)
    plain = directory.rename(root / "plain")
    log = root / "fast_nvcc.jsonl"
    launcher = shlex.join([sys.executable, "-m", "fast_nvcc", nvcc])  # what `fast_nvcc nvcc` runs
    fast_run = build(source, directory, launcher, log)
    return plain, directory, log, plain_run, fast_run


def test_extension_builds_through_ccache_and_fast_nvcc(builds, tmp_path):
    """ccache in front (``PYTORCH_NVCC="ccache nvcc"``), fast_nvcc running its misses
    (``CCACHE_PREFIX``, one executable: a script here, the console script for a user)."""
    if shutil.which("ccache") is None:
        pytest.skip("ccache is not installed (scripts/setup-env installs Debian's as root)")
    plain, _, _, _, _ = builds
    source = plain.parent / "axpy.cu"
    nvcc = os.path.join(cpp_extension.CUDA_HOME, "bin", "nvcc")
    prefix = tmp_path / "fast_nvcc"
    prefix.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m fast_nvcc "$@"\n')
    prefix.chmod(0o755)
    log = tmp_path / "fast_nvcc.jsonl"
    ccache_env = {"CCACHE_DIR": str(tmp_path / "ccache"), "CCACHE_PREFIX": str(prefix),
                  "CCACHE_CONFIGPATH": str(tmp_path / "ccache.conf")}  # fmt: skip
    (tmp_path / "ccache.conf").write_text("")
    directory = tmp_path / "build"
    done = build(source, directory, shlex.join(["ccache", nvcc]), log, extra_env=ccache_env)
    assert "ccache" in done.stdout + done.stderr  # ninja -v shows the command
    (record,) = [json.loads(line) for line in log.read_text().splitlines()]  # the miss, through fast_nvcc
    assert record["mode"] == "dag" and record["exit_code"] == 0
    objects = sorted(p.name for p in plain.glob("*.o"))
    assert objects and sorted(p.name for p in directory.glob("*.o")) == objects
    for name in objects:
        assert mask((directory / name).read_bytes()) == mask((plain / name).read_bytes()), name


def test_extension_builds_through_fast_nvcc(builds):
    plain, fast, log, plain_run, fast_run = builds
    assert "fast_nvcc" in fast_run.stdout + fast_run.stderr  # ninja -v shows the command
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(records) == 1, records
    record = records[0]
    assert record["mode"] == "dag", record.get("reason")
    assert record["exit_code"] == 0
    archs = {step["arch"] for step in record["steps"] if step["tool"] == "cicc"}
    assert archs == {"compute_80", "compute_90"}, archs

    objects = sorted(p.name for p in plain.glob("*.o"))
    assert objects and sorted(p.name for p in fast.glob("*.o")) == objects
    for name in objects:
        assert mask((fast / name).read_bytes()) == mask((plain / name).read_bytes()), name


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU to run the kernel on")
def test_extension_kernel_runs(builds):
    _, fast, _, _, _ = builds
    library = ctypes.CDLL(str(fast / f"{NAME}.so"))
    library.fast_nvcc_axpy.argtypes = [ctypes.c_float, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
    n = 10_000
    x = torch.arange(n, dtype=torch.float32, device="cuda")
    y = torch.ones(n, dtype=torch.float32, device="cuda")
    torch.cuda.synchronize()
    assert library.fast_nvcc_axpy(2.0, x.data_ptr(), y.data_ptr(), n) == 0  # cudaSuccess
    expected = 2.0 * torch.arange(n, dtype=torch.float32) + 1.0
    assert torch.equal(y.cpu(), expected)
