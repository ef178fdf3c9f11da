"""Run plain nvcc and fast_nvcc on the same command line in the same directory, and compare."""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from fast_nvcc.plan.toolchain import has_option

DATA = Path(__file__).parent / "data"
SOURCES = DATA / "src"
# nvcc embeds its temporary names (tmpxft_<pid>_<n>) in objects; they are the only bytes that
# differ between two runs of nvcc itself.  Masking keeps the length.
TEMP_NAME = re.compile(rb"tmpxft_[0-9a-f]{8}_[0-9a-f]{8}")
# ptxas -v reports its own compile time, which differs between two runs of nvcc too.
PTXAS_TIME = re.compile(rb"Compile time = [0-9.]+ ms")


# The process id that ends the module_id of a source with no external definition (in the names
# that hold it): the one thing nvcc itself varies in such a source, with the fatbinary
# uncompressed (compressed, every byte after it differs).
MODULE_ID_PID = re.compile(rb"(_cu_[0-9a-f]{8}_)[0-9]+")


def mask(data: bytes) -> bytes:
    return PTXAS_TIME.sub(b"Compile time = X ms", TEMP_NAME.sub(b"tmpxft_XXXXXXXX_XXXXXXXX", data))


def mask_pid(data: bytes) -> bytes:
    """:func:`mask`, and the module_id's process id too."""
    return MODULE_ID_PID.sub(rb"\1PID", mask(data))


RESERVATION = re.compile(r"-[0-9a-f]{6}\.\.lgenfe\.bc$")
QUAD = re.compile(rb"0x([0-9a-f]{16})")


def fatbin_c(data: bytes) -> tuple[bytes, bytes]:
    """A ``--keep`` .fatbin.c, whose fatbinary is an assembler ``.quad`` list: its text without
    the numbers, and the bytes they spell (little-endian), where the module_id's pid is bytes,
    not text that :func:`mask_pid` can find."""
    quads = b"".join(int(word, 16).to_bytes(8, "little") for word in QUAD.findall(data))
    return QUAD.sub(b"Q", data), quads


@dataclass
class Outcome:
    returncode: int
    stdout: bytes
    stderr: bytes
    files: dict[str, bytes] = field(default_factory=dict)  # new files, relative to the workdir
    leftovers: list[str] = field(default_factory=list)  # what the run left in its TMPDIR


@functools.cache
def nvcc_version(nvcc: str) -> tuple[int, int]:
    """(major, minor) of ``nvcc``, from ``nvcc --version`` ("release 12.4, V12.4.131")."""
    printed = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=True).stdout
    found = re.search(r"release (\d+)\.(\d+),", printed)
    assert found, f"{nvcc} --version names no release:\n{printed}"
    return int(found[1]), int(found[2])


_has_option = functools.cache(has_option)  # asked again by every case of a version


def require_option(nvcc: str, option: str) -> None:
    """Skip the test where ``nvcc`` lacks ``option`` (not in its ``--help``): a case about what
    the option does cannot run on an nvcc older than the option (nvcc 11.8 has no
    --split-compile, nvcc 12.x no --fdevice-time-trace or --jobserver)."""
    if not _has_option(nvcc, option):
        major, minor = nvcc_version(nvcc)
        pytest.skip(f"nvcc {major}.{minor} has no {option} (not in its --help)")


def module_id_writer(nvcc: str, args: Sequence[str], *, cwd: Path):
    """The step of ``nvcc args``'s plan that writes the module_id (``--gen_module_id_file``):
    cudafe++ from nvcc 12.4 on, the first cicc in nvcc 11.8."""
    from fast_nvcc.plan.dryrun import parse_plan, run_dryrun

    plan = parse_plan(run_dryrun(nvcc, args, cwd=str(cwd)).stderr, env={}, cwd=str(cwd))
    return next(s for s in plan.steps if s.generates_module_id)


def require_cudafe_module_id(nvcc: str, args: Sequence[str], *, cwd: Path) -> None:
    """Skip the test where ``nvcc args``'s plan has its first cicc write the module_id (nvcc
    11.8) rather than cudafe++: a case about cudafe++'s id (made from the host side, or ending
    in cudafe++'s pid) has nothing to test there."""
    writer = module_id_writer(nvcc, args, cwd=cwd)
    if writer.tool != "cudafe++":
        major, minor = nvcc_version(nvcc)
        pytest.skip(f"nvcc {major}.{minor}'s first cicc writes the module_id (--gen_module_id_file),"
                    " not cudafe++")  # fmt: skip


