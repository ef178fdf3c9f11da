"""fast_nvcc against the real nvcc: same files (temp names masked), same output, same exit code.

Every case runs plain nvcc, then fast_nvcc, in the same directory (the module_id hashes the
source's path), each with a private TMPDIR that fast_nvcc must leave empty.
"""

from __future__ import annotations

import json
import re
import signal
import sys

import pytest

from helpers import (
    assert_same, cases, compare, fast_nvcc_command, require_cudafe_module_id, require_option, run_tool,
)  # fmt: skip

pytestmark = [pytest.mark.nvcc, pytest.mark.side_by_side]  # compares outputs only: scripts/test runs it beside other tests (pyproject.toml)

I = "-Iinclude"
ANONYMOUS = re.compile(rb"_GLOBAL__N__[0-9a-f]{8}_")
GENCODE_3 = [
    "-gencode", "arch=compute_75,code=sm_75",
    "-gencode", "arch=compute_80,code=sm_80",
    "-gencode", "arch=compute_90,code=[sm_90,compute_90]",
]  # fmt: skip

CASES = {
    "c-1arch": ["-c", "kernel.cu", I, "-arch=sm_80", "-o", "kernel.o"],
    "c-3arch": ["-c", "kernel.cu", I, *GENCODE_3],
    "gencode-sm-and-ptx": ["-c", "kernel.cu", I, "-gencode", "arch=compute_90,code=[sm_90,compute_90]"],
    "arch-sm": ["-c", "kernel.cu", I, "-arch=sm_90"],
    "arch-all-major": ["-c", "kernel.cu", I, "-arch=all-major", "-o", "all.o"],
    "dc": ["-dc", "kernel.cu", I, "-arch=sm_80"],
    "rdc-two-sources": ["-rdc=true", "-c", "rdc_a.cu", "rdc_b.cu", "-arch=sm_80"],
    "link-executable": ["kernel.cu", "main.cu", I, "-arch=sm_80", "-o", "app"],
    "link-rdc-executable": ["-rdc=true", "rdc_a.cu", "rdc_b.cu", "main_rdc.cu", "-arch=sm_80", "-o", "app_rdc"],
    "lib": ["-lib", "kernel.cu", I, "-arch=sm_80", "-o", "libkernel.a"],
    "ptx": ["-ptx", "kernel.cu", I, "-arch=sm_80"],
    "cubin": ["-cubin", "kernel.cu", I, "-arch=sm_80"],
    "fatbin": ["-fatbin", "kernel.cu", I, "-arch=sm_80", "-gencode", "arch=compute_90,code=compute_90"],
    "E": ["-E", "kernel.cu", I, "-arch=sm_80"],
    # For compute_90 and later nvcc's -ptx plan ends in a ptxas check of the user's own .ptx.
    "ptx-checked": ["-ptx", "kernel.cu", I, "-arch=sm_90", "-o", "kernel.ptx"],
    "ptx-checked-virtual": ["-ptx", "kernel.cu", I, "-gencode", "arch=compute_90,code=compute_90"],
    "ptx-checked-two-sources": ["-ptx", "kernel.cu", "warning.cu", I, "-arch=sm_90a"],
    "ptx-checked-Xptxas-v": ["-ptx", "kernel.cu", I, "-arch=sm_90", "-Xptxas", "-v"],
    "ptx-checked-bad-option": ["-ptx", "kernel.cu", I, "-arch=sm_90", "-Xptxas", "-bogus"],
    "ptx-to-stdout": ["-ptx", "kernel.cu", I, "-arch=sm_90", "-o", "-"],
    "E-to-stdout": ["-E", "kernel.cu", I, "-o", "-"],
    "cubin-o-dash": ["-cubin", "kernel.cu", I, "-arch=sm_90", "-o", "-"],  # a file named '-'
    "cubin-two-sources": ["-cubin", "kernel.cu", "warning.cu", I, "-arch=sm_90"],
    "fatbin-o": ["-fatbin", "kernel.cu", I, "-arch=sm_90", "-o", "k.fatbin"],
    "optix-ir": ["-optix-ir", "kernel.cu", I, "-arch=sm_90", "-o", "kernel.optixir"],
    "cuda": ["-cuda", "kernel.cu", I, "-arch=sm_90", "-o", "kernel.cpp.ii"],
    "dc-dlto": ["-dc", "-dlto", "kernel.cu", I, "-arch=sm_90", "-o", "kernel_lto.o"],
    "M-stdout": ["-M", "kernel.cu", I],
    "MM": ["-MM", "kernel.cu", I, "-MF", "kernel.deps"],
    "M-o": ["-M", "kernel.cu", I, "-o", "kernel.deps"],
    "MD": ["-c", "kernel.cu", I, "-arch=sm_80", "-MD"],
    "MMD-MP": ["-c", "kernel.cu", I, *GENCODE_3, "-MMD", "-MP"],
    "MD-line-directives": ["-c", "line_directives.cu", I, "-arch=sm_80", "-MD"],
    "cmake-style": ["-c", "kernel.cu", I, "-arch=sm_80", "-MD", "-MT", "obj/kernel.o", "-MF", "kernel.o.d", "-x", "cu", "-o", "kernel.o"],
    "long-dependency-options": [
        "-c", "kernel.cu", I, "-arch=sm_80", "--generate-nonsystem-dependencies-with-compile",
        "--dependency-output", "deps.d", "--dependency-target-name=named", "--generate-dependency-targets",
    ],  # fmt: skip
    "long-M": ["--generate-dependencies", "kernel.cu", I, "--output-directory", "objs"],
    "repeated-MT-warning": ["-c", "kernel.cu", I, "-arch=sm_80", "-MD", "-MT", "a", "-MT", "b"],
    "odir": ["-c", "kernel.cu", I, "-arch=sm_80", "-odir", "objs", "-MD", "-MF", "k.d"],
    "odir-MT": ["-c", "kernel.cu", I, "-arch=sm_80", "-odir", "objs", "-MD", "-MT", "obj/k.o", "-MF", "k.d"],
    "odir-missing": ["-c", "kernel.cu", I, "-arch=sm_80", "-odir", "no_such_dir", "-MD"],
    "Xptxas-v": ["-c", "kernel.cu", I, *GENCODE_3, "-Xptxas", "-v"],
    "Xcompiler": ["-c", "warning.cu", "-arch=sm_80", "-Xcompiler", "-Wall,-Wextra", "-Xcompiler=-fPIC"],
    "ccbin-name": ["-c", "kernel.cu", I, "-arch=sm_80", "-ccbin", "g++"],
    "ccbin-dir": ["-c", "kernel.cu", I, "-arch=sm_80", "-ccbin", "/usr/bin"],
    "two-inputs": ["-c", "kernel.cu", "main.cu", I, "-arch=sm_80"],
    "spaces": ["-c", "dir with space/spaced kernel.cu", I, "-arch=sm_80", "-o", "dir with space/out file.o", "-MD"],
    "threads": ["-c", "kernel.cu", I, *GENCODE_3, "-t", "2", "-MD"],
    "threads-long": ["-c", "kernel.cu", I, *GENCODE_3, "--threads", "0"],
    "split-compile": ["-c", "kernel.cu", I, "-arch=sm_80", "--split-compile", "2"],
    # nvcc -G is not reproducible with compression: its temp names end up compressed.
    "G": ["-c", "kernel.cu", I, "-arch=sm_80", "-G", "-compress-mode=none"],
    "lineinfo": ["-c", "kernel.cu", I, "-arch=sm_80", "-lineinfo"],
    "module-id-rerun": ["-c", "host_first.cu", *GENCODE_3],
    "module-id-rerun-warning": ["-c", "rerun_warning.cu", "-arch=sm_80", "-MD"],
    "module-id-rerun-warning-3arch": ["-c", "rerun_warning.cu", *GENCODE_3],
    "warnings": ["-c", "warning.cu", "-arch=sm_80"],
    # Failures: same message, same exit code, no object, nothing left in TMPDIR.
    "syntax-error": ["-c", "syntax_error.cu", "-arch=sm_80", "-MD"],
    "device-error": ["-c", "device_error.cu", *GENCODE_3],
    "missing-include": ["-c", "missing_include.cu", "-arch=sm_80"],
    "ptxas-bad-option": ["-c", "kernel.cu", I, "-arch=sm_80", "-Xptxas", "-bogus"],
    "host-bad-option": ["-c", "kernel.cu", I, "-arch=sm_80", "-Xcompiler", "-bogus"],
    "unknown-option": ["-c", "kernel.cu", "--bogus"],
    "missing-source": ["-c", "no_such_file.cu"],
    # Modes that go to nvcc unchanged.
    "version": ["--version"],
    "list-gpu-arch": ["--list-gpu-arch"],
    "dryrun": ["--dryrun", "-c", "kernel.cu", I],
    "verbose": ["-v", "-c", "kernel.cu", I, "-arch=sm_80"],
    "keep": ["-c", "kernel.cu", I, "-arch=sm_80", "--keep"],
}


