"""Direct mode: a compile the cache has seen before is served without running nvcc, its
dryrun, or any step, as ccache's direct mode does.

A compile is looked up under a *manifest key* that covers what decides it before any file is
read by a preprocessor:

* nvcc (the path given, and the real binary's path, size and mtime) and the arguments as
  given, with the contents of ``--options-file``s spliced in;
* the main source's absolute path (cudafe++ and cicc hash it into the module_id) and content;
* the variables nvcc and gcc read (``ENVIRONMENT``, and every name nvcc.profile mentions);
* the working directory, only where it can reach the outputs: debug info (``-g``, ``-G``,
  ``-lineinfo``) or a host option of ``cache.NAME_REACHES``.  Otherwise two build directories
  of one project share their entries (relative names in the outputs, such as CMake's
  ``-o CMakeFiles/...``, are in the arguments; relative include paths resolve in the manifest).

The manifest lists, per variant seen, every file the preprocessors read (from the line markers
of every preprocessed file, the ones nvcc's dependency filter reads) with its size, mtime,
ctime, inode and BLAKE2 hash, and the identity of every tool of the plan.  A variant whose
files all match (same stat, or else the same content) and whose tools are unchanged names a
*result*: the user-visible outputs (object, dependency file) and the compile's stdout and
stderr, which are written and replayed without running anything.  Any difference is a miss,
and the compile runs with the per-step cache.

Races: a file changed while the compile ran must not be recorded with a hash of content the
preprocessor never read.  So, as ccache does, a compile whose files' mtime or ctime is not
older than its start (less a margin for coarse file-system clocks) records no variant, and the
hashes are taken after the compile from files whose stat did not change while they were
hashed.  Sources that use ``__DATE__``, ``__TIME__`` or ``__TIMESTAMP__`` record none either.
docs/cache.md says what is and is not guaranteed.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from . import nvcc_args
from .files import read_bytes, write_atomically

FORMAT = "fast_nvcc direct 1"
TOOL = "direct"  # its row in the cache's hit/miss counts
VARIANTS = 8  # per manifest, newest first
# The caller's variables that nvcc, its profile, or gcc read.  TMPDIR is among them: the
# objects name their temporary input (with -g its whole path).
ENVIRONMENT = (
    "PATH", "CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH", "OBJC_INCLUDE_PATH", "NVCC_PREPEND_FLAGS",
    "NVCC_APPEND_FLAGS", "NVCC_CCBIN", "LANG", "LC_ALL", "LC_CTYPE", "LC_MESSAGES", "LANGUAGE", "GCC_EXEC_PREFIX",
    "COMPILER_PATH", "LIBRARY_PATH", "SOURCE_DATE_EPOCH", "TMPDIR", "LD_LIBRARY_PATH", "LD_PRELOAD",
    "GCC_COMPARE_DEBUG", "CUDA_CACHE_DISABLE",
)  # fmt: skip
# With these set, gcc -E writes a dependency file of its own as a side effect.
SIDE_OUTPUTS = ("DEPENDENCIES_OUTPUT", "SUNPRO_DEPENDENCIES")
TIME_MACROS = (b"__DATE__", b"__TIME__", b"__TIMESTAMP__")
# File-system clocks are coarse (a jiffy on Linux; whole seconds on some file systems): a file
# changed just after the compile started may carry a time a little before the start.
MARGIN_NS = 50_000_000
COARSE_MARGIN_NS = 2_000_000_000
_COMPILE_FLAGS = {"-c", "--compile", "-dc", "--device-c"}
_DEBUG_PREFIXES = ("-g", "-G", "--device-debug", "-lineinfo", "--generate-line-info", "--debug")
_PROFILE_NAME = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)|^\s*([A-Za-z_][A-Za-z0-9_]*)\s*[+=]", re.M)
_TAG = re.compile(rb"tmpxft_[0-9a-f]{8}_[0-9a-f]{8}")
_TAG_PLACEHOLDER = b"tmpxft_@@@@@@@@_@@@@@@@@"


@dataclass(frozen=True, slots=True)
class Options:
    """What of fast_nvcc's own options direct mode needs."""

    cache: bool
    summary: bool = False
    verbose: int = 0
    log: str | None = None
    steps_wanted: bool = False  # a report or mode that needs the steps to run (graph, trace, ...)


