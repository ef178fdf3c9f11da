"""Random nvcc command lines (tests/random_lines.py), fast_nvcc against the real nvcc: a first
compile and a second one (the history has learned the first), each compared with nvcc's files,
output and exit code, as test_integration.py compares its cases.

Two differences are nvcc's own and stay: under -t N nvcc prints each step's output as the step
ends and goes on after a failure with the steps that do not need the failed one, so there
fast_nvcc's lines are nvcc's lines in another order, and on a failure some of them; and there
a failure ends the other sources' compiles, whose finished outputs nvcc may keep and fast_nvcc
removes (docs/nvcc-facts.md, "Exit codes"). FAST_NVCC_RANDOM_LINES=N draws more lines, and
FAST_NVCC_RANDOM_SEED=S other ones.
"""

from __future__ import annotations

import dataclasses
import os
import random

import pytest
from helpers import (
    Comparison,
    assert_same,
    compare,
    fast_nvcc_command,
    mask_pid,
    remove_files,
    run_tool,
)
from random_lines import HOST_SOURCE, Line, draw

pytestmark = [pytest.mark.nvcc, pytest.mark.side_by_side, pytest.mark.one_toolchain]

COUNT = int(os.environ.get("FAST_NVCC_RANDOM_LINES", "30"))
SEED = int(os.environ.get("FAST_NVCC_RANDOM_SEED", "39"))


def line(number: int) -> Line:
    return draw(random.Random(SEED * 1_000_003 + number))


def reordered(result: Comparison) -> Comparison:
    """Under -t N: ``result`` with fast_nvcc's output taken as nvcc's where it holds nvcc's lines
    in another order (or, on a failure, some of them), so the rest compares as usual."""
    plain, fast = result.plain, result.fast
    streams = {}
    for stream in ("stdout", "stderr"):
        ours = mask_pid(getattr(fast, stream)).splitlines(keepends=True)
        theirs = mask_pid(getattr(plain, stream)).splitlines(keepends=True)
        subset = all(ours.count(x) <= theirs.count(x) for x in set(ours))
        if sorted(ours) == sorted(theirs) or (plain.returncode != 0 and subset):
            streams[stream] = getattr(plain, stream)
    fast = dataclasses.replace(fast, **streams)
    if plain.returncode != 0 and set(fast.files) <= set(plain.files):
        # A failure ends the other sources' compiles; nvcc keeps an output whose last step
        # ended before it, fast_nvcc removes it (-cubin of two sources, the second failing:
        # nvcc kept the first's 5 times in 5, -fatbin once in 5, -c never).
        plain = dataclasses.replace(plain, files={n: d for n, d in plain.files.items() if n in fast.files})
    return Comparison(plain, fast)


@pytest.mark.parametrize("number", range(COUNT), ids=lambda n: f"line{n}")
def test_random_line(nvcc, sources, tmp_path, number):
    drawn = line(number)
    (sources / "objs").mkdir()
    (sources / "host.cpp").write_text(HOST_SOURCE)
    if drawn.options_file is not None:
        (sources / "opts.txt").write_text(drawn.options_file)
    print("nvcc", " ".join(drawn.args), drawn.env or "")
    first = compare(nvcc, drawn.args, cwd=sources, env=drawn.env)
    remove_files(sources, first.fast)
    tmpdir = sources.parent / f"{sources.name}-tmp"
    learned = run_tool(fast_nvcc_command(nvcc, drawn.args), cwd=sources, tmpdir=tmpdir, env=drawn.env)
    for result in (first, Comparison(first.plain, learned)):
        if drawn.threads:
            result = reordered(result)
        assert_same(result, host_debug_info=drawn.host_debug_info, scratch=tmp_path, pid=True)
