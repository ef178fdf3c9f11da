"""Where each step's output waits (fast_nvcc.run.captures): anonymous memory files, read by their
/proc/self/fd path, given back at once when empty; a file in the work directory where no memory
file can be had; and whether stdout and stderr are one file."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from fast_nvcc.run.captures import Captures

MEMFD = hasattr(os, "memfd_create") and os.path.isdir("/proc/self/fd")


@pytest.fixture
def captures(tmp_path):
    made = Captures(str(tmp_path))
    yield made
    made.close()


@pytest.mark.skipif(not MEMFD, reason="no memfd_create or /proc")
def test_a_capture_is_a_memory_file_made_empty_once_and_kept_by_name(captures, tmp_path):
    path = captures.path("3.1")
    assert path.startswith("/proc/self/fd/")
    with open(path, "wb") as handle:
        handle.write(b"warning\n")
    assert captures.path("3.1") == path  # asked again: the same file, its content kept
    with open(path, "rb") as handle:
        assert handle.read() == b"warning\n"
    assert captures.path("3.2") != path
    assert os.listdir(tmp_path) == []  # nothing on the file system


def test_without_a_memory_file_a_capture_is_a_file_of_the_work_directory(tmp_path, monkeypatch):
    def no_memfd(*_args):
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(os, "memfd_create", no_memfd, raising=False)
    captures = Captures(str(tmp_path))
    assert captures.path("7.2") == str(tmp_path / "7.2")
    assert captures.discard_if_empty(str(tmp_path / "7.2")) is False  # a file: the caller's to remove
    captures.close()


@pytest.mark.skipif(not MEMFD, reason="no memfd_create or /proc")
@pytest.mark.parametrize(("content", "discarded"), [(b"", True), (b"x", False)])
def test_an_empty_capture_gives_its_descriptor_back(captures, content, discarded):
    path = captures.path("1.1")
    descriptor = int(os.path.basename(path))
    with open(path, "wb") as handle:
        handle.write(content)
    assert captures.discard_if_empty(path) is discarded
    assert _is_open(descriptor) is not discarded
    again = captures.path("1.1")  # freed: the name gets a new, empty file; kept: the same one
    assert os.path.getsize(again) == (0 if discarded else len(content))


@pytest.mark.skipif(not MEMFD, reason="no memfd_create or /proc")
def test_close_frees_every_capture(tmp_path):
    captures = Captures(str(tmp_path))
    paths = [captures.path(f"{i}.1") for i in range(3)]
    assert all(os.path.exists(p) for p in paths)
    captures.close()
    assert not any(_is_open(int(os.path.basename(p))) for p in paths)
    assert captures.discard_if_empty(paths[0]) is False  # not one of its captures any more


def _is_open(descriptor: int) -> bool:
    try:
        os.fstat(descriptor)
    except OSError:
        return False
    return True


@pytest.mark.parametrize(("stderr", "same"), [(subprocess.STDOUT, True), (subprocess.PIPE, False)],
                         ids=["2>&1", "apart"])  # fmt: skip
def test_same_output_tells_whether_stdout_and_stderr_are_one_file(stderr, same):
    code = "from fast_nvcc.run.captures import same_output; print(same_output())"
    proc = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=stderr, check=True)
    assert proc.stdout.decode().strip() == str(same)
