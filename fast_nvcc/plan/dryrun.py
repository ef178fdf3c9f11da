"""nvcc's own plan: ``nvcc --dryrun`` parsed into typed steps with the files each reads and writes.

``nvcc --dryrun ARGS`` prints, on stderr, one ``#$ `` line per action: first ``NAME=value``
assignments that nvcc puts in the environment of every command, then the commands, each of which
nvcc runs through ``sh -c``.  Steps talk to each other only through files, most of them temporary
files named ``tmpxft_<pid>_<n>-<seq>_<name>`` in ``$TMPDIR``; this module finds those names in each
command and classifies each mention as a read, a write, or a mere *name* (a file the step does
not touch but whose name it writes into its output, to be ``#include``d later).
"""

from __future__ import annotations

import enum
import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from .shellwords import Redirect, split_words

PLAN_PREFIX = "#$ "
DEPFILE_COMMAND = "-- Filter Dependencies --"

# nvcc's temporary names: tmpxft_<pid, 8 hex>_<counter, 8 hex>-<sequence>_<stem><suffix>.
TEMP_TAG = re.compile(r"tmpxft_([0-9a-f]{8})_([0-9a-f]{8})")
# A temporary path inside one argv word: it starts the word or follows '=', ',' or '"'
# (--image3=kind=elf,sm=80,file=/tmp/..., -DFATBINFILE="/tmp/...") and runs to the next ',' or '"'.
_TEMP_PATH = re.compile(r'(?:^|(?<=[=,"]))([^=,"]*tmpxft_[0-9a-f]{8}_[0-9a-f]{8}[^,"]*)')
_ASSIGNMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(.*)", re.DOTALL)


class Kind(enum.Enum):
    PREPROCESS = "preprocess"  # host compiler -E, for the host or for one device architecture
    CUDAFE = "cudafe++"
    CICC = "cicc"
    PTXAS = "ptxas"
    FATBINARY = "fatbinary"
    NVLINK = "nvlink"
    HOST_COMPILE = "host-compile"
    LINK = "link"
    ARCHIVE = "archive"
    DEPFILE = "depfile"  # nvcc's in-process '-- Filter Dependencies --'
    REMOVE = "rm"  # nvcc's in-process rm of a temporary file
    OTHER = "other"


class Role(enum.Enum):
    READ = "read"
    WRITE = "write"
    NAME = "name"  # named in the step's C output for a later #include; written by someone else
    MODULE_ID = "module-id"  # written with --gen_module_id_file, read otherwise


# What a file-valued option of each tool does with its file.  A temporary file mentioned in any
# other way is read if an earlier step wrote it and written otherwise.
_FILE_OPTIONS: Mapping[Kind, Mapping[str, Role]] = {
    Kind.CUDAFE: {
        "--gen_c_file_name": Role.WRITE,
        "--gen_device_file_name": Role.WRITE,
        # cudafe++ writes '#include "<stub>"' into its .cudafe1.cpp; cicc writes the stub.
        "--stub_file_name": Role.NAME,
        "--module_id_file_name": Role.MODULE_ID,
    },
    Kind.CICC: {
        "--gen_c_file_name": Role.WRITE,
        "--gen_device_file_name": Role.WRITE,
        "--stub_file_name": Role.WRITE,
        # cicc names the .fatbin.c in its stub long before fatbinary writes it: the host compile
        # that includes the stub must wait for fatbinary, though cicc must not.
        "--include_file_name": Role.NAME,
        "--module_id_file_name": Role.MODULE_ID,
        "-o": Role.WRITE,
    },
    Kind.PTXAS: {"-o": Role.WRITE, "--output-file": Role.WRITE},
    Kind.FATBINARY: {
        "--embedded-fatbin": Role.WRITE,
        "--create": Role.WRITE,
        "--image3": Role.READ,
        "--image": Role.READ,
    },
    Kind.NVLINK: {"--register-link-binaries": Role.WRITE, "-o": Role.WRITE},
}
_DEFAULT_FILE_OPTIONS: Mapping[str, Role] = {"-o": Role.WRITE}

