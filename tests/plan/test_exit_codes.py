"""nvcc's exit code in every way a compile can fail, with and without -t (fast_nvcc/plan/exit_codes.py).

Each case runs the real nvcc, then fast_nvcc, on the same failing command line and wants the
same exit code, the same stderr (temp names masked), the same files and an empty TMPDIR.
The expected code is always the one the nvcc under test exited with: versions differ (a
front-end error: 1 from nvcc 11.8, whose cicc fails first, 2 from 12.4 and 13.x; docs/nvcc-facts.md
has the table). What each case checks of nvcc itself is its cause: a line of nvcc's own stderr
that keeps the failure the case means to cause from turning into another one.
"""

from __future__ import annotations


import pytest

from fast_nvcc.plan import exit_codes
from fast_nvcc.graph.build import build_dag
from helpers import (
    Comparison, Outcome, assert_same, cases, compare, remove_files, require_option, run_tool,
)  # fmt: skip
from plans import load_plan

pytestmark = pytest.mark.side_by_side  # compares outputs only: scripts/test runs it beside other tests (pyproject.toml)

GENCODE_2 = ["-gencode", "arch=compute_75,code=sm_75", "-gencode", "arch=compute_80,code=sm_80"]

# case -> (nvcc's arguments, what nvcc's stderr says of the cause).  nvcc 13.0's exit codes,
# without -t and with -t 0, in the comments.
FRONT_END = b'identifier "undefined_device_name" is undefined'
SYNTAX, KERNEL = ["-c", "syntax_error.cu", "-arch=sm_80"], ["-c", "kernel.cu", "-Iinclude", "-arch=sm_80"]
FAILURES = {
    # cudafe++ (11.8: cicc) rejects the source: 2, 255.
    "front-end": (SYNTAX, FRONT_END),
    "front-end-2arch": (["-c", "syntax_error.cu", *GENCODE_2], FRONT_END),
    "front-end-MD": ([*SYNTAX, "-MD"], FRONT_END),
    # gcc exits 1 on the host side's #error: 1, 255.
    "host-error": (["-c", "host_error.cu", "-arch=sm_80"], b"#error host-side error only"),
    # the second of two sources fails; and a source of a link: 2, 255
    "second-source": ([*KERNEL, "syntax_error.cu"], FRONT_END),
    # the first of two fails: without -t nvcc never gets to the second; with -t it writes both
    # dependency files before its threads start, and no object: 2, 255
    "first-source-MD": ([*SYNTAX, "kernel.cu", "-Iinclude", "-MD"], FRONT_END),
    "source-of-link": (["syntax_error.cu", "main.cu", "-arch=sm_80", "-o", "app"], FRONT_END),
    "split-compile": ([*SYNTAX, "--split-compile", "2"], FRONT_END),
    # ptxas and nvlink exit 255 themselves: 255, 255.
    "ptxas": ([*KERNEL, "-Xptxas", "-bogus"], b"ptxas fatal   : Unknown option 'bogus'"),
    "ptxas-asm-error": (["-c", "asm_error.cu", "-arch=sm_80"], b"Ptx assembly aborted"),  # PTX ptxas rejects
    "nvlink-undefined": (
        ["-rdc=true", "undefined.cu", "main.cu", "-arch=sm_80", "-o", "app"],
        b"nvlink error   : Undefined reference to '_Z1gi'",
    ),
    # nvlink exits 1 on an input it cannot read; ld on an undefined symbol: 1, 255.
    "dlink-bad-object": (["-dlink", "bad.o", "-arch=sm_80", "-o", "dlink.o"], b"Could not open input file 'bad.o'"),
    "host-link": (["host_undefined.cu", "-arch=sm_80", "-o", "app"], b"undefined reference to `h(int)'"),
    "E": (["-E", "missing_include.cu"], b"No such file or directory"),
    # A host compiler that dies of SIGSEGV: sh's 139, which nvcc passes on without -t; 255 with.
    "crash": ([*KERNEL, "-ccbin", "crash"], b"Segmentation fault"),
    # The dependency phase runs before nvcc's threads: its failures keep their code: 1, 1.
    "MD-cannot-write": ([*KERNEL, "-MD", "-MF", "nodir/k.d"], b"Could not open output file nodir/k.d"),
}  # fmt: skip
# Spellings of -t: only N != 1, the last one given, counts.
THREADS = {
    "t0": (["-t0"], True),
    "threads=0": (["--threads=0"], True),
    "t-2": (["-t", "2"], True),
    "t=0": (["-t=0"], True),
    "t1": (["-t1"], False),
    "t2-t1": (["-t", "2", "-t", "1"], False),
    "t1-t2": (["-t1", "--threads", "2"], True),
    "llm.c": (["--threads=0", "-t=0"], True),  # llm.c's Makefile, where the issue was seen
}


