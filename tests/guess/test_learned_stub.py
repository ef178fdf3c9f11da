"""The learned stub (fast_nvcc/guess/learned_stub.py): a compile with one cicc starts its host
compile's cc1plus on the stub its last compile's cicc wrote, once cudafe++ is done, and the
object is still nvcc's.  Against the real nvcc, compile after compile in one state directory."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from helpers import (
    UNROLLED_CHAIN,
    Comparison,
    assert_same,
    fast_nvcc_command,
    mask_pid,
    remove_files,
    require_cudafe_module_id,
    run_tool,
)

SM90 = ["-arch=sm_90"]
# cicc runs a few seconds (fully unrolled loops), cudafe++ under one: the front has time to gain.
SLOW_CICC = UNROLLED_CHAIN + "__global__ void kernel(float *p) { p[threadIdx.x] = Many<8>::run(p[threadIdx.x]); }\n"


def rows(table: Path) -> dict[str, dict]:
    with open(table, newline="") as handle:
        return {row["tool"]: row for row in csv.DictReader(handle)}


def state(tmp_path: Path, **extra: str) -> dict[str, str]:
    """A state directory and a slot pool of the test's own (no other run's steps take slots)."""
    return {"FAST_NVCC_CACHE_DIR": str(tmp_path / "state"), "FAST_NVCC_POOL_DIR": str(tmp_path / "pool"), **extra}


def compile_once(nvcc: str, work: Path, tmp_path: Path, args: list[str], name: str,
                 **extra: str) -> dict[str, dict]:  # fmt: skip
    """nvcc, then fast_nvcc with the shared state directory: the same outputs; its steps.  nvcc
    runs once for each text of the source (``_PLAINS``): what it writes does not follow the
    state directory, and the test compiles one text several times."""
    table = tmp_path / f"{name}.csv"
    key = (nvcc, str(work), (work / args[1]).read_text(), tuple(args))
    plain = _PLAINS.get(key)
    if plain is None:
        plain = _PLAINS[key] = run_tool([nvcc, *args], cwd=work, tmpdir=tmp_path / "t", env=state(tmp_path, **extra))
        remove_files(work, plain)
    fast = run_tool(fast_nvcc_command(nvcc, args, ["--table", str(table)]), cwd=work, tmpdir=tmp_path / "t", env=state(tmp_path, **extra))
    assert_same(Comparison(plain, fast))
    remove_files(work, fast)
    return rows(table)


_PLAINS: dict[tuple, object] = {}


@pytest.mark.nvcc
@pytest.mark.one_toolchain  # the stub per version: test_a_learned_stub_takes_this_compiles_module_id
def test_the_second_compile_starts_cc1plus_on_the_stub_the_first_ones_cicc_wrote(nvcc, tmp_path):
    work = tmp_path / "w"
    work.mkdir()
    (work / "chain.cu").write_text(SLOW_CICC)
    args = ["-c", "chain.cu", *SM90, "-o", "c.o"]
    # nvcc 11.8: its one cicc writes the module_id, so cudafe++ and cc1plus follow it: nothing to win.
    require_cudafe_module_id(nvcc, args, cwd=work)
    first = compile_once(nvcc, work, tmp_path, args, "first")
    # Nothing learned yet: the task finds no stub and the front waits for cicc's; the back keeps it.
    assert first["learned stub"]["state"] == "dropped"
    assert float(first["cc1plus"]["start"]) >= float(first["cicc"]["end"])
    (record,) = (tmp_path / "state" / "learned-stubs").glob("*.json")
    assert b"tmpxft_" not in record.read_bytes()  # the run's temp names are masked in what is kept

    second = compile_once(nvcc, work, tmp_path, args, "second")
    stub = second["learned stub"]
    assert stub["state"] == "done" and "as" in second and "gcc -c" not in second  # the split held
    assert float(stub["start"]) >= float(second["cudafe++"]["end"])
    # cc1plus ran beside cicc, on the learned stub.
    assert float(stub["end"]) <= float(second["cc1plus"]["start"]) < float(second["cicc"]["end"])
    verbose = run_tool(fast_nvcc_command(nvcc, args, ["-v"]), cwd=work, tmpdir=tmp_path / "t", env=state(tmp_path))
    assert verbose.returncode == 0
    assert b"cc1plus could start on the stub its last compile's cicc wrote" in verbose.stderr
    remove_files(work, verbose)

    # Another kernel in the source: not the input the stub was learned from.  The front waits
    # for cicc again, the object is nvcc's, and the stub is learned anew.
    (work / "chain.cu").write_text(SLOW_CICC + "__global__ void added(float *p) { p[threadIdx.x] = 3.0f; }\n")
    changed = compile_once(nvcc, work, tmp_path, args, "changed")
    assert changed["learned stub"]["state"] == "dropped"
    again = compile_once(nvcc, work, tmp_path, args, "again")
    assert again["learned stub"]["state"] == "done" and "as" in again and "gcc -c" not in again
    # Off: no learned stub task at all.
    off = compile_once(nvcc, work, tmp_path, args, "off", FAST_NVCC_LEARNED_STUB="0")
    assert "learned stub" not in off


# No external definition: cudafe++'s module_id, and every name built on it in the stub, ends in
# cudafe++'s process id, which differs from compile to compile.
PID_FORM = """\
namespace {
__global__ void kernel(float *p) { p[threadIdx.x] = 2.0f * p[threadIdx.x]; }
int launch() { kernel<<<1, 32>>>(nullptr); return 0; }
int dummy = launch();
}  // namespace
"""


@pytest.mark.nvcc
def test_a_learned_stub_takes_this_compiles_module_id(nvcc, tmp_path):
    """The stub names the module_id, pid and all: the one kept has it masked, the one written
    has this compile's, so the stub holds and the object is nvcc's up to that pid."""
    work = tmp_path / "w"
    work.mkdir()
    (work / "nopid.cu").write_text(PID_FORM)
    env = state(tmp_path)
    args = ["-c", "nopid.cu", *SM90, "--no-compress"]  # every nvcc's spelling (-compress-mode: 13.x)
    require_cudafe_module_id(nvcc, args, cwd=work)  # the pid is cudafe++'s

    def plain(name: str) -> bytes:
        outcome = run_tool([nvcc, *args, "-o", name], cwd=work, tmpdir=tmp_path / "t")
        assert outcome.returncode == 0
        return mask_pid(outcome.files[name])

    for n in range(2):
        before = plain(f"before{n}.o")
        table = tmp_path / f"{n}.csv"
        fast = run_tool(fast_nvcc_command(nvcc, [*args, "-o", f"fast{n}.o"], ["--table", str(table)]),
                        cwd=work, tmpdir=tmp_path / "t", env=env)  # fmt: skip
        assert fast.returncode == 0 and not fast.leftovers
        steps = rows(table)
        assert steps["learned stub"]["state"] == ("dropped" if n == 0 else "done")
        assert "as" in steps and "gcc -c" not in steps
        # The pid's digits are masked; their count lengthens the names (and every offset after),
        # and grows at most once in a test's span: one of the plain compiles around ours has as
        # many digits as its cudafe++'s pid (tests/guess/test_guesses.py, _same_but_pid_as_one_of).
        ours = mask_pid(fast.files[f"fast{n}.o"])
        assert ours in (before, plain(f"after{n}.o"))


def test_masks_carry_a_longer_pid_into_the_mangled_names():
    """A pid-form module_id in a stub, kept from a compile whose cudafe++ had pid 99871 and shown
    for one whose cudafe++ has pid 100003: the mangled lengths grow with it, the anonymous
    namespace's (43 -> 44) and an internal variable's (41 -> 42: pidheavy.cu's CCCL objects; its
    learned stub differed in 2 of 6 compiles on 2026-11-26 as pids wrapped at 32768), as cicc
    itself would spell them; the temp names are this run's."""
    from fast_nvcc.guess.learned_stub import Masks

    def stub(module_id: bytes, prefix: bytes) -> bytes:
        mangled = b"%d_GLOBAL__N_%s" % (11 + len(module_id), module_id)
        internal = b"%d_INTERNAL%s" % (9 + len(module_id), module_id)
        return (b'#include "%s-3_ps.fatbin.c"\n# 1 "/tmp/%s-6_ps.cudafe1.stub.c"\n'
                b"void __device_stub__ZN%s2k0ILi50EEEvPf(float *);\n"
                b"__cudaRegisterVariable(__T5053, __shadow_var(_ZN%s4cuda3std3__45__cpo5beginE, x));\n"
                b'static const char *id = "%s";\n') % (prefix, prefix, mangled, internal, module_id)  # fmt: skip

    before = Masks(b"/tmp/", b"tmpxft_00001a2b_00000000", b"_816de668_5_ps_cu_8af59834_99871")
    after = Masks(b"/tmp/", b"tmpxft_00003c4d_00000000", b"_816de668_5_ps_cu_8af59834_100003")
    kept = before.hide(stub(before.module_id, before.prefix))
    assert b"99871" not in kept and b"tmpxft_" not in kept and b"/tmp/" not in kept
    assert after.show(kept) == stub(after.module_id, after.prefix)
    assert b"ZN44_GLOBAL__N__816de668_5_ps_cu_8af59834_100003" in after.show(kept)
    assert b"ZN42_INTERNAL_816de668_5_ps_cu_8af59834_1000034cuda" in after.show(kept)