# The quick tier (scripts/test --quick) compares these for every toolchain: a multi-architecture
# compile with a dependency file, a link, a failure.
QUICK = {"MMD-MP", "link-executable", "syntax-error"}


@pytest.mark.parametrize("case", cases(CASES, quick=QUICK))
def test_same_as_nvcc(nvcc, sources, case):
    if "--split-compile" in CASES[case]:
        require_option(nvcc, "--split-compile")
    assert_same(compare(nvcc, CASES[case], cwd=sources))


@pytest.mark.one_toolchain  # how fast_nvcc runs the plan that test_same_as_nvcc checks per version
@pytest.mark.parametrize("mode", ["--faithful", "--sequential", "-j1"])
@pytest.mark.parametrize("case", ["c-3arch", "MMD-MP", "lib", "syntax-error", "threads"])
def test_other_modes_same_as_nvcc(nvcc, sources, mode, case):
    assert_same(compare(nvcc, CASES[case], cwd=sources, options=[mode]))


def test_dlink_and_tmpdir_elsewhere(nvcc, sources, tmp_path):
    """-dlink of -dc objects, with TMPDIR in a directory whose name has a space."""
    build = run_tool([nvcc, "-dc", "rdc_a.cu", "rdc_b.cu", "-arch=sm_80"], cwd=sources, tmpdir=tmp_path / "t0")
    assert build.returncode == 0
    tmpdir = tmp_path / "tmp dir"
    args = ["-dlink", "rdc_a.o", "rdc_b.o", "-arch=sm_80", "-o", "dlink.o"]
    assert_same(compare(nvcc, args, cwd=sources, tmpdir=tmpdir))
    # -g embeds the temp directory: both must have used the one TMPDIR names.
    args = ["-c", "kernel.cu", I, "-arch=sm_80", "-g", "-o", "debug.o"]
    result = compare(nvcc, args, cwd=sources, tmpdir=tmpdir)
    assert_same(result, host_debug_info=True, scratch=tmp_path)
    assert str(tmpdir).encode() in result.fast.files["debug.o"]
    # Under -g gcc -E names the working directory in a line marker (# 1 "/dir//"), which nvcc's
    # dependency file leaves out (CMake's Debug flags with Ninja's -MD -MT -MF).
    args = ["-c", "kernel.cu", I, "-arch=sm_80", "-g", "-MD", "-MT", "obj/debug.o", "-MF", "debug.o.d", "-o", "debug.o"]
    result = compare(nvcc, args, cwd=sources, tmpdir=tmpdir)
    assert_same(result, host_debug_info=True, scratch=tmp_path)
    assert b"//" not in result.fast.files["debug.o.d"]
    # An archive of such objects: its members compare as the objects do (the debug strings'
    # order is nvcc's own to vary), and its member names follow nvcc's temp names.
    args = ["-lib", "kernel.cu", "warning.cu", I, "-arch=sm_80", "-g", "-o", "debug.a"]
    result = compare(nvcc, args, cwd=sources, tmpdir=tmpdir)
    assert_same(result, host_debug_info=True, scratch=tmp_path)