def fast_nvcc_command(nvcc: str, args: Sequence[str], options: Sequence[str] = ()) -> list[str]:
    return [sys.executable, "-m", "fast_nvcc", "--nvcc", nvcc, *options, "--", *args]


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    result = {}
    for path in root.rglob("*"):
        if path.is_file():
            stat = path.stat()
            result[str(path.relative_to(root))] = (stat.st_mtime_ns, stat.st_size)
    return result


def run_tool(
    command: Sequence[str],
    *,
    cwd: Path,
    tmpdir: Path,
    env: Mapping[str, str] | None = None,
    timeout: float = 600,
    stdin: bytes = b"",
) -> Outcome:
    """Run ``command`` with its own TMPDIR; collect what it printed and the files it made."""
    if tmpdir.exists():
        shutil.rmtree(tmpdir)
    tmpdir.mkdir(parents=True)
    before = snapshot(cwd)
    # The caller's fast_nvcc settings would change what is tested; the cache directory and the
    # slot pool the test session chose stay.
    keep = ("FAST_NVCC_CACHE_DIR", "FAST_NVCC_POOL_DIR")
    base = {k: v for k, v in os.environ.items() if not k.startswith("FAST_NVCC_") or k in keep}
    full_env = {**base, "TMPDIR": str(tmpdir), **(env or {})}
    proc = subprocess.run(
        list(command), cwd=cwd, env=full_env, input=stdin, capture_output=True,
        timeout=timeout, check=False,
    )  # fmt: skip
    after = snapshot(cwd)
    files = {
        name: (cwd / name).read_bytes()
        for name, stamp in after.items()
        if before.get(name) != stamp
    }
    leftovers = sorted(str(p.relative_to(tmpdir)) for p in tmpdir.rglob("*"))
    return Outcome(proc.returncode, proc.stdout, proc.stderr, files, leftovers)


def remove_files(cwd: Path, outcome: Outcome) -> None:
    for name in outcome.files:
        (cwd / name).unlink(missing_ok=True)


@dataclass
class Comparison:
    plain: Outcome
    fast: Outcome


def compare(
    nvcc: str,
    args: Sequence[str],
    *,
    cwd: Path,
    options: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    tmpdir: Path | None = None,
    stdin: bytes = b"",
) -> Comparison:
    """nvcc then fast_nvcc, each from the same starting state of ``cwd``."""
    tmpdir = tmpdir or cwd.parent / f"{cwd.name}-tmp"
    plain = run_tool([nvcc, *args], cwd=cwd, tmpdir=tmpdir, env=env, stdin=stdin)
    remove_files(cwd, plain)
    command = fast_nvcc_command(nvcc, args, options)
    fast = run_tool(command, cwd=cwd, tmpdir=tmpdir, env=env, stdin=stdin)
    return Comparison(plain, fast)


def strip_debug(data: bytes, workdir: Path) -> tuple[bytes, list[bytes]]:
    """An object without its host debug sections, and the sorted strings of those sections.

    With -g, gcc orders the strings of .debug_line_str by a hash of their content, and the
    content holds the temp names; so two runs of nvcc itself differ in that order (measured:
    2 orders in 4 runs).  The code and data must still be identical, and so must the strings.
    """
    source = workdir / "debug-object.o"
    source.write_bytes(data)
    stripped = workdir / "stripped.o"
    subprocess.run(["objcopy", "--strip-debug", str(source), str(stripped)], check=True)
    strings: list[bytes] = []
    for section in (".debug_str", ".debug_line_str"):
        dump = workdir / "section.bin"
        dump.unlink(missing_ok=True)
        subprocess.run(
            ["objcopy", "-O", "binary", f"--only-section={section}", str(source), str(dump)],
            check=True,
        )
        if dump.exists():
            strings.extend(mask(dump.read_bytes()).split(b"\0"))
    return mask(stripped.read_bytes()), sorted(strings)


def strip_debug_archive(data: bytes, workdir: Path) -> list[tuple[bytes, tuple[bytes, list[bytes]]]]:
    """An archive (-lib) of objects with host debug info, member by member in its order: each
    member's name (masked) and :func:`strip_debug` of it."""
    archive = workdir / "debug-archive.a"
    archive.write_bytes(data)
    members = workdir / "members"
    shutil.rmtree(members, ignore_errors=True)
    members.mkdir()
    names = subprocess.run(["ar", "t", str(archive)], check=True, capture_output=True).stdout.split()
    subprocess.run(["ar", "x", str(archive)], cwd=members, check=True)
    return [(mask(name), strip_debug((members / name.decode()).read_bytes(), workdir)) for name in names]


