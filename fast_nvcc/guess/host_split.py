"""The host compile without waiting for fatbinary.

nvcc's last step, ``gcc -c x.cudafe1.cpp``, is seconds of host code, yet it waits for every
ptxas and for fatbinary, because the stub it includes ``#include``s the ``.fatbin.c``.  That
file is one ``asm()`` block of ``.quad`` lines (the fatbinary's bytes) and a declaration of
``fatbinData[N]``; gcc copies the block verbatim into its assembly and, without debug info,
nothing else in the assembly depends on the data or on N.  So the compile is split the way the
gcc driver itself splits it (``gcc -###``: cc1plus, then as):

1. *front*: a placeholder ``.fatbin.c`` (the real file's text with the data replaced by one
   marker line) stands where the stub looks for it, and cc1plus runs at once, as the driver
   would run it, writing its assembly to a file of ours; fatbinary writes to a private path.
2. *back*, after fatbinary: the real file must equal the placeholder except for the data lines
   and N; then the marker line in the assembly becomes the data lines and ``as`` runs exactly as
   the driver would have run it.

With more than one architecture the front also starts before the last cicc
(:func:`fast_nvcc.graph.host_compile.early_stubs`): it compiles the stub of whichever cicc ended first,
named as the last one's, and the back puts the last cicc's real stub in place and compares
(:mod:`fast_nvcc.guess.stubs`).

Anything unexpected (no template yet, a template that does not match, a driver whose ``-###``
is not cc1plus then as, a marker not found once, cc1plus or as failing) makes the back step
run the host compile exactly as nvcc printed it, with the real ``.fatbin.c`` in place.  The
placeholder's text is learned from the first real ``.fatbin.c`` of each fatbinary (its format
changes between CUDA versions) and kept in the cache directory.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import signal
import subprocess
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from ..files import read_bytes, write_atomically
from ..graph.tasks import Action
from ..plan.shellwords import split_words
from ..run.handlers import Handler, TaskRun
from . import learned_stub, stubs

STUB_DIFFERS = "its stub differs from the one it started from"
_CC1PLUS_FAILED = "cc1plus failed"
_NOT_CC1PLUS_AS = "its -### is not cc1plus then as"
MARKER = '".quad FAST_NVCC_FATBIN_DATA\\n"'
_MARKER_ASM = ".quad FAST_NVCC_FATBIN_DATA"
# The data lines: four values a line, joined by ","; a last, shorter line joins them by ", ".
_DATA_BLOCK = re.compile(r'^(?:"\.quad (?:0x[0-9a-f]{16}, ?)*0x[0-9a-f]{16}\\n"\n)+', re.M)
_SIZE = re.compile(r"fatbinData\[\d+\]")
_ASSIGNMENT = re.compile(r"([A-Z_][A-Z0-9_]*)=(.*)")

def template_path(directory: str, fatbinary_argv: Sequence[str], *, path: str | None) -> str | None:
    """Where the placeholder learned for this fatbinary (binary and option names) lives;
    ``path`` is the plan's PATH, which finds the tool."""
    try:
        tool = fatbinary_argv[0]
        resolved = tool if os.sep in tool else shutil.which(tool, path=path)
        if resolved is None:
            return None
        stat = os.stat(resolved)
    except (OSError, IndexError):
        return None
    names = sorted({word.split("=", 1)[0] for word in fatbinary_argv[1:] if word.startswith("-")})
    identity = "\0".join([os.path.realpath(resolved), str(stat.st_size), str(stat.st_mtime_ns), *names])
    digest = hashlib.sha256(identity.encode("utf-8", "surrogateescape")).hexdigest()[:24]
    return os.path.join(directory, "fatbin-templates", f"{digest}.c")


class FatbinC(NamedTuple):
    """A real ``.fatbin.c``, read once: the text around its data lines, and the data."""

    placeholder: str  # the text with the data lines replaced by the marker
    data: str  # the data lines as gcc writes them into its assembly (``.quad ...`` lines)