@pytest.fixture
def failing(sources):
    """tests/data/src plus what the failures need: a bad object, undefined symbols, a host
    compiler that crashes on -c."""
    (sources / "bad.o").write_text("not an object\n")
    (sources / "host_error.cu").write_text(
        "#ifndef __CUDA_ARCH__\n#error host-side error only\n#endif\n__global__ void k(int *p) { p[0] = 1; }\n"
    )
    (sources / "undefined.cu").write_text("__device__ int g(int);\n__global__ void k(int *p) { p[0] = g(1); }\n")
    (sources / "asm_error.cu").write_text('__global__ void k(int *p) { asm volatile("bogus.instruction;"); p[0] = 1; }\n')
    (sources / "host_undefined.cu").write_text("int h(int);\nint main() { return h(1); }\n")
    (sources / "crash").mkdir()
    crash = sources / "crash" / "gcc"
    crash.write_text('#!/bin/sh\nfor a in "$@"; do [ "$a" = "-c" ] && kill -SEGV $$; done\nexec gcc "$@"\n')
    crash.chmod(0o755)
    return sources


@pytest.mark.parametrize("threads", [False, True], ids=["sequential", "t0"])
@pytest.mark.parametrize("case", cases(FAILURES, quick={"front-end"}))
@pytest.mark.nvcc
def test_failure_exit_code_as_nvcc(nvcc, failing, case, threads):
    """Under -t, what nvcc leaves after a failure depends on which of its threads had got how
    far (the other source's object): two nvcc runs under load can differ.  So with
    -t, fast_nvcc must give one of nvcc's own answers, from up to three nvcc runs; without
    -t, nvcc's one answer."""
    args, cause = FAILURES[case]
    if "--split-compile" in args:
        require_option(nvcc, "--split-compile")
    args = [*args, *(["-t0"] if threads else [])]
    result = compare(nvcc, args, cwd=failing)
    assert_fails_of(result.plain, cause)
    for _ in range(2 if threads else 0):
        try:
            assert_same(result)
            return
        except AssertionError:
            remove_files(failing, result.fast)
            again = run_tool([nvcc, *args], cwd=failing, tmpdir=failing.parent / f"{failing.name}-tmp")
            remove_files(failing, again)
            result = Comparison(again, result.fast)
    assert_same(result)


def assert_fails_of(outcome: Outcome, cause: bytes) -> None:
    """nvcc failed, and of the failure the case means (its code is the version's own)."""
    printed = outcome.stderr.decode(errors="replace")
    assert outcome.returncode != 0 and cause in outcome.stderr, (
        f"nvcc exited {outcome.returncode} without {cause!r}:\n{printed}"
    )


def sequential_code(nvcc: str, sources, args: list[str]) -> int:
    """What ``nvcc args`` exits with without -t: what a -t spelling that counts must change."""
    outcome = run_tool([nvcc, *args], cwd=sources, tmpdir=sources.parent / f"{sources.name}-seq")
    remove_files(sources, outcome)
    return outcome.returncode


@pytest.mark.parametrize("spelling", sorted(THREADS))
@pytest.mark.nvcc
def test_threads_spellings_as_nvcc(nvcc, sources, spelling):
    """A spelling that counts changes nvcc's own exit code (13.0: 2 to 255), one that does not
    keeps it; fast_nvcc must read each as nvcc does."""
    words, threaded = THREADS[spelling]
    args = ["-c", "syntax_error.cu", "-arch=sm_80"]
    sequential = sequential_code(nvcc, sources, args)
    result = compare(nvcc, [*args, *words], cwd=sources)
    assert_fails_of(result.plain, FRONT_END)
    assert (result.plain.returncode != sequential) == threaded
    assert_same(result)


