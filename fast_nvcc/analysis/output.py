"""Writing the analysis's files: whole or not at all, a failure as one line."""

from __future__ import annotations

import os

from ..files import replace_atomically
from .records import AnalysisError


def write_text(path: str, text: str) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)


def write_atomically(path: str, write) -> None:
    try:
        replace_atomically(path, write)
    except OSError as exc:
        raise AnalysisError(f"cannot write {path}: {exc.strerror or exc}") from None


def extension(path: str) -> str:
    return os.path.splitext(path)[1].lstrip(".").lower()