def parse(real: str) -> FatbinC | None:
    """None when the data lines are not one block of ``.quad`` lines, or the text already has
    the marker."""
    block = _DATA_BLOCK.search(real)
    if block is None:
        return None
    before, after = real[: block.start()], real[block.end() :]
    if '".quad ' in before or '".quad ' in after or _MARKER_ASM in real:
        return None
    # '".quad A\\n"\n".quad B\\n"\n' -> '.quad A\n.quad B'
    data = block.group(0)[1:-4].replace('\\n"\n"', "\n")
    return FatbinC(before + MARKER + "\n" + after, data)


def learn(template: str, fatbin: FatbinC) -> bool:
    """Keep the placeholder for later compiles; True when it was new or changed."""
    known = read_template(template)
    if known is not None and _same_but_size(known, fatbin.placeholder):
        return False
    try:
        os.makedirs(os.path.dirname(template), exist_ok=True)
        write_atomically(template, fatbin.placeholder.encode("utf-8", "surrogateescape"))
    except OSError:
        return False
    return True


def read_template(template: str) -> str | None:
    try:
        with open(template, encoding="utf-8", errors="surrogateescape") as handle:
            text = handle.read()
    except OSError:
        return None
    return text if text.count(MARKER) == 1 else None


class DriverPlan(NamedTuple):
    """What ``gcc -###`` says the driver would run: cc1plus, then as, with their environment."""

    cc1: tuple[str, ...]
    assembler: tuple[str, ...]
    env: dict[str, str]


