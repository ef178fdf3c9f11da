import os
import subprocess
import sys
from pathlib import Path

import pytest

from fast_nvcc.cli import UsageError, build_parser, split_command_line


@pytest.mark.parametrize(
    ("argv", "ours", "launcher", "rest"),
    [
        (["--", "-c", "k.cu"], [], None, ["-c", "k.cu"]),
        (["-j", "4", "--faithful", "--", "-c"], ["-j", "4", "--faithful"], None, ["-c"]),
        (["-j4", "--", "-c"], ["-j4"], None, ["-c"]),
        (["--nvcc=/x/nvcc", "--", "-c"], ["--nvcc=/x/nvcc"], None, ["-c"]),
        # CMAKE_CUDA_COMPILER_LAUNCHER: the compiler comes first, then its arguments.
        (["/usr/local/cuda/bin/nvcc", "-c", "k.cu", "--", "x"], [], "/usr/local/cuda/bin/nvcc", ["-c", "k.cu", "--", "x"]),
        (["-v", "nvcc", "-c"], ["-v"], "nvcc", ["-c"]),
    ],
)
def test_split_command_line(argv, ours, launcher, rest):
    assert split_command_line(argv, build_parser()) == (ours, launcher, rest)


@pytest.mark.parametrize("argv", [["-c", "k.cu"], ["--bogus", "--"]])
def test_split_errors(argv):
    with pytest.raises(UsageError):
        split_command_line(argv, build_parser())


@pytest.mark.parametrize("argv", [["--table", "--", "-c", "k.cu"], ["--trace"]])
def test_an_option_without_its_value_says_so(argv):
    # not "unrecognized option '-c'": the '--' was taken as the table's file name before
    with pytest.raises(UsageError, match=f"{argv[0]} needs a value"):
        split_command_line(argv, build_parser())


def run_cli(*args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "fast_nvcc", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        check=False,
    )


@pytest.mark.parametrize(
    "args",
    [[], ["-j", "2"], ["-c", "k.cu"], ["--jobs", "0", "--"], ["--jobs", "many", "--"], ["--nvcc", "/no/such/nvcc", "--", "-c"]],
)
def test_own_errors_are_one_line(args):
    proc = run_cli(*args)
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("fast_nvcc: error: "), proc.stderr


def test_no_nvcc_anywhere_is_one_line(tmp_path):
    env = {"PATH": str(tmp_path), "CUDA_HOME": "", "CUDA_PATH": "", "FAST_NVCC_NVCC": "", "PYTHONNOUSERSITE": "1"}
    proc = subprocess.run(
        [sys.executable, "-S", "-c", "import sys; sys.path.insert(0, %r); from fast_nvcc.cli import main; sys.exit(main(['--', '-c', 'k.cu']))" % str(Path(__file__).parent.parent)],
        capture_output=True, text=True, env={**os.environ, **env}, check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith("fast_nvcc: error: cannot find nvcc") and proc.stderr.count("\n") == 1


def test_version_and_help():
    version = run_cli("--version")
    assert version.returncode == 0 and version.stdout.startswith("fast_nvcc ")
    helptext = run_cli("--help")
    assert helptext.returncode == 0 and "--faithful" in helptext.stdout


@pytest.mark.parametrize("script", ["fast_nvcc", "fast_nvcc.py"])
def test_console_scripts(script):
    path = Path(sys.executable).parent / script
    if not path.exists():
        pytest.skip(f"{script} is not installed next to {sys.executable}")
    proc = subprocess.run([str(path), "--version"], capture_output=True, text=True, check=False)
    assert proc.returncode == 0 and proc.stdout.startswith("fast_nvcc "), proc.stderr


@pytest.mark.parametrize(("typo", "meant"), [("--sumary", "--summary"), ("--faithfull", "--faithful"),
                                             ("--split-source=*.cu", "--split-sources")])  # fmt: skip
def test_a_typo_gets_the_option_it_was_near(typo, meant):
    proc = run_cli(typo, "--", "-c", "k.cu")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert f"did you mean '{meant}'?" in proc.stderr, proc.stderr


def test_a_wrong_compiler_in_the_launcher_form_is_named_as_given(tmp_path):
    """CMake runs `fast_nvcc /path/to/nvcc <args>`: a wrong path there is not an --nvcc the user
    never passed."""
    proc = run_cli(str(tmp_path / "no-nvcc"), "-c", "k.cu")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "launcher form" in proc.stderr and "--nvcc" not in proc.stderr, proc.stderr
    assert "--nvcc names" in run_cli("--nvcc", str(tmp_path / "no-nvcc"), "--", "-c", "k.cu").stderr
