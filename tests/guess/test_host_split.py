"""The split host compile: cc1plus on a placeholder .fatbin.c, then as on the patched assembly.

The core claim, checked with the real gcc: for a translation unit that includes a .fatbin.c
the way nvcc's stub does, patching the placeholder's assembly and running the driver's own as
command gives the same object as ``gcc -c`` on the real file.  The nvcc tests (further down)
then check whole compiles against nvcc.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from fast_nvcc.guess import host_split, stubs

from helpers import assert_same, compare, fast_nvcc_command, module_id_writer, remove_files, run_tool

GCC = shutil.which("gcc")


def fatbin_c(words: list[int], *, relocatable: bool = False) -> str:
    """A .fatbin.c in the shape fatbinary 13.0 writes (see a --keep directory)."""
    section = "__nv_relfatbin" if relocatable else ".nv_fatbin"
    lines = [
        "#define __CUDAFATBINSECTION  \".nvFatBinSegment\"",
        f"#define __CUDAFATBINDATASECTION  \"{section}\"",
        "asm(",
        f"\".section {section}, \\\"a\\\"\\n\"",
        "\".align 8\\n\"",
        "\"fatbinData:\\n\"",
    ]
    for at in range(0, len(words), 4):
        line = words[at : at + 4]  # a last, shorter line is joined by ", "
        lines.append('".quad ' + ("," if len(line) == 4 else ", ").join(f"0x{w:016x}" for w in line) + '\\n"')
    lines += [
        "\".text\\n\");",
        f"extern \"C\" const unsigned long long fatbinData[{len(words)}];",
        "extern \"C\" const void *const wrapper[] __attribute__((section(\".nvFatBinSegment\"))) = { fatbinData };",
        "",
    ]
    return "\n".join(lines)


SOURCE = """\
#include <vector>
int host_function(int n) { std::vector<int> v(n, 3); int s = 0; for (int x : v) s += x; return s; }
#include "x.fatbin.c"
static int after(int x) { return x * 2; }
int use_after(int x) { return after(x); }
"""


def placeholder_of(real: str) -> str:
    fatbin = host_split.parse(real)
    assert fatbin is not None
    return fatbin.placeholder


def test_placeholder_keeps_all_but_the_data():
    real = fatbin_c(list(range(1, 10)))
    placeholder = placeholder_of(real)
    assert placeholder is not None and placeholder.count(host_split.MARKER) == 1
    assert ".quad 0x" not in placeholder and "fatbinData[9]" in placeholder
    assert host_split.parse("no data at all") is None
    split = real.replace('\\n"\n".quad 0x0000000000000005', '\\n"\n/* gap */\n".quad 0x0000000000000005')
    assert host_split.parse(split) is None  # data lines must be one block


def test_patch_refuses_anything_but_other_data():
    placeholder = placeholder_of(fatbin_c([1, 2, 3]))
    assembly = "a:\n.quad FAST_NVCC_FATBIN_DATA\n.text\n"
    real = host_split.parse(fatbin_c([7] * 11))  # other data, other N: fine
    seven = "0x0000000000000007"
    assert host_split.patch(assembly, placeholder, real) == (
        f"a:\n.quad {seven},{seven},{seven},{seven}\n.quad {seven},{seven},{seven},{seven}\n"
        f".quad {seven}, {seven}, {seven}\n.text\n"
    )
    assert host_split.patch(assembly, placeholder, host_split.parse(fatbin_c([1], relocatable=True))) is None  # other text
    assert host_split.patch("no marker\n", placeholder, real) is None
    assert host_split.patch(assembly + assembly, placeholder, real) is None
    assert host_split.patch("a: .quad FAST_NVCC_FATBIN_DATA\n", placeholder, real) is None  # not a line of its own


def test_learned_template_is_keyed_by_the_fatbinary_and_its_options(tmp_path):
    tool = shutil.which("true")
    a = host_split.template_path(str(tmp_path), [tool, "-64", "--embedded-fatbin=/t/a.fatbin.c"], path=None)
    b = host_split.template_path(str(tmp_path), [tool, "-64", "--embedded-fatbin=/t/b.fatbin.c"], path=None)
    c = host_split.template_path(str(tmp_path), [tool, "-64", "--device-c", "--embedded-fatbin=/t/b.fatbin.c"], path=None)
    assert a == b != c
    assert host_split.template_path(str(tmp_path), ["no-such-fatbinary"], path="/nonexistent") is None
    real = fatbin_c([1, 2])
    assert host_split.learn(a, host_split.parse(real)) and not host_split.learn(a, host_split.parse(fatbin_c([3, 4, 5])))  # same text
    assert host_split.read_template(a) == placeholder_of(real)


@pytest.mark.skipif(GCC is None, reason="needs gcc")
@pytest.mark.parametrize("flags", [[], ["-O2", "-fPIC"], ["-O3", "-Wall", "-ffunction-sections"]])
def test_patched_assembly_gives_gcc_s_own_object(tmp_path, flags):
    (tmp_path / "x.cpp").write_text(SOURCE)
    real = fatbin_c([(i * 0x9E3779B97F4A7C15) % 2**64 for i in range(1, 200)])
    argv = [GCC, "-c", "-x", "c++", *flags, "x.cpp", "-o", "x.o"]
    (tmp_path / "x.fatbin.c").write_text(real)
    subprocess.run(argv, cwd=tmp_path, check=True)
    expected = (tmp_path / "x.o").read_bytes()
    (tmp_path / "x.o").unlink()

    placeholder = placeholder_of(fatbin_c([1]))  # learned from another compile
    (tmp_path / "x.fatbin.c").write_text(placeholder)
    plan = host_split.driver_plan(argv, env=os.environ, cwd=str(tmp_path), assembly=str(tmp_path / "x.s"))
    assert plan is not None and os.path.basename(plan.cc1[0]) == "cc1plus"
    subprocess.run(plan.cc1, cwd=tmp_path, env=plan.env, check=True)
    assembly = host_split.patch((tmp_path / "x.s").read_text(), placeholder, host_split.parse(real))
    assert assembly is not None
    (tmp_path / "x.s").write_text(assembly)
    subprocess.run(plan.assembler, cwd=tmp_path, env=plan.env, check=True)
    assert (tmp_path / "x.o").read_bytes() == expected


@pytest.mark.skipif(GCC is None, reason="needs gcc")
def test_driver_plan_declines_what_it_cannot_mirror(tmp_path):
    (tmp_path / "x.cpp").write_text("int f() { return 1; }\n")
    assembly = str(tmp_path / "x.s")
    env = dict(os.environ)
    assert host_split.driver_plan([GCC, "-c", "x.cpp", "-pipe"], env=env, cwd=str(tmp_path), assembly=assembly) is None
    assert host_split.driver_plan([GCC, "-c", "-bogus", "x.cpp"], env=env, cwd=str(tmp_path), assembly=assembly) is None
    assert host_split.driver_plan(["/nonexistent/gcc", "-c", "x.cpp"], env=env, cwd=str(tmp_path), assembly=assembly) is None


# A stub as cicc 13.0 writes it for a CUTLASS example (shortened): the sm_80 and sm_90a cicc
# numbered the register callback's parameter differently and wrote a run of typedefs in
# another order; nothing else differed.
STUB = """\
#include "crt/host_runtime.h"
typedef int  _Z1AE;
typedef float  _Z1BE;
typedef double  _Z1CE;
static void __device_stub__Z4fillPf(float *);
void fill(float *__cuda_0) {}
static void __nv_cudaEntityRegisterCallback(void **__T6849){__nv_dummy_param_ref(__T6849);}
static void __sti____cudaRegisterAll(void) { __cudaRegisterBinary(__nv_cudaEntityRegisterCallback); }
"""
OTHER_ARCH_STUB = STUB.replace("__T6849", "__T32978").replace(
    "typedef int  _Z1AE;\ntypedef float  _Z1BE;", "typedef float  _Z1BE;\ntypedef int  _Z1AE;"
)
RUNTIME = """\
#define __nv_dummy_param_ref(p) (void)(p)
static void __cudaRegisterBinary(void (*f)(void **)) { static void *h; f(&h); }
"""


def front_of(stub: str, printed: list[tuple[int, str]] = ()) -> host_split._Front:
    return host_split._Front("", "", None, list(printed), stub.encode())


def test_a_stub_holds_up_to_what_gcc_makes_no_code_of(tmp_path):
    assert stubs.stub_holds(front_of(STUB), STUB.encode())
    assert stubs.stub_holds(front_of(STUB), OTHER_ARCH_STUB.encode())
    # Anything else is another stub: a kernel more, other parameters, another order of code.
    for other in (STUB.replace("fill(float *__cuda_0)", "fill(float *__cuda_1)"),
                  STUB + "static void __device_stub__Z4morev(void);\n",
                  STUB.replace("__nv_dummy_param_ref(__T6849)", "__nv_dummy_param_ref(__T1)")):  # fmt: skip
        assert not stubs.stub_holds(front_of(STUB), other.encode())
    # A message of cc1plus might name what differs: only the same bytes hold then.
    (tmp_path / "warning.2").write_text("warning: ...")
    printed = [(2, str(tmp_path / "warning.2"))]
    assert stubs.stub_holds(front_of(STUB, printed), STUB.encode())
    assert not stubs.stub_holds(front_of(STUB, printed), OTHER_ARCH_STUB.encode())
    assert not stubs.stub_holds(front_of(STUB), None)  # the last cicc wrote none


@pytest.mark.skipif(GCC is None, reason="needs gcc")
@pytest.mark.parametrize("flags", [["-O3"], ["-O2", "-fPIC", "-Wall", "-Wextra"]])
def test_stubs_that_hold_give_gcc_the_same_object(tmp_path, flags):
    """What stub_holds lets pass makes no difference to gcc's object."""
    objects = []
    for number, stub in enumerate((STUB, OTHER_ARCH_STUB)):
        (tmp_path / "crt").mkdir(exist_ok=True)
        (tmp_path / "crt" / "host_runtime.h").write_text(RUNTIME)
        (tmp_path / "x.stub.c").write_text(stub)
        (tmp_path / "x.cpp").write_text('#include "x.stub.c"\n')
        subprocess.run([GCC, "-c", "-x", "c++", "-I.", *flags, "x.cpp", "-o", f"x{number}.o"], cwd=tmp_path, check=True)
        objects.append((tmp_path / f"x{number}.o").read_bytes())
    assert objects[0] == objects[1]


