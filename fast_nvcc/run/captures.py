"""Where each step's stdout and stderr wait until they are forwarded in nvcc's order: memory.

The scheduler captures every step's output to a file and forwards it once every earlier step
has been forwarded.  Those files lived in the work directory, in ``$TMPDIR``: on a full file
system the step's own message (gcc's ``No space left on device``) could not be written there
either, and the compile failed without a word, where nvcc prints it.  An anonymous memory file
(``memfd_create``) has no file system to fill, and nothing of it outlives fast_nvcc, however
it dies.  Its readers (the forwarding, the cache, ``--save``) open it by its
``/proc/self/fd`` path like any other file.  Where there is no memfd or no ``/proc``, or no
descriptor left, a capture is a file in the work directory, as before.

A step that printed nothing gives its descriptor back at once (most steps print nothing): a
many-source ``-lib`` for many architectures has more than a thousand captures, more than a
default limit of open files.
"""

from __future__ import annotations

import os
import threading


class Captures:
    """The capture files of one run, by name; :meth:`close` frees them all."""

    def __init__(self, workdir: str) -> None:
        self.workdir = workdir
        self._memory = hasattr(os, "memfd_create") and os.path.isdir("/proc/self/fd")
        self._descriptors: dict[str, int] = {}
        self._lock = threading.Lock()

    def path(self, name: str) -> str:
        """The path of capture ``name``, made empty the first time it is asked for."""
        with self._lock:
            fd = self._descriptors.get(name)
            if fd is None and self._memory:
                try:
                    fd = os.memfd_create(f"fast_nvcc-{name}", os.MFD_CLOEXEC)
                except OSError:  # ENOSYS on an old kernel, EMFILE: a file will do
                    fd = None
                else:
                    self._descriptors[name] = fd
        return os.path.join(self.workdir, name) if fd is None else _proc_path(fd)

    def discard_if_empty(self, path: str) -> bool:
        """Free the capture at ``path`` if nothing was written to it; True if it is gone."""
        with self._lock:
            for name, fd in self._descriptors.items():
                if _proc_path(fd) == path:
                    if os.fstat(fd).st_size:
                        return False
                    del self._descriptors[name]
                    os.close(fd)
                    return True
        return False

    def close(self) -> None:
        with self._lock:
            descriptors, self._descriptors = list(self._descriptors.values()), {}
        for fd in descriptors:
            os.close(fd)


def _proc_path(fd: int) -> str:
    return f"/proc/self/fd/{fd}"


def same_output() -> bool:
    """stdout and stderr are one file (a terminal, 2>&1): keep each step's two streams in one
    capture so their interleaving survives."""
    try:
        out, err = os.fstat(1), os.fstat(2)
    except OSError:
        return False
    return (out.st_dev, out.st_ino) == (err.st_dev, err.st_ino)
