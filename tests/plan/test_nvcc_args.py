import pytest

from fast_nvcc.plan.nvcc_args import (
    Option,
    dependency_options,
    effective_args,
    iter_options,
    passthrough_reason,
    threads,
)


def test_option_forms():
    args = ["-o", "a.o", "--output-file=b.o", "-MT=x", "--dependency-target-name", "y", "-Xcompiler", "-MT", "-c", "-Iinc", "k.cu"]
    assert list(iter_options(args)) == [
        Option("--output-file", "a.o"),
        Option("--output-file", "b.o"),
        Option("--dependency-target-name", "x"),
        Option("--dependency-target-name", "y"),
        Option("--compiler-options", "-MT"),  # a value, not nvcc's -MT
        Option("-c", None),
        Option("-Iinc", None),
        Option("k.cu", None),
    ]


# What nvcc 13.0 wrote as the rule's target for these command lines (measured; see docs).
@pytest.mark.parametrize(
    ("args", "target"),
    [
        (["-c", "-MD", "-MF", "t.d", "-o", "./zz.o"], "./zz.o"),
        (["-c", "-MD", "-MF", "t.d", "-odir", "out", "-o", "zz.o"], "out/zz.o"),
        (["-c", "-MD", "-MF", "t.d", "-odir", "out/"], "out//e.o"),
        (["-dc", "-MD", "-MF", "t.d"], "e.o"),
        (["-ptx", "-MD", "-MF", "t.d"], "e.o"),
        (["-M", "-o", "t.d", "-c"], "e.o"),
        (["-c", "-MD", "-MT", "x", "-MT", "y"], "y"),
        (["-MD", "-MF", "t.d", "-o", "app"], "app"),
        (["-c", "--generate-dependencies-with-compile", "--dependency-target-name=abc"], "abc"),
        (["-c", "-MD", "-odir", "objs", "-MT", "obj/x.o"], "objs/obj/x.o"),
        (["-c", "-MD", "-odir", "objs", "-MT", "/abs/x.o", "-o", "out.o"], "objs//abs/x.o"),
        (["-M", "-odir", "objs", "-MT", "t"], "objs/t"),
        (["-c", "-MD", "-odir", "objs", "-MT", ""], "objs/"),
    ],
)
def test_dependency_target(args, target):
    assert dependency_options(args).target_for("e.cu") == target


def test_dependency_flavours():
    assert dependency_options(["-MMD"]).nonsystem
    assert dependency_options(["--generate-nonsystem-dependencies"]).nonsystem
    assert not dependency_options(["-MD"]).nonsystem
    assert dependency_options(["-MP"]).phony_targets
    assert dependency_options(["--generate-dependency-targets"]).phony_targets


@pytest.mark.parametrize(
    ("args", "passes"),
    [
        (["--version"], True),
        (["-V"], True),
        (["--help"], True),
        (["--list-gpu-arch"], True),
        (["-c", "k.cu", "--dryrun"], True),
        (["-c", "k.cu", "-keep"], True),
        (["-c", "k.cu", "--keep-dir", "kk"], True),
        (["-c", "k.cu", "-time", "t.csv"], True),
        (["-c", "k.cu", "--fdevice-time-trace", "-", "-t", "2"], True),
        (["-c", "k.cu", "--fdevice-time-trace", "-"], False),
        (["-c", "k.cu", "-arch=native"], True),
        (["-c", "k.cu", "-v"], True),
        (["-run", "k.cu"], True),
        (["-c", "k.cu", "-arch=sm_80"], False),
        (["-c", "k.cu", "-Xcompiler", "-v"], False),  # the host compiler's -v
        (["-c", "k.cu", "-t", "4", "--split-compile", "2"], False),
    ],
)
def test_passthrough(args, passes):
    assert (passthrough_reason(args) is not None) == passes


def test_effective_args_include_environment_and_options_files(tmp_path):
    (tmp_path / "opts.txt").write_text('-MT "from file" -DX=1\n')
    env = {"NVCC_PREPEND_FLAGS": "-MT first", "NVCC_APPEND_FLAGS": "-MP"}
    args = effective_args(["-c", "k.cu", "-optf", "opts.txt"], env, cwd=str(tmp_path))
    assert args == ["-MT", "first", "-c", "k.cu", "-MT", "from file", "-DX=1", "-MP"]
    assert dependency_options(args).target == "from file"
    assert dependency_options(args).phony_targets


@pytest.mark.parametrize(
    ("words", "expected"),
    [
        ([], None),
        (["-t", "0"], "0"),
        (["-t0"], "0"),
        (["-t=4"], "4"),
        (["--threads", "2", "-t1"], "1"),
        (["-t1", "--threads=2"], "2"),
        (["-c", "-t"], None),  # a -t without its value is nvcc's error, not a thread count
    ],
)
def test_threads_value(words, expected):
    assert threads(words) == expected