def test_a_stub_probe_that_made_its_own_module_id_gives_the_stub_on_nvccs(tmp_path):
    """TE's scaled_activation.cu, first build on idle cores (device, 2026-11-26): the stub probe
    ran cicc's front end on a module_id of its own making, the host compile started on that
    stub, and since cudafe++'s id ends in cudafe++'s pid the stub differed and the host compile
    ran twice (98 s).  The front now puts nvcc's id, and its mangled length, in the probe's stub."""
    from types import SimpleNamespace

    from fast_nvcc.graph.tasks import Action, Task
    from fast_nvcc.guess.stubs import _on_nvccs_module_id
    from fast_nvcc.plan.dryrun import Kind, Step

    own, nvccs = b"_816de668_5_ps_cu_8af59834_9977", b"_816de668_5_ps_cu_8af59834_10231"
    (tmp_path / "probe.module_id").write_bytes(own)
    (tmp_path / "nvcc.module_id").write_bytes(nvccs)
    step = Step(index=3, text="cicc", kind=Kind.CICC, tool="cicc", argv=("cicc",), arch="compute_90")
    argv = ("cicc", "--device-syntax-only", "--gen_module_id_file", "--module_id_file_name", "probe.module_id", "x.ii")
    probe = Task(7, step, Action.STUB_PROBE, argv=argv, optional=True, early=(2, "nvcc.module_id", None))
    run = SimpleNamespace(cwd=str(tmp_path))
    stub = b'void __device_stub__ZN42_GLOBAL__N_%s1kEv(void);\nstatic const char *id = "%s";\n'
    assert _on_nvccs_module_id(run, probe, stub % (own, own)) == (
        b'void __device_stub__ZN43_GLOBAL__N_%s1kEv(void);\nstatic const char *id = "%s";\n' % (nvccs, nvccs))
    # Its own id was nvcc's (a source with an external definition), or the probe read nvcc's: as is.
    (tmp_path / "probe.module_id").write_bytes(nvccs)
    assert _on_nvccs_module_id(run, probe, stub % (nvccs, nvccs)) == stub % (nvccs, nvccs)
    reading = Task(7, step, Action.STUB_PROBE, argv=("cicc", "--module_id_file_name", "nvcc.module_id"), optional=True)
    assert _on_nvccs_module_id(run, reading, b"anything") == b"anything"