# The outputs of each tool that are C source, compiled later: the files that carry its NAMEs.
_SOURCE_OUTPUT_OPTIONS: Mapping[Kind, tuple[str, ...]] = {
    Kind.CUDAFE: ("--gen_c_file_name",),
    Kind.CICC: ("--gen_c_file_name", "--stub_file_name"),
}
# Options whose (non-temporary) value is a file the user asked for.
_USER_OUTPUT_OPTIONS = ("-o", "--create", "--output-file")

_CUDA_TOOLS: Mapping[str, Kind] = {
    "cicc": Kind.CICC,
    "ptxas": Kind.PTXAS,
    "cudafe++": Kind.CUDAFE,
    "fatbinary": Kind.FATBINARY,
    "nvlink": Kind.NVLINK,
    "rm": Kind.REMOVE,
}


class PlanError(Exception):
    """The dryrun output is not a plan fast_nvcc understands."""


class Step(NamedTuple):
    """One command of nvcc's plan, with the files it reads and writes."""

    index: int
    text: str  # the plan line as nvcc printed it, temp names retargeted
    kind: Kind
    tool: str
    argv: tuple[str, ...]
    redirects: tuple[Redirect, ...] = ()
    needs_shell: bool = False
    arch: str | None = None
    reads: frozenset[str] = frozenset()
    writes: frozenset[str] = frozenset()
    names: frozenset[str] = frozenset()
    outputs: tuple[str, ...] = ()  # files the user sees, as spelled in the plan
    # For cicc and cudafe++: the module_id file and whether this step generates it.
    module_id: str | None = None
    generates_module_id: bool = False
    # For the dependency step: the preprocessed files it reads, in the order nvcc reads them.
    sources: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        return " ".join(part for part in (str(self.index), self.tool, self.arch) if part)


class Plan(NamedTuple):
    """nvcc's whole plan for one invocation: its steps in nvcc's order, and what they run in."""

    steps: tuple[Step, ...]
    env: Mapping[str, str]  # the environment of every command: the caller's plus the plan's
    assignments: tuple[tuple[str, str], ...]
    # nvcc's own messages (warnings) printed while planning, with the index of the step they
    # precede (len(steps) for those after the last one).
    messages: tuple[tuple[int, str], ...] = ()
    temp_tag: str = ""  # the tmpxft_<pid>_<n> part of this plan's temporary names
    temp_paths: frozenset[str] = frozenset()  # every temp path mentioned

    def path_of(self, key: str) -> str:
        """The path of a file key (Step.reads/writes): temp keys are basenames, other keys are
        paths already."""
        for path in self.temp_paths:
            if os.path.basename(path) == key:
                return path
        return key

    def paths_by_key(self) -> dict[str, str]:
        """The temp files' paths by key, for callers that look up many."""
        return {os.path.basename(path): path for path in self.temp_paths}


class DryRun(NamedTuple):
    """What ``nvcc --dryrun`` returned; the plan is in its stderr."""

    returncode: int
    stdout: bytes
    stderr: str


