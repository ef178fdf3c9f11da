"""``--split-sources @FILE`` (fast_nvcc.plan.split_option): the patterns read from a file, as
``fast_nvcc analyze --write-split`` writes it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from fast_nvcc.errors import FastNvccError
from fast_nvcc.plan.split_option import literal, matches, settings, split_file, with_split


def test_a_file_holds_one_pattern_a_line_commas_and_comments(tmp_path):
    (tmp_path / "split.txt").write_text(
        "# written by hand\n\ncast_grouped.cu\n  # indented comment\n a.cu , */activation/*.cu\n\n"
    )
    got = settings(16, f"@{tmp_path / 'split.txt'}", {})
    assert got == (16, ("cast_grouped.cu", "a.cu", "*/activation/*.cu"))


def test_the_environment_reads_a_file_too_relative_to_the_current_directory(tmp_path, monkeypatch):
    (tmp_path / "split.txt").write_text("a.cu\n")
    env = {"FAST_NVCC_SPLIT": "8", "FAST_NVCC_SPLIT_SOURCES": "@split.txt"}
    assert settings(None, None, env, cwd=str(tmp_path)) == (8, ("a.cu",))
    monkeypatch.chdir(tmp_path)
    assert settings(None, None, env) == (8, ("a.cu",))
    assert settings(4, "@split.txt", {}) == (4, ("a.cu",))


def test_a_file_with_no_pattern_splits_no_compile(tmp_path):
    (tmp_path / "split.txt").write_text("# written by fast_nvcc analyze --write-split: no split advised\n\n")
    split, patterns = settings(16, "@split.txt", {}, cwd=str(tmp_path))
    assert (split, patterns) == (None, ())
    assert with_split(["-c", "a.cu"], split, patterns, env={}, cwd=str(tmp_path)) == ["-c", "a.cu"]
    (tmp_path / "empty.txt").write_text("")
    assert settings(None, "@empty.txt", {}, cwd=str(tmp_path)) == (None, ())


def test_patterns_from_a_file_still_need_a_thread_count(tmp_path):
    (tmp_path / "split.txt").write_text("a.cu\n")
    with pytest.raises(FastNvccError, match="needs --split N"):
        settings(None, "@split.txt", {}, cwd=str(tmp_path))


@pytest.mark.parametrize(("sources", "env", "where"), [
    ("@missing.txt", {}, "--split-sources @missing.txt"),
    (None, {"FAST_NVCC_SPLIT_SOURCES": "@missing.txt"}, "FAST_NVCC_SPLIT_SOURCES @missing.txt"),
])  # fmt: skip
def test_a_missing_file_is_an_error_naming_it(tmp_path, sources, env, where):
    with pytest.raises(FastNvccError) as caught:
        settings(2, sources, env, cwd=str(tmp_path))
    message = str(caught.value)
    assert message.startswith(where) and str(tmp_path / "missing.txt") in message and "\n" not in message


def test_an_unreadable_file_is_an_error(tmp_path):
    (tmp_path / "latin1.txt").write_bytes(b"caf\xe9.cu\n")
    with pytest.raises(FastNvccError, match="cannot read"):
        settings(2, "@latin1.txt", {}, cwd=str(tmp_path))
    with pytest.raises(FastNvccError, match="cannot read"):
        settings(2, f"@{tmp_path}", {})  # a directory


@pytest.mark.parametrize("sources", ["@missing.txt", None])
def test_a_missing_file_on_the_command_line_is_one_line_and_runs_no_nvcc(tmp_path, sources):
    """As ``--split 0``: one ``fast_nvcc: error:`` line, exit 2, and nvcc never runs (the nvcc
    named here, launcher form, leaves a file behind: it does with a file that is there)."""
    nvcc = tmp_path / "nvcc"
    nvcc.write_text(f"#!/bin/sh\ntouch {tmp_path / 'nvcc-ran'}\n")
    nvcc.chmod(0o755)

    def fast_nvcc(file: str) -> subprocess.CompletedProcess:
        named = ["--split-sources", sources.replace("missing", file)] if sources else []
        options = ["--split", "2", *named]
        env = {**os.environ, "FAST_NVCC_SPLIT_SOURCES": f"@{file}.txt"}
        return subprocess.run([sys.executable, "-m", "fast_nvcc", *options, str(nvcc), "-c", "a.cu"],
                              cwd=tmp_path, env=env, capture_output=True, text=True, check=False)  # fmt: skip

    proc = fast_nvcc("missing")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("fast_nvcc: error: ") and proc.stderr.count("\n") == 1, proc.stderr
    assert "@missing.txt" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "nvcc-ran").exists()
    (tmp_path / "there.txt").write_text("a.cu\n")
    assert fast_nvcc("there").returncode == 0 and (tmp_path / "nvcc-ran").exists()


@pytest.mark.parametrize("name", ["cast_grouped.cu", "a[1].cu", "what?.cu", "star*.cu", "#hash.cu", "a,b.cu"])
def test_a_written_file_reads_back_as_patterns_that_name_its_sources(tmp_path, name):
    text = split_file([name, "other.cu"], ["written by a test", "second line"])
    assert text.splitlines()[:2] == ["# written by a test", "# second line"]
    (tmp_path / "split.txt").write_text(text)
    split, patterns = settings(4, "@split.txt", {}, cwd=str(tmp_path))
    assert split == 4 and len(patterns) == 2 and patterns[0] == literal(name)
    assert matches(patterns[0], f"/src/dir/{name}")
    assert not matches(patterns[0], "/src/dir/x.cu") and not matches(patterns[0], "/src/dir/cast_grouped.cuh")
