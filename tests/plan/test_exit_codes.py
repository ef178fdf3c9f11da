"""nvcc's exit code in every way a compile can fail, with and without -t (fast_nvcc/plan/exit_codes.py).

Each case runs the real nvcc, then fast_nvcc, on the same failing command line and wants the
same exit code, the same stderr (temp names masked), the same files and an empty TMPDIR.
NVCC_RC is what nvcc itself exited with when measured (13.0 and 13.5 alike): it keeps the
failure the case means to cause from turning into another one.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from fast_nvcc.plan import exit_codes
from fast_nvcc.graph.build import build_dag
from helpers import Comparison, assert_same, cases, compare, remove_files, run_tool
from plans import load_plan

GENCODE_2 = ["-gencode", "arch=compute_75,code=sm_75", "-gencode", "arch=compute_80,code=sm_80"]

# case -> (nvcc's arguments, nvcc's exit code without -t, with -t 0)
FAILURES = {
    # cudafe++ exits 2 on a front-end error.
    "front-end": (["-c", "syntax_error.cu", "-arch=sm_80"], 2, 255),
    "front-end-2arch": (["-c", "syntax_error.cu", *GENCODE_2], 2, 255),
    "front-end-MD": (["-c", "syntax_error.cu", "-arch=sm_80", "-MD"], 2, 255),
    # gcc exits 1 on the host side's #error.
    "host-error": (["-c", "host_error.cu", "-arch=sm_80"], 1, 255),
    # the second of two sources fails; and a source of a link
    "second-source": (["-c", "kernel.cu", "syntax_error.cu", "-Iinclude", "-arch=sm_80"], 2, 255),
    # the first of two fails: without -t nvcc never gets to the second; with -t it writes both
    # dependency files before its threads start, and no object
    "first-source-MD": (["-c", "syntax_error.cu", "kernel.cu", "-Iinclude", "-arch=sm_80", "-MD"], 2, 255),
    "source-of-link": (["syntax_error.cu", "main.cu", "-arch=sm_80", "-o", "app"], 2, 255),
    "split-compile": (["-c", "syntax_error.cu", "-arch=sm_80", "--split-compile", "2"], 2, 255),
    # ptxas and nvlink exit 255 themselves.
    "ptxas": (["-c", "kernel.cu", "-Iinclude", "-arch=sm_80", "-Xptxas", "-bogus"], 255, 255),
    "ptxas-asm-error": (["-c", "asm_error.cu", "-arch=sm_80"], 255, 255),  # PTX that ptxas rejects
    "nvlink-undefined": (["-rdc=true", "undefined.cu", "main.cu", "-arch=sm_80", "-o", "app"], 255, 255),
    # nvlink exits 1 on an input it cannot read; ld on an undefined symbol.
    "dlink-bad-object": (["-dlink", "bad.o", "-arch=sm_80", "-o", "dlink.o"], 1, 255),
    "host-link": (["host_undefined.cu", "-arch=sm_80", "-o", "app"], 1, 255),
    "E": (["-E", "missing_include.cu"], 1, 255),
    # A host compiler that dies of SIGSEGV: sh's 139, which nvcc passes on without -t.
    "crash": (["-c", "kernel.cu", "-Iinclude", "-arch=sm_80", "-ccbin", "crash"], 139, 255),
    # The dependency phase runs before nvcc's threads: its failures keep their code.
    "MD-cannot-write": (["-c", "kernel.cu", "-Iinclude", "-arch=sm_80", "-MD", "-MF", "nodir/k.d"], 1, 1),
}
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
    args, plain_code, threaded_code = FAILURES[case]
    args = [*args, *(["-t0"] if threads else [])]
    result = compare(nvcc, args, cwd=failing)
    assert result.plain.returncode == (threaded_code if threads else plain_code)
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


@pytest.mark.parametrize("spelling", sorted(THREADS))
@pytest.mark.nvcc
def test_threads_spellings_as_nvcc(nvcc, sources, spelling):
    words, threaded = THREADS[spelling]
    result = compare(nvcc, ["-c", "syntax_error.cu", "-arch=sm_80", *words], cwd=sources)
    assert result.plain.returncode == (255 if threaded else 2)
    assert_same(result)


@pytest.mark.nvcc
def test_threads_from_nvcc_append_flags(nvcc, sources):
    result = compare(nvcc, ["-c", "syntax_error.cu", "-arch=sm_80"], cwd=sources, env={"NVCC_APPEND_FLAGS": "-t 0"})
    assert result.plain.returncode == 255
    assert_same(result)


@pytest.mark.parametrize("mode", ["-M", "-MD"])
@pytest.mark.nvcc
def test_dependency_phase_keeps_its_code_under_threads(nvcc, sources, mode):
    """A missing header fails -M's and -MD's preprocessing, which nvcc runs before its threads:
    exit 1 under -t 0 too.  Only the exit code is compared: nvcc -t 0 then goes on to run cicc
    on the preprocessed file that was never made ("fatal   : Could not open input file"), a
    step fast_nvcc, like nvcc without -t, never starts."""
    args = [mode, "missing_include.cu", *(["-c", "-arch=sm_80"] if mode == "-MD" else []), "-t0"]
    result = compare(nvcc, args, cwd=sources)
    assert result.plain.returncode == 1
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
    tasks = [replace(t, before_threads=t.step.index in first) for t in dag.tasks]
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