# -- whole compiles against nvcc ----------------------------------------------------------------

I = "-Iinclude"
GENCODE = ["-gencode", "arch=compute_75,code=sm_75", "-gencode", "arch=compute_90,code=[sm_90,compute_90]"]
# Each case, and the compile of another source that teaches fast_nvcc the placeholder first
# (other data, another N, another last data line).
SPLIT_CASES = {
    "c-3arch": (["-c", "kernel.cu", I, *GENCODE], ["-c", "warning.cu", *GENCODE]),
    "dc": (["-dc", "kernel.cu", I, "-arch=sm_80"], ["-dc", "rdc_a.cu", "-arch=sm_86"]),
    "link-executable": (["kernel.cu", "main.cu", I, "-arch=sm_80", "-o", "app"], ["-c", "warning.cu", "-arch=sm_75"]),
    "host-warnings": (["-c", "warning.cu", "-arch=sm_80", "-Xcompiler", "-Wall,-Wextra"], ["-c", "kernel.cu", I, "-arch=sm_90"]),
    "MD-O3": (["-c", "kernel.cu", I, "-arch=sm_80", "-MD", "-O3", "-Xcompiler", "-fPIC"], ["-c", "warning.cu", "-arch=sm_80"]),
}  # fmt: skip


def tools_in(table: Path) -> list[str]:
    import csv

    with open(table, newline="") as handle:
        return [row["tool"] for row in csv.DictReader(handle)]