def run_dryrun(
    nvcc: str, args: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: str | None = None
) -> DryRun:
    """Ask nvcc for its plan."""
    proc = subprocess.run(
        [nvcc, "--dryrun", *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        env=env,
        cwd=cwd,
        check=False,
    )
    return DryRun(proc.returncode, proc.stdout, proc.stderr.decode("utf-8", "surrogateescape"))


def retarget(text: str, *, pid: int) -> str:
    """Give the plan's temporary names to process ``pid``, keeping their length.

    The dryrun's names carry the dryrun's pid, which is dead by now and may come back in
    another nvcc; the caller's own pid is alive for as long as the names are in use.  The
    length matters: with -g the object embeds the temp path, and tests mask the names
    byte for byte.
    """
    return TEMP_TAG.sub(lambda m: f"tmpxft_{pid:08x}_{m.group(2)}", text)


def parse_plan(stderr: str, *, env: Mapping[str, str], cwd: str) -> Plan:
    """Turn the stderr of ``nvcc --dryrun`` into a Plan."""
    assignments: list[tuple[str, str]] = []
    lines: list[str] = []
    messages: list[tuple[int, str]] = []
    for raw in stderr.splitlines(keepends=True):
        if not raw.startswith(PLAN_PREFIX):
            messages.append((len(lines), raw))
            continue
        body = raw[len(PLAN_PREFIX) :].rstrip("\n")
        match = _ASSIGNMENT.fullmatch(body)
        if match and not lines:
            assignments.append((match.group(1), match.group(2)))
        else:
            lines.append(body)
    if not lines:
        raise PlanError("the plan has no commands")

    step_env = dict(env)
    step_env.update(assignments)
    tag = TEMP_TAG.search(stderr)
    builder = _StepBuilder(step_env, cwd)
    steps = tuple(builder.build(index, line) for index, line in enumerate(lines))
    return Plan(
        steps=steps,
        env=step_env,
        assignments=tuple(assignments),
        messages=tuple(messages),
        temp_tag=tag.group(0) if tag else "",
        temp_paths=frozenset(builder.temp_paths),
    )


def file_key(path: str, *, cwd: str) -> str:
    """One key per file: temp files by their unique basename (cudafe++ names the stub relative
    to $TMPDIR, cicc writes it by absolute path), other files by absolute path."""
    if TEMP_TAG.search(os.path.basename(path)):
        return os.path.basename(path)
    return os.path.normpath(os.path.join(cwd, path))


def is_temp(path: str) -> bool:
    return TEMP_TAG.search(os.path.basename(path)) is not None


class _StepBuilder:
    """Classifies steps in plan order; remembers which temp files have been written so far."""

    def __init__(self, env: Mapping[str, str], cwd: str) -> None:
        self.env = env
        self.cwd = cwd
        self.written: set[str] = set()
        # The .ii files since the last depfile step: (host side?, sequence number, path).
        self.preprocessed: list[tuple[bool, int, str]] = []
        self.temp_paths: set[str] = set()

    def build(self, index: int, line: str) -> Step:
        if line.startswith(DEPFILE_COMMAND):
            return self._depfile_step(index, line)
        words = split_words(line, self.env)
        if not words.words:
            raise PlanError(f"empty command in plan: {line!r}")
        argv = words.words
        kind = _classify(argv)
        tool = _tool_name(argv, kind)
        reads, writes, names, outputs = self._files(kind, argv, words.redirects)
        module_id, generates = _module_id(kind, argv)
        if kind is Kind.PREPROCESS and "-o" in argv[:-1]:
            output = os.path.join(self.cwd, argv[argv.index("-o") + 1])
            if is_temp(output):
                self.preprocessed.append((_arch(kind, argv) is None, _sequence(output), output))
        return Step(
            index=index,
            text=line,
            kind=kind,
            tool=tool,
            argv=argv,
            redirects=words.redirects,
            needs_shell=words.needs_shell,
            arch=_arch(kind, argv),
            reads=frozenset(reads),
            writes=frozenset(writes),
            names=frozenset(names),
            outputs=tuple(outputs),
            module_id=module_id and file_key(module_id, cwd=self.cwd),
            generates_module_id=generates,
        )

    def _depfile_step(self, index: int, line: str) -> Step:
        rest = line[len(DEPFILE_COMMAND) :]
        words = split_words(rest, self.env)
        if words.words or words.needs_shell:
            raise PlanError(f"unexpected dependency step: {line!r}")
        outputs = tuple(r.target for r in words.redirects if r.fd == 1)
        # Under -t nvcc's threads print the steps in any order: two sources' preprocessing may
        # come before the first one's dependency step.  Each takes its own source's files (by
        # the stem in their temp names), and reads every architecture's .ii in the order nvcc
        # numbered them (the -gencode order), then the host's.
        stems = [_stem(path) for *_, path in self.preprocessed]
        if len(set(stems)) > 1:
            named = [os.path.splitext(os.path.basename(o))[0] for o in outputs]
            stem = next((s for s in stems if s in named), stems[0])
            mine = [e for e, s in zip(self.preprocessed, stems) if s == stem]
            self.preprocessed = [e for e, s in zip(self.preprocessed, stems) if s != stem]
        else:
            mine, self.preprocessed = self.preprocessed, []
        sources = tuple(path for *_, path in sorted(mine, key=lambda e: e[:2]))
        return Step(
            index=index,
            text=line,
            kind=Kind.DEPFILE,
            tool="depfile",
            argv=(),
            redirects=words.redirects,
            reads=frozenset(file_key(path, cwd=self.cwd) for path in sources),
            writes=frozenset(file_key(o, cwd=self.cwd) for o in outputs),
            outputs=outputs,
            sources=sources,
        )

    def _files(
        self, kind: Kind, argv: Sequence[str], redirects: Sequence[Redirect]
    ) -> tuple[set[str], set[str], set[str], list[str]]:
        options = _FILE_OPTIONS.get(kind, _DEFAULT_FILE_OPTIONS)
        generates = "--gen_module_id_file" in argv
        reads: set[str] = set()
        writes: set[str] = set()
        names: set[str] = set()
        outputs: list[str] = []
        for position, word in enumerate(argv[1:], start=1):
            previous = argv[position - 1]
            for match in _TEMP_PATH.finditer(word):
                path = match.group(1)
                if os.path.isabs(path):
                    self.temp_paths.add(path)
                option = previous if match.start(1) == 0 else word.split("=", 1)[0]
                role = options.get(option)
                if role is Role.MODULE_ID:
                    role = Role.WRITE if generates else Role.READ
                key = file_key(path, cwd=self.cwd)
                if role is None:
                    role = Role.READ if key in self.written or kind is Kind.REMOVE else Role.WRITE
                {Role.READ: reads, Role.WRITE: writes, Role.NAME: names}[role].add(key)
            if previous in _USER_OUTPUT_OPTIONS and not is_temp(word):
                outputs.append(word)
            elif "=" in word and word.split("=", 1)[0] in _USER_OUTPUT_OPTIONS:
                value = word.split("=", 1)[1]
                if value and not is_temp(value):
                    outputs.append(value)
        if kind is Kind.ARCHIVE:
            # "`gcc -print-prog-name=ar`" cr "libfoo.a" members...
            archive = next((w for w in argv[2:] if not w.startswith("-")), None)
            if archive and not is_temp(archive):
                outputs.append(archive)
        for redirect in redirects:
            if redirect.fd in (1, 2) and not is_temp(redirect.target):
                outputs.append(redirect.target)
        own = {file_key(o, cwd=self.cwd) for o in outputs}
        reads |= self._earlier_outputs(argv) - own
        if kind is Kind.REMOVE:
            writes |= reads  # deleting a file is writing it, for ordering purposes
            reads = set()
        writes |= own
        self.written |= writes
        return reads, writes, names, outputs

    def _earlier_outputs(self, argv: Sequence[str]) -> set[str]:
        """The files the user sees that an earlier step wrote and this one names: nvcc -ptx
        with a real architecture ends in ``ptxas -arch=compute_90 "k.ptx"``, a check of the
        user's own output, which must wait for the cicc that writes it."""
        found = set()
        for word in argv[1:]:
            for path in {word, word.partition("=")[2]}:
                if not path or is_temp(path):
                    continue
                key = file_key(path, cwd=self.cwd)
                if key in self.written:
                    found.add(key)
        return found


def temp_mentions(argv: Sequence[str]) -> list[str]:
    """Every temp path in ``argv``, once each, in order of first mention."""
    found: dict[str, None] = {}
    for word in argv[1:]:
        for match in _TEMP_PATH.finditer(word):
            found.setdefault(match.group(1))
    return list(found)


def output_paths(kind: Kind, argv: Sequence[str]) -> list[str]:
    """The files a command of ``kind`` writes, as spelled in ``argv``."""
    options = _FILE_OPTIONS.get(kind, _DEFAULT_FILE_OPTIONS)
    generates = "--gen_module_id_file" in argv
    found = []
    for previous, word in zip(argv, argv[1:]):
        name, sep, value = word.partition("=")
        option, path = (name, value) if sep and name in options else (previous, word)
        role = options.get(option)
        if role is Role.WRITE or (role is Role.MODULE_ID and generates):
            found.append(path)
    return list(dict.fromkeys(found))


def source_outputs(step: Step) -> frozenset[str]:
    """The temp files among ``step``'s outputs that are C source: they carry its names."""
    options = _SOURCE_OUTPUT_OPTIONS.get(step.kind, ())
    found = set()
    for previous, word in zip(step.argv, step.argv[1:]):
        if previous in options:
            found.add(os.path.basename(word))
    return frozenset(found & step.writes)


def _classify(argv: Sequence[str]) -> Kind:
    first = argv[0]
    kind = _CUDA_TOOLS.get(os.path.basename(first))
    if kind is not None:
        return kind
    if "-print-prog-name=ar" in first or os.path.basename(first) == "ar":
        return Kind.ARCHIVE
    if os.path.basename(first) in ("nvprune", "bin2c"):
        return Kind.OTHER
    if "-E" in argv:
        return Kind.PREPROCESS
    if "-c" in argv:
        return Kind.HOST_COMPILE
    return Kind.LINK


def _tool_name(argv: Sequence[str], kind: Kind) -> str:
    if kind is Kind.ARCHIVE:
        return "ar"
    name = os.path.basename(argv[0])
    if kind is Kind.PREPROCESS:
        return f"{name} -E"
    if kind is Kind.HOST_COMPILE:
        return f"{name} -c"
    return name


_CUDA_ARCH_DEFINE = re.compile(r"-D__CUDA_ARCH__=(\d+)")
_FEATURE_DEFINE = re.compile(r"-D__CUDA_ARCH_(SPECIFIC__|FAMILY_SPECIFIC__)")


def _arch(kind: Kind, argv: Sequence[str]) -> str | None:
    if kind is Kind.CICC:
        for previous, word in zip(argv, argv[1:]):
            if previous == "-arch":
                return word
        return None
    if kind in (Kind.PTXAS, Kind.NVLINK):
        for previous, word in zip(argv, argv[1:]):
            name, sep, value = word.partition("=")
            if sep and name in ("-arch", "--arch", "--gpu-name"):
                return value
            if previous in ("-arch", "--arch", "--gpu-name"):
                return word
        return None
    if kind is Kind.PREPROCESS:
        for word in argv:
            match = _CUDA_ARCH_DEFINE.fullmatch(word)
            if match:
                features = {f.group(1) for f in map(_FEATURE_DEFINE.match, argv) if f}
                # sm_90a defines __CUDA_ARCH_SPECIFIC__, sm_100f only the FAMILY_ one.
                suffix = "a" if "SPECIFIC__" in features else "f" if features else ""
                return f"compute_{int(match.group(1)) // 10}{suffix}"
        return None
    return None


_TEMP_NAME = re.compile(r"tmpxft_[0-9a-f]{8}_[0-9a-f]{8}-(\d+)_(.*)")
_PREPROCESSED = re.compile(r"(.*?)\.(?:compute_[^.]+\.)?cpp[0-9]\.ii")


def temp_name(path: str) -> tuple[int, str] | None:
    """nvcc's number of a temp file and the rest of its name (``tmpxft_..-8_k.compute_80.cpp1.ii``:
    8 and ``k.compute_80.cpp1.ii``); None for a file that is not one of nvcc's temp files."""
    match = _TEMP_NAME.search(os.path.basename(path))
    return (int(match.group(1)), match.group(2)) if match else None


def _stem(path: str) -> str:
    """The source's stem in a preprocessed temp file's name (``..-8_k.compute_80.cpp1.ii``: k)."""
    parts = temp_name(path)
    match = parts and _PREPROCESSED.fullmatch(parts[1])
    return match.group(1) if match else ""


def _sequence(path: str) -> int:
    parts = temp_name(path)
    return parts[0] if parts else 0


def _module_id(kind: Kind, argv: Sequence[str]) -> tuple[str | None, bool]:
    if kind not in (Kind.CICC, Kind.CUDAFE):
        return None, False
    for previous, word in zip(argv, argv[1:]):
        if previous == "--module_id_file_name":
            return word, "--gen_module_id_file" in argv
    return None, False