@dataclass(slots=True)
class Lookup:
    """One compile's direct-mode key, and what its lookup found."""

    key: str
    nvcc: str
    args: tuple[str, ...]
    cwd: str
    sources: tuple[str, ...]
    started_ns: int
    options: Options
    outcome: str = "miss"  # "hit", "miss", or "miss (why)"
    notes: list[str] = field(default_factory=list)


def attempt(explicit_nvcc: str | None, args: Sequence[str], options: Options, *, env: Mapping[str, str] = os.environ) -> int | Lookup | None:
    """Serve the compile from the cache if it can be: its exit code.  Otherwise the Lookup to
    record the compile under (None when direct mode does not apply)."""
    started_ns = time.time_ns()
    started = time.monotonic()
    # As cache.cache_enabled, without importing the cache when it is off.
    if not (options.cache or env.get("FAST_NVCC_CACHE", "") not in ("", "0")) or env.get("FAST_NVCC_DIRECT", "1") == "0":
        return None
    if env.get("FAST_NVCC_DISABLE", "") not in ("", "0") or any(env.get(n) for n in SIDE_OUTPUTS):
        return None
    from .toolchain import find_nvcc

    nvcc = find_nvcc(explicit_nvcc, env=env)
    cwd = os.getcwd()
    try:
        effective = nvcc_args.effective_args(args, env, cwd=cwd)
    except (OSError, ValueError):
        return None
    if nvcc_args.passthrough_reason(effective):
        return None
    sources = [o.name for o in nvcc_args.iter_options(effective) if o.value is None and not o.name.startswith("-")]
    names = {o.name for o in nvcc_args.iter_options(effective)}
    if len(sources) != 1 or not sources[0].endswith(".cu") or not names & _COMPILE_FLAGS:
        return None
    if "--fdevice-time-trace" in names:  # a trace of this run is an output no cache can hold
        return None
    key = manifest_key(nvcc, effective, sources[0], cwd=cwd, env=env)
    if key is None:
        return None
    lookup = Lookup(key, nvcc, tuple(args), cwd, tuple(sources), started_ns, options)
    if options.steps_wanted:
        lookup.outcome = "miss (the reports asked for need the steps to run)"
        return lookup
    from .cache import open_cache

    cache = open_cache(env)
    try:
        served = _serve(lookup, cache, combined=same_output())
        cache.count(TOOL, hit=served is not None)
    finally:
        cache.close()
    if served is None:
        _say(options, f"direct mode: {lookup.outcome}")
        return lookup
    _say(options, "direct mode: hit, no step ran")
    wall = time.monotonic() - started
    if options.summary:
        what = " ".join(os.path.basename(s) for s in sources) + " -> " + " ".join(served)
        sys.stderr.write(f"fast_nvcc: {what} (exit 0)\n  wall {wall:.2f} s | cache: direct hit, no step ran\n")
        sys.stderr.flush()
    if options.log:
        _log_hit(lookup, served, wall)
    return 0


# -- the key ------------------------------------------------------------------------------


def manifest_key(nvcc: str, effective: Sequence[str], source: str, *, cwd: str, env: Mapping[str, str]) -> str | None:
    try:
        real = os.path.realpath(nvcc)
        source_digest = _digest(read_bytes(os.path.join(cwd, source)))
    except OSError:
        return None
    variables = {name: env[name] for name in (*ENVIRONMENT, *_profile_names(real)) if name in env}
    material = {
        "format": FORMAT,
        "nvcc": [nvcc, _identity(nvcc), real, _identity(real)],
        "args": list(effective),
        "source": [os.path.normpath(os.path.join(cwd, source)), source_digest],
        "env": sorted(variables.items()),
        "cwd": cwd if cwd_matters(effective) else None,
    }
    return hashlib.blake2b(json.dumps(material).encode("utf-8", "surrogateescape"), digest_size=20).hexdigest()