def assert_same(result: Comparison, *, host_debug_info: bool = False, scratch: Path | None = None,
                depfiles: bool = True, pid: bool = False) -> None:
    """``depfiles=False``: the caller compares the dependency files itself (ccache rewrites
    their target on a hit, tests/cache/test_ccache.py); ``pid``: mask the module_id's process id
    too (:func:`mask_pid`)."""
    masked = mask_pid if pid else mask
    plain, fast = result.plain, result.fast
    assert masked(fast.stderr) == masked(plain.stderr), _diff("stderr", plain.stderr, fast.stderr)
    assert masked(fast.stdout) == masked(plain.stdout), _diff("stdout", plain.stdout, fast.stdout)
    assert fast.returncode == plain.returncode
    assert sorted(fast.files) == sorted(plain.files), (sorted(plain.files), sorted(fast.files))
    for name, data in plain.files.items():
        if name.endswith(".d"):
            assert not depfiles or fast.files[name] == data, f"depfile {name} differs"
        elif host_debug_info and name.endswith(".o"):
            assert scratch is not None
            assert strip_debug(fast.files[name], scratch) == strip_debug(data, scratch), name
        elif pid and name.endswith(".fatbin.c"):
            assert [masked(part) for part in fatbin_c(fast.files[name])] == [masked(part) for part in fatbin_c(data)], name
        elif host_debug_info and name.endswith(".a"):
            assert scratch is not None
            assert strip_debug_archive(fast.files[name], scratch) == strip_debug_archive(data, scratch), name
        else:
            assert masked(fast.files[name]) == masked(data), f"{name} differs after masking temp names"
    # nvcc's own (--keep goes to nvcc unchanged): a cicc that fails under --keep leaves the empty
    # name it reserved, <source>-<6 hex>..lgenfe.bc, and nvcc does not remove it
    left = [RESERVATION.sub("-X..lgenfe.bc", name) for name in fast.leftovers]
    nvccs = {RESERVATION.sub("-X..lgenfe.bc", name) for name in plain.leftovers if RESERVATION.search(name)}
    assert all(name in nvccs for name in left), f"fast_nvcc left temp files: {fast.leftovers}"


def _diff(what: str, plain: bytes, fast: bytes) -> str:
    return (
        f"{what} differs\n--- nvcc ---\n{plain.decode(errors='replace')}"
        f"\n--- fast_nvcc ---\n{fast.decode(errors='replace')}"
    )


def copy_sources(destination: Path) -> Path:
    shutil.copytree(SOURCES, destination)
    return destination


def cases(names, *, quick=frozenset()) -> list:
    """``names`` sorted for ``parametrize``; those in ``quick`` also run in scripts/test --quick."""
    return [pytest.param(n, marks=pytest.mark.quick) if n in quick else n for n in sorted(names)]


# Device code whose cost grows with K: ``Many<K>::run`` is K fully unrolled loops of 2000 steps.
# Kernels built on it keep cicc busy for as long as a test needs.
UNROLLED_CHAIN = """
template <int K> __device__ float mix(float x) {
#pragma unroll
  for (int i = 0; i < 2000; ++i) x = x * 1.0001f + float((i ^ K) % 7);
  return x;
}
template <int K> struct Many {
  __device__ static float run(float x) { return mix<K>(Many<K - 1>::run(x)); }
};
template <> struct Many<0> {
  __device__ static float run(float x) { return x; }
};
"""


# A host compiler that writes down the nice it runs at (field 19 of /proc/self/stat, the 17th
# after the command name in parentheses) and its arguments to $NICE_RECORD, then is gcc.
RECORDING_GCC = """#!/bin/sh
stat=$(cat /proc/self/stat)
echo "$(echo "${stat##*) }" | cut -d" " -f17) $*" >> "$NICE_RECORD"
exec /usr/bin/gcc "$@"
"""


def recording_ccbin(directory: Path) -> Path:
    """``directory`` with :data:`RECORDING_GCC` as its gcc and g++, for nvcc's ``-ccbin``."""
    directory.mkdir(exist_ok=True)
    for name in ("gcc", "g++"):
        (directory / name).write_text(RECORDING_GCC)
        (directory / name).chmod(0o755)
    return directory
