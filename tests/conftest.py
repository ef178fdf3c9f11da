from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from fast_nvcc.toolchain import pypi_nvccs

from helpers import copy_sources


def _toolchains() -> list[str]:
    """Every nvcc found: the one on PATH and those installed from PyPI (pip install '.[cuda]')."""
    found: dict[str, str] = {}
    for path in [shutil.which("nvcc"), *pypi_nvccs()]:
        if path:
            found.setdefault(os.path.realpath(path), path)
    return list(found.values())


TOOLCHAINS = _toolchains()


def _toolchain_id(path: str) -> str:
    return "pypi" if "site-packages" in path else "system"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "nvcc" in metafunc.fixturenames:
        if not TOOLCHAINS:
            metafunc.parametrize("nvcc", [pytest.param(None, marks=pytest.mark.skip("no nvcc"))])
        else:
            metafunc.parametrize("nvcc", TOOLCHAINS, ids=[_toolchain_id(p) for p in TOOLCHAINS])


@pytest.fixture
def sources(tmp_path: Path) -> Path:
    """A fresh copy of tests/data/src."""
    return copy_sources(tmp_path / "src")