def cwd_matters(effective: Sequence[str]) -> bool:
    """May the working directory reach the outputs?  Through debug info (host or device),
    or a host option that makes gcc's object depend on where it is written."""
    from .cache import name_reaches_object

    host: list[str] = []
    for option in nvcc_args.iter_options(effective):
        if option.value is None and option.name.startswith(_DEBUG_PREFIXES):
            return True
        if option.name == "--compiler-options" and option.value:
            host.extend(option.value.split(","))
    return name_reaches_object(["gcc", *host])


def _profile_names(real_nvcc: str) -> list[str]:
    """The variables nvcc.profile reads or sets: the caller's values of those reach the plan."""
    try:
        with open(os.path.join(os.path.dirname(real_nvcc), "nvcc.profile"), encoding="utf-8", errors="replace") as handle:
            text = handle.read()
    except OSError:
        return []
    return sorted({a or b for a, b in _PROFILE_NAME.findall(text)})


def _identity(path: str) -> list:
    try:
        info = os.stat(path)
    except OSError:
        return [path]
    return [info.st_size, info.st_mtime_ns, info.st_ino]


def _digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=20).hexdigest()


# -- serving a hit --------------------------------------------------------------------------


def _serve(lookup: Lookup, cache, *, combined: bool) -> list[str] | None:
    """Write the outputs of a matching variant and replay its output; the outputs written."""
    manifest = _read_manifest(cache, lookup.key)
    if manifest is None:
        lookup.outcome = "miss (never seen)"
        return None
    why = "miss"
    for position, variant in enumerate(manifest["variants"]):
        refreshed, why = _matches(variant, cwd=lookup.cwd, started_ns=lookup.started_ns)
        if refreshed is None:
            continue
        result = cache.read_blob(variant["result"])
        if result is None:
            why = "miss (its result was evicted)"
            continue
        header, files, captures = result
        if bool(header.get("combined")) != combined and (header.get("ambiguous") if combined else captures):
            # Output kept apart joins onto one file unless one step wrote to both streams;
            # output kept as one file cannot be split.
            why = "miss (its output was captured another way)"
            continue
        outputs = header["outputs"]
        tag = f"tmpxft_{os.getpid():08x}_00000000".encode()
        try:
            for name, data in zip(outputs, files):
                write_atomically(os.path.join(lookup.cwd, name), data.replace(_TAG_PLACEHOLDER, tag))
        except OSError as exc:
            lookup.outcome = f"miss (cannot write an output: {exc.strerror})"
            return None
        _replay([(fd, data.replace(_TAG_PLACEHOLDER, tag)) for fd, data in captures])
        if refreshed or position:
            manifest["variants"].insert(0, {**manifest["variants"].pop(position), "files": variant["files"]})
            _write_manifest(cache, lookup.key, manifest)
        lookup.outcome = "hit"
        return outputs
    lookup.outcome = why
    return None


def _matches(variant: Mapping, *, cwd: str, started_ns: int) -> tuple[bool | None, str]:
    """(None, why) unless every file and tool of ``variant`` is as recorded; else (whether
    some file's stat was refreshed in ``variant`` after its content matched, "")."""
    for path, size, mtime in variant["tools"]:
        try:
            info = os.stat(path)
        except OSError:
            return None, f"miss ({path} is gone)"
        if (info.st_size, info.st_mtime_ns) != (size, mtime):
            return None, f"miss ({os.path.basename(path)} changed)"
    refreshed = False
    for entry in variant["files"]:
        name, stat, digest = entry
        path = os.path.join(cwd, name)
        try:
            info = os.stat(path)
            if _stat_of(info) == stat:
                continue
            if info.st_size != stat[0] or _digest(read_bytes(path)) != digest:
                return None, f"miss ({name} changed)"
        except OSError:
            return None, f"miss ({name} is gone)"
        if not _too_new(info, started_ns):
            entry[1] = _stat_of(info)  # content unchanged (touched, copied): check its stat next time
            refreshed = True
    return refreshed, ""


def _replay(captures: Sequence[tuple[int, bytes]]) -> None:
    for fd, data in captures:
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(fd, view) :]
        except BrokenPipeError:
            return