@pytest.mark.nvcc
@pytest.mark.parametrize("case", sorted(SPLIT_CASES))
def test_split_compile_same_as_nvcc(nvcc, sources, tmp_path, case):
    """The first compile, with nothing learned, splits from a placeholder it probes fatbinary
    for; a second compile (other data, another N) splits from the placeholder learned."""
    first, second = SPLIT_CASES[case]
    env = {"FAST_NVCC_CACHE_DIR": str(tmp_path / "state")}  # nothing learned yet
    for n, args in enumerate((first, second)):
        table = tmp_path / f"{n}.csv"
        result = compare(nvcc, args, cwd=sources, env=env, options=["--table", str(table)])
        assert_same(result)
        tools = tools_in(table)
        if n == 0 and case == "link-executable":
            # Both sources' compiles split; so does the -dlink stub's compile, whose
            # fatbinary (-link) has a placeholder of its own.
            assert tools.count("as") == 3 and "gcc -c" not in tools, tools
        else:
            assert "cc1plus" in tools and "as" in tools and "gcc -c" not in tools, tools
        remove_files(sources, result.fast)


def test_the_fatbinary_probe_redirects_every_output_or_declines():
    image, out = "/w/probe.ptx", "/w/probe.fatbin.c"
    plan = ["fatbinary", "-64", '--cicc-cmdline=-ftz=0 ', "--image3=kind=elf,sm=80,file=/t/a.cubin",
            "--image3=kind=ptx,sm=90a,file=/t/a.ptx", "--embedded-fatbin=/t/a.fatbin.c", "--device-c"]
    assert host_split.probe_argv(plan, image=image, output=out) == ([
        "fatbinary", "-64", '--cicc-cmdline=-ftz=0 ', f"--embedded-fatbin={out}", "--device-c",
        f"--image3=kind=ptx,sm=80,file={image}"], "80")
    created = [*plan, "--create=/t/a.fatbin"]
    assert f"--create={out.removesuffix('.c')}" in host_split.probe_argv(created, image=image, output=out)[0]
    assert host_split.probe_argv(plan[:-2], image=image, output=out) is None  # no .fatbin.c to learn from
    assert host_split.probe_argv([*plan, "-o", "/t/x"], image=image, output=out) is None
    assert host_split.probe_argv(plan[:3] + plan[5:], image=image, output=out) is None  # no image