def driver_plan(argv: Sequence[str], *, env: Mapping[str, str], cwd: str, assembly: str) -> DriverPlan | None:
    """cc1plus writing ``assembly`` and as reading it, as the driver of ``argv`` runs them."""
    try:
        probe = subprocess.run(
            [*argv, "-###"], env=dict(env), cwd=cwd, stdin=subprocess.DEVNULL,
            capture_output=True, timeout=60, check=False,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    if probe.returncode != 0:
        return None
    text = probe.stderr.decode("utf-8", "surrogateescape")
    commands: list[tuple[tuple[str, ...], dict[str, str]]] = []
    settings: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith(" "):
            words = split_words(line.strip(), {})
            if words.needs_shell or words.redirects:
                return None
            commands.append((words.words, dict(settings)))
            continue
        match = _ASSIGNMENT.fullmatch(line)
        if match:
            settings[match.group(1)] = match.group(2)
    if len(commands) != 2:
        return None
    (cc1, cc1_env), (assembler, _) = commands
    if os.path.basename(cc1[0]) != "cc1plus" or os.path.basename(assembler[0]) != "as":
        return None
    try:
        out = cc1.index("-o")
    except ValueError:
        return None
    temp = cc1[out + 1] if out + 1 < len(cc1) else ""
    if not temp.endswith(".s") or assembler[-1] != temp or cc1.count(temp) != 1:
        return None
    if assembler.count(temp) != 1:
        return None
    cc1 = cc1[: out + 1] + (assembly,) + cc1[out + 2 :]
    assembler = assembler[:-1] + (assembly,)
    return DriverPlan(cc1, assembler, {**env, **cc1_env})


def patch(assembly: str, placeholder: str, fatbin: FatbinC) -> str | None:
    """The assembly cc1plus would have written for the real file, from the one it wrote for
    ``placeholder``; None unless the two files differ only in their data lines and N."""
    if not _same_but_size(fatbin.placeholder, placeholder) or assembly.count(_MARKER_ASM) != 1:
        return None
    at = assembly.index(_MARKER_ASM)
    end = at + len(_MARKER_ASM)
    if (at and assembly[at - 1] != "\n") or assembly[end : end + 1] not in ("", "\n"):
        return None  # the marker must be a line of its own
    return assembly[:at] + fatbin.data + assembly[end:]


def _same_but_size(a: str, b: str) -> bool:
    return _SIZE.sub("fatbinData[]", a) == _SIZE.sub("fatbinData[]", b)


# -- the two tasks, as the scheduler runs them ------------------------------------------------


class _Front(NamedTuple):
    """What a front task leaves its back task."""

    placeholder: str
    assembly: str
    driver: DriverPlan
    captures: list[tuple[int, str]]
    stub: bytes | None  # the early stub it compiled, if it started from one


def run_front(run: TaskRun, cache=None) -> None:
    """cc1plus on a placeholder .fatbin.c; its output is kept for the back task, which alone
    knows whether the split holds.  With ``cache`` (cache.HostCache) the assembly may come from
    an earlier compile of the same .cudafe1.cpp, stub and placeholder."""
    task = run.task
    assert task.fatbin is not None
    run.shared[task.id] = "nothing learned yet for this fatbinary"
    template = _template(run)
    placeholder = read_template(template) if template else None
    if placeholder is None and template:
        placeholder = _probe_template(run, template)
    if placeholder is None:
        run.finish(0)
        return
    stub = None
    if task.stub is not None:
        stub = stubs.early_stub(run)
        if stub is None:
            run.shared[task.id] = "no stub to start from"
            run.finish(0)
            return
    write_atomically(task.fatbin[0], placeholder.encode("utf-8", "surrogateescape"))
    assembly = os.path.join(run.workdir, f"host.{task.step.index}.s")
    driver = driver_plan(task.argv, env=run.env, cwd=run.cwd, assembly=assembly)
    if driver is None:
        run.shared[task.id] = _NOT_CC1PLUS_AS
        run.finish(0)
        return
    replayed = cache.fetch_assembly(run, assembly) if cache is not None else None
    if replayed is not None:
        run.shared[task.id] = _Front(placeholder, assembly, driver, replayed, stub)
        run.finish(0)
        return
    spawned = run.spawn(driver.cc1, tag="cc1", env=driver.env)
    if spawned is None:
        run.finish(-signal.SIGTERM)
        return
    run.account(spawned)
    if spawned.returncode == 0:
        run.shared[task.id] = _Front(placeholder, assembly, driver, spawned.captures, stub)
        if cache is not None:
            cache.store_assembly(run, spawned.captures)
    else:
        run.shared[task.id] = f"{_CC1PLUS_FAILED} (exit {spawned.returncode})"
    run.finish(0)


def run_back(run: TaskRun, cache=None) -> None:
    """as on the assembly with the real data, or the host compile as nvcc printed it.  With
    ``cache`` the object may come from the step cache once the real .fatbin.c is known (the
    same entry as an unsplit host compile's), and what is made here is stored there."""
    task, record = run.task, run.record
    assert task.fatbin is not None and task.front is not None
    real_path, private = task.fatbin
    front = run.shared.get(task.front)
    if task.stub is not None:
        stub = stubs.real_stub(run)
        _keep_learned(run, stub)
        if isinstance(front, _Front) and not stubs.stub_holds(front, stub):
            front = _failed(run, STUB_DIFFERS)
    try:
        real = read_bytes(private).decode("utf-8", "surrogateescape")
    except FileNotFoundError:  # fatbinary made none: nor may the placeholder stay
        with contextlib.suppress(FileNotFoundError):
            os.remove(real_path)
        record.split_note = "fatbinary wrote no .fatbin.c"
        if isinstance(front, _Front):
            _failed(run, record.split_note)
        run.exec(task.argv)
        return
    os.replace(private, real_path)  # the real file where nvcc has it, for the fallback too
    fatbin = parse(real)
    template = _template(run)
    if template and fatbin is not None:
        learn(template, fatbin)
    if cache is not None and cache.fetch_object(run):
        return
    if isinstance(front, _Front):
        assembly = None
        if fatbin is not None:
            text = read_bytes(front.assembly).decode("utf-8", "surrogateescape")
            assembly = patch(text, front.placeholder, fatbin)
        if assembly is None:
            front = _failed(run, "its .fatbin.c does not match the learned placeholder (learned anew)")
        else:
            write_atomically(front.assembly, assembly.encode("utf-8", "surrogateescape"))
            spawned = run.spawn(front.driver.assembler, tag="as", env=front.driver.env)
            if spawned is None:
                run.finish(-signal.SIGTERM)
                return
            if spawned.returncode == 0:
                run.account(spawned)
                record.split = True
                record.captures.extend(front.captures + spawned.captures)
                run.finish(0)
                if cache is not None:
                    cache.store_object(run)
                return
            front = _failed(run, f"as failed (exit {spawned.returncode})")
    record.split_note = front or "its front did not run"
    if not record.guess_failed and record.split_note.startswith(_NOT_CC1PLUS_AS):
        record.guess_failed = record.split_note  # a split that will never hold for this compile
    elif not record.guess_failed and record.split_note.startswith(_CC1PLUS_FAILED):
        _failed(run, record.split_note)
    run.exec(task.argv)
    if cache is not None:
        cache.store_object(run)


def _keep_learned(run: TaskRun, stub: bytes | None) -> None:
    """The stub cicc wrote, kept for the next compile of the same inputs (a learned stub task
    of this compile left where: :mod:`fast_nvcc.guess.learned_stub`)."""
    for done, _ in run.task.stub[2]:
        found = run.shared.get(done)
        if stub is not None and isinstance(found, learned_stub.Learned):
            learned_stub.keep(found, stub)


def _failed(run: TaskRun, why: str) -> str:
    """The split did not hold after its front compiled: what was thrown away, and why."""
    run.record.guess_failed = why
    run.record.guess_lost = run.record_of(run.task.front).seconds
    return why


def probe_argv(fatbinary: Sequence[str], *, image: str, output: str) -> tuple[list[str], str] | None:
    """The plan's fatbinary command, its images replaced by one ``image`` (a PTX file) and its
    outputs by ``output`` (and ``output`` minus ``.c``): what it writes is a ``.fatbin.c`` of
    the same text around other data, since the text depends on the tool and its options, not
    on the images (nvcc 13.0: three images of two kinds and one small PTX gave the same
    placeholder).  Returns the command and the architecture the PTX must name; None for a
    command shape not seen, whose outputs cannot all be redirected."""
    argv, sm = [fatbinary[0]], None
    for word in fatbinary[1:]:
        name, _, value = word.partition("=")
        if name in ("--image3", "--image"):
            sm = sm or next((f[3:] for f in value.split(",") if f.startswith("sm=")), None)
        elif name == "--embedded-fatbin" and value:
            argv.append(f"--embedded-fatbin={output}")
        elif name == "--create" and value:
            argv.append(f"--create={output.removesuffix('.c')}")
        elif name in ("--embedded-fatbin", "--create", "-o", "--output-file"):
            return None  # the output in the next word: not a shape nvcc prints
        else:
            argv.append(word)
    if sm is None or not sm.isalnum() or not any(w.startswith("--embedded-fatbin=") for w in argv):
        return None
    return [*argv, f"--image3=kind=ptx,sm={sm},file={image}"], sm


def _probe_template(run: TaskRun, template: str) -> str | None:
    """Learn the placeholder now, on a first build, rather than from this compile's own
    fatbinary: run the plan's fatbinary on a PTX of three lines (a few milliseconds).  The back
    task still checks the real ``.fatbin.c`` against it, so a wrong guess costs only the split."""
    image = os.path.join(run.workdir, f"probe.{run.task.step.index}.ptx")
    output = os.path.join(run.workdir, f"probe.{run.task.step.index}.fatbin.c")
    probe = probe_argv(run.task.fatbinary, image=image, output=output)
    if probe is None:
        return None
    argv, sm = probe
    write_atomically(image, f".version 8.0\n.target sm_{sm}\n.address_size 64\n".encode())
    spawned = run.spawn(argv, tag="probe")
    try:
        if spawned is None or spawned.returncode != 0:
            return None
        fatbin = parse(read_bytes(output).decode("utf-8", "surrogateescape"))
    except FileNotFoundError:
        return None
    finally:
        for path in (image, output, output.removesuffix(".c")):
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)
    if fatbin is None:
        return None
    learn(template, fatbin)
    return fatbin.placeholder


def _template(run: TaskRun) -> str | None:
    if not run.state_dir:
        return None
    return template_path(run.state_dir, run.task.fatbinary, path=run.env.get("PATH"))


HANDLERS: Mapping[Action, Handler] = {
    Action.HOST_FRONT: Handler(run_front),
    Action.HOST_BACK: Handler(run_back),
    Action.STUB_PROBE: Handler(stubs.run_stub_probe),
}
