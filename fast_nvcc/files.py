"""Writing files so that no reader ever sees half of one: a temporary file in the same
directory, renamed over the target."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable


def replace_atomically(path: str, write: Callable[[str], None]) -> None:
    """Call ``write`` on a temporary path next to ``path``, then rename it into place."""
    directory = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(prefix=".fast_nvcc-", dir=directory)
    os.close(fd)
    try:
        write(tmp)
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)  # mkstemp's 0600 is not what the user's umask asks for
        os.replace(tmp, path)
    except BaseException:
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise


def write_atomically(path: str, data: bytes) -> None:
    def write(tmp: str) -> None:
        with open(tmp, "wb") as handle:
            handle.write(data)

    replace_atomically(path, write)


def read_bytes(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()