def test_source_on_stdin(nvcc, sources):
    """nvcc copies a '-' source to a temp file that its plan names but never makes."""
    args = ["-x", "cu", "-c", "-", I, "-arch=sm_80", "-o", "stdin.o"]
    result = compare(nvcc, args, cwd=sources, stdin=(sources / "kernel.cu").read_bytes())
    assert result.plain.returncode == 0
    # The temp name is also the source's name: the anonymous namespace's hash of it differs
    # between two runs of nvcc itself.
    for outcome in (result.plain, result.fast):
        outcome.files["stdin.o"] = ANONYMOUS.sub(b"_GLOBAL__N__XXXXXXXX_", outcome.files["stdin.o"])
    assert_same(result)


def test_module_id_mismatch_reruns_cicc(nvcc, sources, tmp_path):
    """host_first.cu's first external definition is host-only: cicc's own module_id differs."""
    args = ["-c", "host_first.cu", "-arch=sm_80"]
    require_cudafe_module_id(nvcc, args, cwd=sources)  # no host-side id for cicc's to differ from
    fresh = {"FAST_NVCC_CACHE_DIR": str(tmp_path / "cache")}  # nothing learned of these sources yet
    outcome = run_tool(fast_nvcc_command(nvcc, args, ["-v"]), cwd=sources, tmpdir=tmp_path / "t", env=fresh)
    assert outcome.returncode == 0
    assert b"its module_id differs from nvcc's" in outcome.stderr and b"as printed" in outcome.stderr
    outcome = run_tool(fast_nvcc_command(nvcc, ["-c", "kernel.cu", I, "-arch=sm_80"], ["-v"]), cwd=sources,
                       tmpdir=tmp_path / "t", env=fresh)  # fmt: skip
    assert b"module_id" not in outcome.stderr