@pytest.mark.nvcc
def test_threads_from_nvcc_append_flags(nvcc, sources):
    args = ["-c", "syntax_error.cu", "-arch=sm_80"]
    sequential = sequential_code(nvcc, sources, args)
    result = compare(nvcc, args, cwd=sources, env={"NVCC_APPEND_FLAGS": "-t 0"})
    assert_fails_of(result.plain, FRONT_END)
    assert result.plain.returncode != sequential
    assert_same(result)


@pytest.mark.parametrize("mode", ["-M", "-MD"])
@pytest.mark.nvcc
def test_dependency_phase_keeps_its_code_under_threads(nvcc, sources, mode):
    """A missing header fails -M's and -MD's preprocessing, which nvcc runs before its threads:
    exit 1 under -t 0 too.  Only the exit code is compared: nvcc -t 0 then goes on to run cicc
    on the preprocessed file that was never made ("fatal   : Could not open input file"), a
    step fast_nvcc, like nvcc without -t, never starts."""
    args = [mode, "missing_include.cu", *(["-c", "-arch=sm_80"] if mode == "-MD" else [])]
    sequential = sequential_code(nvcc, sources, args)
    result = compare(nvcc, [*args, "-t0"], cwd=sources)
    assert_fails_of(result.plain, b"No such file or directory")
    assert result.plain.returncode == sequential
    assert result.fast.returncode == result.plain.returncode
    assert result.fast.leftovers == []


# The plans' steps by phase: -MD's preprocessing and filter come before nvcc's threads.
@pytest.mark.parametrize(
    ("plan", "dependency_steps"),
    [
        ("compile_1arch", set()),
        ("compile_3arch_md", {0, 1, 2, 3, 4}),
        ("deps_stdout", {0, 1, 2}),
        ("two_sources_mmd", {0, 1, 2, 9, 10, 11}),
    ],
)
def test_phase_of_steps(plan, dependency_steps):
    parsed = load_plan(plan)
    found = {s.index for s in parsed.steps if exit_codes.phase_of(s, parsed) is exit_codes.Phase.DEPENDENCIES}
    assert found == dependency_steps


def test_under_threads_every_dependency_step_comes_before_the_compile_phase():
    """However nvcc's threads printed the plan (two sources: per source in some dryruns), the
    dependency phase of both sources is nvcc's first: its tasks order before any compile step."""
    parsed = load_plan("two_sources_mmd")
    first = exit_codes.before_threads(parsed)
    assert first == {0, 1, 2, 9, 10, 11}
    dag = build_dag(parsed)
    tasks = [t._replace(before_threads=t.step.index in first) for t in dag.tasks]
    ordered = [t.step.index for t in sorted(tasks, key=lambda t: t.order)]
    assert ordered[:6] == [0, 1, 2, 9, 10, 11]
    assert ordered[6:] == sorted(ordered[6:])
    assert [t.step.index for t in sorted(dag.tasks, key=lambda t: t.order)] == sorted(t.step.index for t in dag.tasks)


@pytest.mark.parametrize(("threaded", "phase", "code"), [
    (False, "compile", 139), (True, "compile", 255), (True, "dependencies", 1), (False, "dependencies", 1),
])  # fmt: skip
def test_nvcc_exit_code(threaded, phase, code):
    parsed = load_plan("compile_3arch_md")
    step = parsed.steps[0 if phase == "dependencies" else 14]
    step_code = 1 if phase == "dependencies" else 139
    assert exit_codes.nvcc_exit_code(step_code, step=step, plan=parsed, threaded=threaded) == code


@pytest.mark.parametrize(("value", "threaded"), [(None, False), ("1", False), ("0", True), ("2", True)])
def test_uses_threads(value, threaded):
    assert exit_codes.uses_threads(value) is threaded