# -- recording a compile --------------------------------------------------------------------


def record(lookup: Lookup, *, plan, dag, records, combined: bool) -> None:
    """After a compile that succeeded: store its outputs and the manifest variant that leads
    to them, unless a file it read changed while it ran."""
    from .cache import open_cache

    cache = open_cache(os.environ)
    try:
        why = _record(lookup, plan, dag, records, combined, cache)
    finally:
        cache.close()
    if why:
        lookup.notes.append(f"not recorded for direct mode: {why}")
        _say(lookup.options, f"direct mode: not recorded: {why}")


def _record(lookup: Lookup, plan, dag, records, combined: bool, cache) -> str:
    from .depfile import iter_included
    from .plan import Kind

    allowed = {Kind.PREPROCESS, Kind.CUDAFE, Kind.CICC, Kind.PTXAS, Kind.FATBINARY, Kind.HOST_COMPILE,
               Kind.DEPFILE, Kind.REMOVE}  # fmt: skip
    if any(step.kind not in allowed or step.needs_shell for step in plan.steps):
        return "the plan has steps other than a compile's"
    preprocessed = [_output_of(step) for step in plan.steps if step.kind is Kind.PREPROCESS]
    if not preprocessed or None in preprocessed:
        return "a preprocessing step writes no temporary file"
    try:
        names: dict[str, None] = {}
        for path in preprocessed:
            for name, _ in iter_included(read_bytes(os.path.join(lookup.cwd, path))):
                if not (name.startswith("<") and name.endswith(">")):
                    names.setdefault(name)
        files = []
        for name in names:
            entry, why = _file_entry(os.path.join(lookup.cwd, name), lookup.started_ns)
            if entry is None:
                return f"{name} {why}"
            files.append([name, *entry])
        tools = _tool_identities(plan)
        outputs = list(dict.fromkeys(o for step in plan.steps for o in step.outputs))
        tag = plan.temp_tag.encode()
        contents = [read_bytes(os.path.join(lookup.cwd, o)) for o in outputs]
    except OSError as exc:
        return f"cannot read {exc.filename}"
    if not outputs or any(o == "-" for o in outputs):
        return "no output file"
    transcript, ambiguous = _transcript(plan, dag, records)
    if tag:
        contents = [_TAG.sub(_TAG_PLACEHOLDER, c) if tag in c else c for c in contents]
        transcript = [(fd, data.replace(tag, _TAG_PLACEHOLDER)) for fd, data in transcript]
    result_key = _digest(json.dumps([lookup.key, files and [[f[0], f[2]] for f in files], tools]).encode("utf-8", "surrogateescape"))
    if not cache.write_blob(result_key, "direct result", contents, transcript,
                            {"outputs": outputs, "combined": combined, "ambiguous": ambiguous}):  # fmt: skip
        return "cannot write the cache entry"
    manifest = _read_manifest(cache, lookup.key) or {"variants": []}
    variants = [v for v in manifest["variants"] if v.get("result") != result_key]
    manifest["variants"] = [{"files": files, "tools": tools, "result": result_key}, *variants][:VARIANTS]
    _write_manifest(cache, lookup.key, manifest)
    return ""


def _file_entry(path: str, started_ns: int) -> tuple[list | None, str]:
    """[stat, digest] of a file the preprocessors read, hashed after the compile; None when it
    may have changed since the compile started, or uses a time macro."""
    before = os.stat(path)
    if _too_new(before, started_ns):
        return None, "changed while the compile ran (or just before)"
    data = read_bytes(path)
    if _stat_of(os.stat(path)) != _stat_of(before):
        return None, "changed while it was hashed"
    if any(macro in data for macro in TIME_MACROS):
        return None, "uses __DATE__, __TIME__ or __TIMESTAMP__"
    return [_stat_of(before), _digest(data)], ""


def _stat_of(info: os.stat_result) -> list[int]:
    return [info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino]