def test_disable_runs_plain_nvcc(nvcc, sources, tmp_path):
    outcome = run_tool(
        fast_nvcc_command(nvcc, ["--dryrun", "-c", "kernel.cu"], ["-v"]),
        cwd=sources, tmpdir=tmp_path / "t", env={"FAST_NVCC_DISABLE": "1"},
    )  # fmt: skip
    assert outcome.returncode == 0
    assert b"running nvcc unchanged: FAST_NVCC_DISABLE is set" in outcome.stderr


@pytest.mark.one_toolchain
@pytest.mark.parametrize("dependency", ["psutil", "networkx"])
def test_a_python_without_the_dependencies_says_so_and_runs_nvcc(nvcc, sources, tmp_path, dependency):
    """Run by a Python that lacks psutil or networkx (here hidden), fast_nvcc does not build its
    graph (a compile's common path imports neither, so it asks for them first): nvcc compiles
    the file unchanged, and one line says why fast_nvcc did not run it."""
    hide = f"import sys; sys.modules[{dependency!r}] = None; from fast_nvcc.cli import main; sys.exit(main())"
    command = [sys.executable, "-c", hide, "--nvcc", nvcc, "--", "-c", "kernel.cu", I, "-o", "k.o"]
    outcome = run_tool(command, cwd=sources, tmpdir=tmp_path / "t")
    assert outcome.returncode == 0 and (sources / "k.o").exists()
    (line,) = outcome.stderr.decode().splitlines()
    assert line.startswith("fast_nvcc: warning: ") and dependency in line and "running nvcc unchanged" in line


@pytest.mark.one_toolchain
def test_a_compiles_path_creates_no_dataclass(nvcc, sources, tmp_path):
    """A dataclass costs each compile about a millisecond to create, and the module with its
    inspect about 10 ms more (docs/development.md): the records a compile's path makes are
    NamedTuples or classes of their own.  Run by a Python that cannot import dataclasses, a
    compile (first and learned: host split, learned stub, module_id check) still runs its graph."""
    hide = "import sys; sys.modules['dataclasses'] = None; from fast_nvcc.cli import main; sys.exit(main())"
    log = tmp_path / "log.jsonl"
    command = [sys.executable, "-c", hide, "--nvcc", nvcc, "--", "-c", "kernel.cu", I, "-o", "k.o",
               "-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=sm_90"]  # fmt: skip
    env = {"FAST_NVCC_LOG": str(log), "FAST_NVCC_CACHE_DIR": str(tmp_path / "state")}
    for _ in range(2):
        outcome = run_tool(command, cwd=sources, tmpdir=tmp_path / "t", env=env)
        assert outcome.returncode == 0 and outcome.stderr == b"" and (sources / "k.o").exists()
    runs = [json.loads(line) for line in log.read_text().splitlines()]
    assert [run["mode"] for run in runs] == ["dag", "dag"]
    assert [s["state"] for r in runs for s in r["steps"] if s["tool"] == "learned stub"] == ["dropped", "done"]


@pytest.mark.one_toolchain  # the signal is sh's and the host compiler's, not nvcc's version's
@pytest.mark.parametrize("signame", ["SIGABRT", "SIGSEGV", "SIGKILL", "SIGINT"])
def test_step_killed_by_a_signal_as_nvcc_reports_it(nvcc, sources, tmp_path, signame):
    """A step that crashes: nvcc's sh prints the signal's name (none for SIGINT) and nvcc exits
    128 + the signal.  fast_nvcc, which runs the step without sh, printed nothing and exited
    with the signal's negative code modulo 256.  The host compiler here kills itself on -c."""
    bin_dir = tmp_path / "ccbin"
    bin_dir.mkdir()
    wrapper = bin_dir / "gcc"
    wrapper.write_text(
        "#!/bin/sh\n"
        f'for a in "$@"; do [ "$a" = "-c" ] && kill -{signame[3:]} $$; done\n'
        'exec gcc "$@"\n'
    )
    wrapper.chmod(0o755)
    args = ["-c", "kernel.cu", I, "-arch=sm_80", "-ccbin", str(bin_dir), "-o", "crash.o"]
    result = compare(nvcc, args, cwd=sources)
    assert result.plain.returncode == 128 + getattr(signal, signame)
    assert_same(result)
