"""Command lines from projects fast_nvcc's authors did not write, against the real nvcc.

Each case quotes the flags a real build system or project gives nvcc (where from: the comment
above it), applied to the small ``flags.cu`` (a string macro, fast math, a host constexpr
function called from device code) or ``warning.cu``, for one or two architectures; every case
compares the files, stdout, stderr and exit code with plain nvcc's.
"""

from __future__ import annotations

import pytest

from helpers import assert_same, compare

pytestmark = [pytest.mark.nvcc, pytest.mark.side_by_side]  # compares outputs only: scripts/test runs it beside other tests (pyproject.toml)

CASES = {
    # CMake, Modules/Compiler/NVIDIA-CUDA.cmake (-forward-unknown-to-host-compiler, -Xcompiler=-fPIE
    # for POSITION_INDEPENDENT_CODE, -isystem=, -MD -MT <OBJECT> -MF <DEPFILE>, -x cu) and
    # Source/cmGeneratorTarget.cxx, AddCUDAArchitectureFlagsImpl ("--generate-code=arch=compute_80,
    # code=[compute_80,sm_80]" for CUDA_ARCHITECTURES 80); a definition with a space as CMake quotes
    # it for the shell (FOO="a b" arrives as one word -DGREETING="a b"); -pthread is unknown to
    # nvcc and goes to gcc.
    "cmake": [
        "-forward-unknown-to-host-compiler", '-DGREETING="a b"', "-isystem=include", "-O3", "-DNDEBUG",
        "--generate-code=arch=compute_80,code=[compute_80,sm_80]", "-Xcompiler=-fPIE", "-pthread",
        "-std=c++17", "--expt-relaxed-constexpr", "-MD", "-MT", "CMakeFiles/k.dir/flags.cu.o",
        "-MF", "CMakeFiles/k.dir/flags.cu.o.d", "-x", "cu", "-c", "flags.cu", "-o", "flags.cu.o",
    ],
    # The same definition after a shell has removed the quotes: gcc sees GREETING as `a b`, and
    # nvcc's error (the same from both).
    "cmake-define-unquoted": [
        "-forward-unknown-to-host-compiler", "-DGREETING=a b", "--expt-relaxed-constexpr",
        "--generate-code=arch=compute_80,code=[compute_80,sm_80]", "-x", "cu", "-c", "flags.cu", "-o", "flags.o",
    ],
    # CMake: CMAKE_CUDA_RESPONSE_FILE_FLAG "--options-file " (NVIDIA-CUDA.cmake), which Ninja uses
    # for long command lines; the file holds the flags.  nvcc's reading of quotes in such a file
    # is its own (neither the shell's nor gcc's): the quoted cases end in nvcc's errors.
    "cmake-options-file": ["--options-file", "flags.rsp", "-x", "cu", "-c", "flags.cu", "-o", "flags.o"],
    "options-file-quotes": ["--options-file", "quotes.rsp", "-c", "flags.cu", "-o", "flags.o"],
    "options-file-single-quotes": ["--options-file", "single.rsp", "-c", "flags.cu", "-o", "flags.o"],
    # llm.c, Makefile: NVCC_FLAGS = -O3 -t=0 --use_fast_math -std=c++17, --generate-code
    # arch=compute_$(GPU_COMPUTE_CAPABILITY),code=[compute_..,sm_..], PFLAGS -DENABLE_BF16, the
    # profile_gpt2cu target's -lineinfo, and -Xcompiler -fopenmp -DOMP where gcc has OpenMP.
    "llm.c": [
        "-O3", "-t=0", "--use_fast_math", "-std=c++17", "--generate-code", "arch=compute_90,code=[compute_90,sm_90]",
        "-Xcompiler", "-fopenmp", "-DOMP", "-DENABLE_BF16", "-lineinfo", "--expt-relaxed-constexpr",
        "-c", "flags.cu", "-o", "flags.o",
    ],
    # llama.cpp, Makefile: MK_NVCCFLAGS = -std=c++11 -O3 plus -use_fast_math,
    # --forward-unknown-to-host-compiler, -Werror all-warnings (LLAMA_FATAL_WARNINGS) and -lineinfo
    # (LLAMA_DEBUG): on a source with a warning, nvcc's error.
    "llama.cpp-fatal-warnings": [
        "-std=c++11", "-O3", "-use_fast_math", "-Werror", "all-warnings", "--forward-unknown-to-host-compiler",
        "-Wno-deprecated-gpu-targets", "-arch=sm_80", "-lineinfo", "-c", "warning.cu", "-o", "warning.o",
    ],
    "llama.cpp": [
        "-std=c++17", "-O3", "-use_fast_math", "--forward-unknown-to-host-compiler", "-arch=sm_80", "-lineinfo",
        "--expt-relaxed-constexpr", "-c", "flags.cu", "-o", "flags.o",
    ],
    # CUTLASS, CMakeLists.txt: CUTLASS_CUDA_NVCC_FLAGS -Xcompiler=-Wconversion,
    # -Xcompiler=-fno-strict-aliasing, -lineinfo outside Release, -DCUTLASS_ENABLE_TENSOR_CORE_MMA=1,
    # and cutlass_apply_cuda_gencode_flags' -gencode=arch=compute_90a,code=[sm_90a,compute_90a].
    "cutlass": [
        "--expt-relaxed-constexpr", "-DCUTLASS_ENABLE_TENSOR_CORE_MMA=1", "-Xcompiler=-Wconversion",
        "-Xcompiler=-fno-strict-aliasing", "-lineinfo", "-std=c++17",
        "-gencode=arch=compute_90a,code=[sm_90a,compute_90a]", "-c", "flags.cu", "-o", "flags.o",
    ],
    # PyTorch, torch/utils/cpp_extension.py: COMMON_NVCC_FLAGS (-D__CUDA_NO_HALF_OPERATORS__ ...,
    # --expt-relaxed-constexpr), the ninja rule's --generate-dependencies-with-compile
    # --dependency-output, --compiler-options '-fPIC' (the quotes reach nvcc through ninja's shell as
    # -fPIC), -DTORCH_EXTENSION_NAME and the quoted -DPYBIND11_COMPILER_TYPE="_gcc", and one
    # -gencode per TORCH_CUDA_ARCH_LIST entry (8.0 and 9.0+PTX).
    "pytorch-extension": [
        "--generate-dependencies-with-compile", "--dependency-output", "flags.cuda.o.d",
        "-DTORCH_EXTENSION_NAME=flags_ext", "-DTORCH_API_INCLUDE_EXTENSION_H", '-DPYBIND11_COMPILER_TYPE="_gcc"',
        "-D__CUDA_NO_HALF_OPERATORS__", "-D__CUDA_NO_HALF_CONVERSIONS__", "-D__CUDA_NO_BFLOAT16_CONVERSIONS__",
        "-D__CUDA_NO_HALF2_OPERATORS__", "--expt-relaxed-constexpr",
        "-gencode=arch=compute_80,code=sm_80", "-gencode=arch=compute_90,code=compute_90",
        "-gencode=arch=compute_90,code=sm_90", "--compiler-options", "-fPIC", "-std=c++17",
        "-c", "flags.cu", "-o", "flags.cuda.o",
    ],
    # ThunderKittens, setup.py (a PyTorch CUDAExtension): its cuda_flags for target h100.
    "thunderkittens": [
        "-DNDEBUG", "-Xcompiler=-Wno-psabi", "-Xcompiler=-fno-strict-aliasing", "--expt-extended-lambda",
        "--expt-relaxed-constexpr", "-forward-unknown-to-host-compiler", "--use_fast_math", "-std=c++20", "-O3",
        "-Xptxas=--verbose", "-Xptxas=--warn-on-spills", "-DTORCH_COMPILE", "-arch=sm_90a",
        "-c", "flags.cu", "-o", "flags.o",
    ],
    # Without --expt-relaxed-constexpr, flags.cu's device code may not call the host constexpr
    # function: nvcc's error and exit code.
    "no-relaxed-constexpr": ["-arch=sm_80", "-x", "cu", "-c", "flags.cu", "-o", "flags.o"],
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_real_world_command_line(nvcc, sources, case):
    (sources / "flags.rsp").write_text(
        "-forward-unknown-to-host-compiler -Iinclude -DNDEBUG\n"
        "--generate-code=arch=compute_80,code=[compute_80,sm_80] -Xcompiler=-fPIE --expt-relaxed-constexpr\n"
    )
    rest = " -arch=sm_80 --expt-relaxed-constexpr\n"
    (sources / "quotes.rsp").write_text('"-DGREETING=\\"from a file\\""' + rest)
    (sources / "single.rsp").write_text("'-DGREETING=\"from a file\"'" + rest)
    (sources / "CMakeFiles" / "k.dir").mkdir(parents=True)  # CMake makes the depfile's directory
    assert_same(compare(nvcc, CASES[case], cwd=sources))