@pytest.mark.nvcc
@pytest.mark.one_toolchain  # fast_nvcc's fallbacks; 13.0 and 13.5 print one plan for them
def test_split_that_cannot_hold_compiles_as_printed(nvcc, sources, tmp_path):
    """A host error (-Werror) stops cc1plus; a wrong learned placeholder fails the check; a
    -g compile is not split at all. Each still gives nvcc's object or nvcc's messages."""
    env = {"FAST_NVCC_CACHE_DIR": str(tmp_path / "state")}
    args = ["-c", "warning.cu", "-arch=sm_80", "-o", "w.o"]
    learn = run_tool(fast_nvcc_command(nvcc, args), cwd=sources, tmpdir=tmp_path / "t", env=env)
    assert learn.returncode == 0
    (sources / "w.o").unlink()
    (template,) = (tmp_path / "state" / "fatbin-templates").iterdir()

    failing = args + ["-Xcompiler", "-Werror,-Wframe-larger-than=1"]  # only cc1plus sees frames
    result = compare(nvcc, failing, cwd=sources, env=env, options=["--table", str(tmp_path / "a.csv")])
    assert result.plain.returncode != 0 and result.plain.stderr.count(b"error") >= 1
    assert_same(result)
    assert "as" not in tools_in(tmp_path / "a.csv")

    good = template.read_text()
    template.write_text(good.replace("#define __CUDAFATBINSECTION", "#define __CUDAFATBINSECTION /* stale */"))
    result = compare(nvcc, args, cwd=sources, env=env, options=["--table", str(tmp_path / "b.csv")])
    assert_same(result)
    assert "cc1plus" in tools_in(tmp_path / "b.csv") and "as" not in tools_in(tmp_path / "b.csv")
    assert host_split._same_but_size(template.read_text(), good)  # learned again from the real file
    (sources / "w.o").unlink()

    result = compare(nvcc, args + ["-g"], cwd=sources, env=env, options=["--table", str(tmp_path / "c.csv")])
    assert_same(result, host_debug_info=True, scratch=tmp_path)
    assert "cc1plus" not in tools_in(tmp_path / "c.csv")


def stub_rows(table: Path) -> tuple[dict, list[dict], list[dict]]:
    """The front's row, the stub probes' rows and the ciccs' rows (with their module_id
    checks, whose end makes a cicc's stub final) of a --table."""
    import csv

    with open(table, newline="") as handle:
        rows = list(csv.DictReader(handle))
    front = next(r for r in rows if r["tool"] == "cc1plus")
    return front, [r for r in rows if r["tool"] == "cicc stub"], [r for r in rows if r["tool"] in ("cicc", "check module_id")]


@pytest.mark.parametrize("cicc_ended, check_ends, waited", [(True, True, True), (False, True, False), (True, False, False)],
                         ids=["check-a-moment-away", "cicc-still-runs", "check-reruns-its-cicc"])