def _too_new(info: os.stat_result, started_ns: int) -> bool:
    newest = max(info.st_mtime_ns, info.st_ctime_ns)
    coarse = info.st_mtime_ns % 1_000_000_000 == 0 and info.st_ctime_ns % 1_000_000_000 == 0
    return newest >= started_ns - (COARSE_MARGIN_NS if coarse else MARGIN_NS)


def _output_of(step) -> str | None:
    argv = list(step.argv)
    if "-o" in argv[:-1]:
        return argv[argv.index("-o") + 1]
    return None


def _tool_identities(plan) -> list[list]:
    """Every program of the plan, and nvcc and its profile in the toolkit the plan names."""
    path = plan.env.get("PATH")
    programs = {shutil.which(step.argv[0], path=path) or step.argv[0] for step in plan.steps if step.argv}
    here = dict(plan.assignments).get("_HERE_")
    if here:
        programs |= {os.path.join(here, "nvcc"), os.path.join(here, "nvcc.profile")}
    found = []
    for program in sorted(programs):
        info = os.stat(program)
        found.append([program, info.st_size, info.st_mtime_ns])
    return found


def _transcript(plan, dag, records) -> tuple[list[tuple[int, bytes]], bool]:
    """What the compile printed, in the order fast_nvcc forwarded it (nvcc's order, nvcc's own
    messages between the steps), and whether one step wrote to both stdout and stderr."""
    order = sorted(dag.tasks, key=lambda t: t.order)
    messages = sorted(plan.messages, key=lambda m: m[0])
    chunks: list[tuple[int, bytes]] = []
    ambiguous = False
    at = 0
    for task in order:
        while at < len(messages) and messages[at][0] <= task.step.index:
            chunks.append((2, messages[at][1].encode("utf-8", "surrogateescape")))
            at += 1
        check = task.speculative_of
        if check is not None and records[check].reran:
            continue
        written = set()
        for fd, path in records[task.id].captures:
            try:
                data = read_bytes(path)
            except FileNotFoundError:
                continue
            if data:
                chunks.append((fd, data))
                written.add(fd)
        ambiguous |= len(written) > 1
    chunks += [(2, text.encode("utf-8", "surrogateescape")) for _, text in messages[at:]]
    return chunks, ambiguous


# -- manifests ------------------------------------------------------------------------------


def _read_manifest(cache, key: str) -> dict | None:
    blob = cache.read_blob(key)
    if blob is None:
        return None
    header, files, _ = blob
    try:
        manifest = json.loads(files[0])
        if header.get("format") != FORMAT or not isinstance(manifest.get("variants"), list):
            return None
        return manifest
    except (ValueError, IndexError, AttributeError):
        return None


def _write_manifest(cache, key: str, manifest: Mapping) -> None:
    cache.write_blob(key, "direct manifest", [json.dumps(manifest).encode("utf-8", "surrogateescape")], [],
                     {"format": FORMAT})  # fmt: skip


# -- reporting ------------------------------------------------------------------------------


def same_output() -> bool:
    """stdout and stderr are one file (a terminal, 2>&1)."""
    try:
        out, err = os.fstat(1), os.fstat(2)
    except OSError:
        return False
    return (out.st_dev, out.st_ino) == (err.st_dev, err.st_ino)


def _log_hit(lookup: Lookup, outputs: Sequence[str], wall: float) -> None:
    from . import reports

    record = reports.log_record(
        nvcc=lookup.nvcc, args=lookup.args, cwd=lookup.cwd, sources=lookup.sources,
        outputs=[os.path.normpath(os.path.join(lookup.cwd, o)) for o in outputs],
        exit_code=0, wall_seconds=wall, started=lookup.started_ns / 1e9, mode="direct",
    )  # fmt: skip
    record["cache"] = {"direct": "hit", "hits": 0, "misses": 0, "tools": {}}
    try:
        reports.append_log(lookup.options.log, record)
    except OSError as exc:
        print(f"fast_nvcc: warning: FAST_NVCC_LOG: {exc}", file=sys.stderr, flush=True)


def _say(options: Options, message: str) -> None:
    if options.verbose:
        print(f"fast_nvcc: {message}", file=sys.stderr, flush=True)
