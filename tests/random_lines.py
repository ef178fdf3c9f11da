"""Random nvcc command lines over the test sources: modes, targets, options, dependency files,
options files and NVCC_APPEND_FLAGS, drawn together, as real builds combine them.

Each option alone has its case in test_integration.py; what these find is how they interact
(under -odir a -MT target carries the directory; under -g gcc names the working directory in a
line marker, which no dependency file lists). :func:`draw` is a plain function of its random
generator, so a seed names a line for good.
"""

from __future__ import annotations

import itertools
import random
from typing import NamedTuple

MODES = [
    ["-c"], ["-c"], ["-c"], ["-dc"], ["-rdc=true", "-c"], ["-dc", "-dlto"], ["-ptx"], ["-cubin"],
    ["-fatbin"], ["-lib"], ["-E"], ["-cuda"], [],  # []: compile and link an executable
]  # fmt: skip
TARGETS = [
    ["-arch=sm_80"], ["-arch=sm_90"], ["-arch=sm_90a"], ["-arch=compute_80"], [],
    ["-arch=compute_80", "-code=sm_80,compute_80"], ["-arch=sm_75", "-code=sm_75,sm_80"],
    ["-gencode", "arch=compute_75,code=sm_75", "-gencode", "arch=compute_90,code=[sm_90,compute_90]"],
    ["-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_80,code=sm_86"],
    ["--gpu-architecture=sm_89"], ["-arch", "sm_80", "-arch", "sm_90"], ["-arch=native"],
]  # fmt: skip
OPTIONS = [
    ["-O3"], ["-O0"], ["--optimize", "2"], ["-lineinfo"], ["--generate-line-info"], ["-g"],
    ["-G", "-compress-mode=none"], ["-src-in-ptx", "-lineinfo"], ["-Xcompiler", "-fPIC"],
    ["-Xcompiler=-O2,-Wall"], ["-Xcompiler", "-g"], ["-Xcompiler", "-DBAR=2", "-Xcompiler", "-O1"],
    ["-Xcompiler", "-bogus-flag"], ["--forward-unknown-to-host-compiler", "-fno-strict-aliasing"],
    ["-Xptxas", "-O1"], ["-Xptxas", "-v"], ["--ptxas-options=-v"], ["--resource-usage"],
    ["-Xptxas", "-warn-spills"], ["-Xptxas", "-bogus"], ["-Xcudafe", "--diag_suppress=177"],
    ["-diag-suppress", "20012"], ["--display-error-number"], ["-w"], ["-Werror", "all-warnings"],
    ["-Wno-deprecated-gpu-targets"], ["-use_fast_math"], ["-ftz=true"], ["-fmad=false"],
    ["-prec-div=false"], ["-maxrregcount=32"], ["--extended-lambda"], ["--expt-relaxed-constexpr"],
    ["-std=c++17"], ["-std=c++20"], ['-DGREETING="hi there"'], ["-DFOO=1"], ["-U", "FOO"],
    ["-I", "dir with space"], ["--default-stream", "per-thread"], ["--keep-device-functions"],
    ["-t0"], ["-t", "2"], ["--split-compile", "2"], ["-compress-mode=size"], ["-ccbin", "g++"],
    ["-odir", "objs"], ["--output-directory", "objs"], ["-x", "cu"], ["-noprof"], ["-restrict"],
    ["--cudart", "shared"], ["--cudart=none"], ["-Xfatbin", "-compress-all"], ["-Xcicc", "-O1"],
    ["-static-global-template-stub=false"], ["-Xnvlink", "--verbose"], ["-Xptxas=-v,-O2"], ["--keep"],
]  # fmt: skip
DEPENDENCIES = [[], [], [], ["-MD"], ["-MMD", "-MP"], ["-MD", "-MT", "obj/x.o", "-MF", "x.d"], ["-M"], ["-MM"]]
SOURCES = [
    ["kernel.cu"], ["warning.cu"], ["host_first.cu"], ["rerun_warning.cu"], ["flags.cu"],
    ["line_directives.cu"], ["device_error.cu"], ["arch_stub.cu"], ["main.cu"], ["rdc_a.cu"],
    ["kernel.cu", "warning.cu"], ["rdc_a.cu", "rdc_b.cu"], ["host.cpp"], ["kernel.cu", "host.cpp"],
]  # fmt: skip
# A source whose module_id ends in cudafe++'s pid: compressed, the fatbinary differs in every
# byte after it from one nvcc run to the next, so its lines keep the fatbinary uncompressed; and
# with line info its relocatable object names a section after a number that differs too
# (.nv_debug_ptx_txt.1255459048), so its lines have none; nor -dlto, whose LTO IR differs.
PID_SOURCES = {"rerun_warning.cu"}
LINE_INFO = {"-lineinfo", "--generate-line-info", "-G", "-g", "-src-in-ptx"}
HOST_SOURCE = '#include "scale.h"\nint twice(int x) { return scale(x, 2); }\n'  # host.cpp
APPENDED = ["-t 0", "-lineinfo", "-DFOO=3", "-Xcompiler -fPIC"]  # NVCC_APPEND_FLAGS