def test_the_front_waits_a_moment_for_the_last_ciccs_own_check(monkeypatch, cicc_ended, check_ends, waited):
    """benchmarks/tree's sorts for sm_75 + sm_80 (2026-12-01): the host compile's front started
    on the sm_75 cicc's stub when the sm_80 cicc had ended and only its module_id check was
    left; their launch bounds differ (256 and 384 threads), so the host compile ran twice.  The
    front now waits for that check, a moment; not for a cicc that still runs (a sibling's stub
    is the point of starting early), nor past MOMENT (a check that runs its cicc again)."""
    import threading
    from types import SimpleNamespace

    from tasks import sh_task

    monkeypatch.setattr(stubs, "MOMENT", 0.3)
    cicc, check = sh_task(0, "cicc")._replace(checked_by=1), sh_task(1, "check")
    done = {0: cicc_ended, 1: False}
    run = SimpleNamespace(dag=SimpleNamespace(tasks=[cicc, check]), done=done.__getitem__)
    timer = threading.Timer(0.05, done.__setitem__, (1, True)) if check_ends else None
    if timer is not None:
        timer.start()
    try:
        stubs._await_own_check(run, check.id)
        assert done[1] is waited  # returned once the check was done, or without waiting for it
    finally:
        if timer is not None:
            timer.cancel()


@pytest.mark.nvcc
@pytest.mark.one_toolchain  # 13.0 and 13.5 alike: the first cicc writes the module_id (11.8's branch: docs/toolchains.md)
@pytest.mark.parametrize("pool", [8, 1], ids=["idle-cores", "busy"])
def test_a_stub_that_differs_between_architectures(nvcc, sources, tmp_path, pool):
    """For a kernel that exists for sm_90 only, the sm_80 stub has less, and only the sm_90
    cicc's stub will do; that cicc has far more to compile, so it ends last.  With idle cores
    the stub probe (the sm_90 cicc's front end alone) runs, the front waits for it, and the
    split holds; with none the probe is dropped, the front starts from the sm_80 stub, and
    must give way to the host compile as nvcc printed it, on the real stub.  The object is
    nvcc's either way."""
    env = {"FAST_NVCC_CACHE_DIR": str(tmp_path / "state"), "FAST_NVCC_POOL_SIZE": str(pool),
           "FAST_NVCC_POOL_DIR": str(tmp_path / "pool")}  # fmt: skip
    gencode = ["-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=sm_90"]
    learn = run_tool(fast_nvcc_command(nvcc, ["-c", "warning.cu", *gencode]), cwd=sources, tmpdir=tmp_path / "t", env=env)
    assert learn.returncode == 0, learn.stderr
    for name in learn.files:
        (sources / name).unlink()
    result = compare(nvcc, ["-c", "arch_stub.cu", *gencode], cwd=sources, env=env,
                     options=["-j", str(pool), "--table", str(tmp_path / "t.csv")])  # fmt: skip
    assert_same(result)
    front, probes, ciccs = stub_rows(tmp_path / "t.csv")
    tools = tools_in(tmp_path / "t.csv")
    last_cicc_end = max(float(r["end"]) for r in ciccs if r["arch"] == "compute_90")
    if pool == 1:
        assert not probes  # no idle slot: dropped before it started
    helped = [r for r in probes if r["state"] == "done"]
    if helped or float(front["start"]) >= last_cicc_end:  # it started from the sm_90 stub
        assert "as" in tools and "gcc -c" not in tools, " ".join(tools)
    else:  # from the sm_80 stub, unless the sm_90 one was final by the time it looked
        assert "as" in tools or "gcc -c" in tools, " ".join(tools)
    writer = module_id_writer(nvcc, ["-c", "arch_stub.cu", *gencode], cwd=sources)
    if pool == 8 and writer.arch == "compute_90":
        # nvcc 11.8: the sm_90 cicc writes the module_id that cudafe++, and so the front, waits
        # for; the front starts from its final stub, and the probe, with nothing to win, is dropped.
        assert not helped and float(front["start"]) >= last_cicc_end, (probes, front)
    elif pool == 8:
        # The probe started with the sm_90 cicc; unless it failed, the front started from it.
        (probe,) = probes
        assert helped and float(probe["end"]) <= float(front["start"]) < last_cicc_end, (probe, front)
    verbose = run_tool(fast_nvcc_command(nvcc, ["-c", "arch_stub.cu", *gencode], ["-v", "-j", str(pool), "--table", str(tmp_path / "v.csv")]),
                       cwd=sources, tmpdir=tmp_path / "t", env=env)  # fmt: skip
    if "gcc -c" in tools_in(tmp_path / "v.csv"):
        assert b"host compile run as printed: its stub differs from the one it started from" in verbose.stderr