class Line(NamedTuple):
    args: list[str]
    env: dict[str, str]
    options_file: str | None  # the text of -optf opts.txt, if the line has it

    @property
    def threads(self) -> bool:
        """Does nvcc run this line on its threads (-t N, N != 1, anywhere it can say so)?"""
        words = self.words
        pairs = list(itertools.pairwise(words))
        return "-t0" in words or ("-t", "2") in pairs or ("-t", "0") in pairs

    @property
    def host_debug_info(self) -> bool:
        """Does the line make objects with host debug info (their strings' order varies)?"""
        words = self.words
        debug = "-g" in words or "-G" in words or ("-Xcompiler", "-g") in itertools.pairwise(words)
        return debug and not {"-M", "-MM", "-E", "-cuda", "-ptx", "-cubin", "-fatbin"} & set(words)

    @property
    def words(self) -> list[str]:
        """Its options as nvcc reads them: the command line, the options file, NVCC_APPEND_FLAGS."""
        return [*self.args, *(self.options_file or "").split(), *self.env.get("NVCC_APPEND_FLAGS", "").split()]


def draw(rng: random.Random) -> Line:
    mode = rng.choice(MODES)
    sources = rng.choice(SOURCES)
    pid = bool(PID_SOURCES & set(sources))
    if pid and "-dlto" in mode:
        mode = ["-dc"]
    options = [o for o in OPTIONS if not (pid and LINE_INFO & set(o))]
    args = [*mode, *sources, "-Iinclude", *rng.choice(TARGETS)]
    for option in rng.sample(options, rng.randint(0, 4)):
        args += option
    if mode in (["-c"], ["-dc"], ["-rdc=true", "-c"]):
        # Several sources under -t N write one -MF file in the order their threads end.
        args += rng.choice([d for d in DEPENDENCIES if len(sources) == 1 or "-MF" not in d])
    if rng.random() < 0.4 and (len(sources) == 1 or mode in ([], ["-lib"])):
        suffix = {"-ptx": ".ptx", "-cubin": ".cubin", "-fatbin": ".fatbin", "-lib": ".a", "-E": ".ii"}
        args += ["-o", "out" + (suffix.get(mode[-1], ".o") if mode else "")]
    if not mode and "-o" not in args:
        args += ["-o", "app"]
    appended = [a for a in APPENDED if not (pid and LINE_INFO & set(a.split()))]
    env = {"NVCC_APPEND_FLAGS": rng.choice(appended)} if rng.random() < 0.1 else {}
    options_file = None
    if rng.random() < 0.1:
        options_file = " ".join(rng.choice(options)) + "\n"
        args += ["-optf", "opts.txt"]
    if pid:
        args.append("-compress-mode=none")  # last, so that it wins
    return Line(args, env, options_file)
