"""The per-step cache's keys (fast_nvcc.cache.keys), without nvcc: a captured plan
(tests/data/plans/compile_1arch) whose temp files are made up.  Two runs of one compile get the
same key whatever their temp names; what a step reads, its tools, the plan's and the caller's
variables that change what the compilers do, and where the object name can reach it, are in
its key; this run's names come out of what is stored and another run's go back in."""

from __future__ import annotations

import os

import pytest

from fast_nvcc.cache.keys import KeyMaker, Prepared, hide_names, name_reaches_object, restore_names
from fast_nvcc.graph.build import build_dag
from fast_nvcc.graph.tasks import Action, Task
from fast_nvcc.plan.dryrun import Kind, parse_plan

from plans import load

CAPTURED_PID = "00002209"  # the pid part of compile_1arch's temp names
CACHEABLE = [Kind.CUDAFE, Kind.CICC, Kind.PTXAS, Kind.HOST_COMPILE]


def compile_tasks(tmp_path, *, pid: int, tmpdir: str) -> tuple[dict[Kind, Task], dict[str, str]]:
    """compile_1arch's tasks as a run with process id ``pid`` and TMPDIR ``tmp_path/tmpdir``
    has them, each step's inputs written (their content names this run's temp tag); and the
    paths of the plan's temp files."""
    header, body = load("compile_1arch")
    temp = tmp_path / tmpdir
    temp.mkdir(exist_ok=True)
    body = body.replace("/tmp/", f"{temp}/").replace(f"tmpxft_{CAPTURED_PID}_", f"tmpxft_{pid:08x}_")
    plan = parse_plan(body, env={}, cwd=header["cwd"])
    dag = build_dag(plan, exists=lambda path: True)
    paths = plan.paths_by_key()
    for task in dag.tasks:
        for key in task.reads:
            path = paths.get(key, key)
            if not os.path.exists(path):
                with open(path, "w") as handle:
                    handle.write(f"what {key} holds\n")
    return {task.step.kind: task for task in dag.tasks}, paths


def key_maker(tmp_path, paths: dict[str, str], *, workdir: str = "work", assignments=(("CICC_PATH", "/nvvm/bin"),),
              caller_env=None) -> KeyMaker:  # fmt: skip
    nvcc = tmp_path / "bin" / "nvcc"
    if not nvcc.exists():
        nvcc.parent.mkdir(exist_ok=True)
        nvcc.write_text("#!/bin/sh\n")
    return KeyMaker(nvcc=str(nvcc), plan_env={"PATH": str(tmp_path / "bin")}, assignments=list(assignments),
                    caller_env=caller_env or {}, cwd=str(tmp_path / "src"), workdir=str(tmp_path / workdir),
                    paths_by_key=paths)  # fmt: skip


def key(tmp_path, kind, *, pid=0x1111, tmpdir="tmp", argv=None, **options) -> str:
    """The key of compile_1arch's ``kind`` step in a run with process id ``pid``."""
    tasks, paths = compile_tasks(tmp_path, pid=pid, tmpdir=tmpdir)
    task = tasks[kind]
    if argv is not None:
        task = task._replace(argv=tuple(argv(list(task.argv))))
    prepared = key_maker(tmp_path, paths, **options).prepare(task)
    assert prepared is not None
    return prepared.key


@pytest.mark.parametrize("kind", CACHEABLE, ids=lambda k: k.value)
def test_another_run_of_the_same_compile_gets_the_same_key(tmp_path, kind):
    assert key(tmp_path, kind, pid=0x1111) == key(tmp_path, kind, pid=0x2222, workdir="work-2")


@pytest.mark.parametrize(
    "kind, same",
    [(Kind.CUDAFE, True), (Kind.CICC, True), (Kind.PTXAS, True), (Kind.HOST_COMPILE, False)],
    ids=lambda k: getattr(k, "value", str(k)),
)
def test_only_the_host_compile_keeps_its_temp_directory_in_its_key(tmp_path, kind, same):
    # The host compile embeds its input's name in the object: its temp paths stay in its key.
    assert (key(tmp_path, kind, tmpdir="tmp") == key(tmp_path, kind, tmpdir="elsewhere")) is same


@pytest.mark.parametrize("kind", CACHEABLE, ids=lambda k: k.value)
def test_what_a_step_reads_is_in_its_key(tmp_path, kind):
    before = key(tmp_path, kind)
    task = compile_tasks(tmp_path, pid=0x1111, tmpdir="tmp")[0][kind]
    with open(f"{tmp_path}/tmp/{max(task.reads)}", "a") as handle:
        handle.write("one more line\n")
    assert key(tmp_path, kind) != before


@pytest.mark.parametrize(
    "caller_env, changes",
    [
        ({"LANG": "de_DE.UTF-8"}, True),  # the compilers' messages
        ({"CPATH": "/opt/include"}, True),  # gcc's include path
        ({"SOURCE_DATE_EPOCH": "0"}, True),
        ({"HOME": "/home/other"}, False),
        ({"TMPDIR": "/scratch"}, False),  # the temp paths are keyed (or written back) themselves
    ],
    ids=lambda c: next(iter(c)) if isinstance(c, dict) else str(c),
)
def test_the_callers_variables_that_change_what_the_compilers_do_are_in_the_key(tmp_path, caller_env, changes):
    assert (key(tmp_path, Kind.CICC, caller_env=caller_env) != key(tmp_path, Kind.CICC)) is changes


@pytest.mark.parametrize(
    "assignments, changes",
    [((("CICC_PATH", "/other/nvvm/bin"),), True), ((("CICC_PATH", "/nvvm/bin"), ("PATH", "/other/bin")), False)],
    ids=["variable", "PATH"],
)
def test_the_plans_variables_but_path_are_in_the_key(tmp_path, assignments, changes):
    assert (key(tmp_path, Kind.CICC, assignments=assignments) != key(tmp_path, Kind.CICC)) is changes


@pytest.mark.parametrize("program", ["nvcc", "ptxas"])
def test_another_nvcc_or_tool_binary_is_another_key(tmp_path, program):
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / program).write_text("#!/bin/sh\n")
    (tmp_path / "bin" / program).chmod(0o755)  # ptxas is found on the plan's PATH
    before = key(tmp_path, Kind.PTXAS)
    assert key(tmp_path, Kind.PTXAS) == before
    (tmp_path / "bin" / program).write_text("#!/bin/sh\n# another release\n")
    assert key(tmp_path, Kind.PTXAS) != before


def _object_named(name: str, *flags: str):
    def argv(words: list[str]) -> list[str]:
        return [*words[: words.index("-o")], *flags, "-o", name]

    return argv


@pytest.mark.parametrize(("flags", "same"), [((), True), (("-g",), False), (("-g0",), True)], ids=str)
def test_the_object_name_is_in_the_host_compiles_key_only_where_it_reaches_the_object(tmp_path, flags, same):
    a = key(tmp_path, Kind.HOST_COMPILE, argv=_object_named("a.o", *flags))
    b = key(tmp_path, Kind.HOST_COMPILE, argv=_object_named("b.o", *flags))
    assert (a == b) is same


@pytest.mark.parametrize(
    "argv, reaches",
    [
        (["gcc", "-c", "-O2", "-fPIC"], False),
        (["gcc", "-g0"], False),
        (["gcc", "-g"], True),
        (["gcc", "-gsplit-dwarf"], True),
        (["gcc", "--coverage"], True),
        (["gcc", "-fprofile-generate"], True),
        (["gcc", "-flto=auto"], True),
        (["gcc", "-MD"], True),
        (["-g", "-O2"], False),  # the program's name is not an option
    ],
    ids=lambda a: " ".join(a) if isinstance(a, list) else str(a),
)
def test_name_reaches_object(argv, reaches):
    assert name_reaches_object(argv) is reaches


@pytest.mark.parametrize(
    "kind, action",
    [(Kind.PREPROCESS, Action.EXEC), (Kind.FATBINARY, Action.EXEC), (Kind.CICC, Action.SHELL)],
    ids=["preprocessing", "fatbinary", "shell-line"],
)
def test_steps_that_are_not_cached_have_no_key(tmp_path, kind, action):
    tasks, paths = compile_tasks(tmp_path, pid=0x1111, tmpdir="tmp")
    assert key_maker(tmp_path, paths).prepare(tasks[kind]._replace(action=action)) is None


def test_a_step_whose_input_is_missing_has_no_key(tmp_path):
    tasks, paths = compile_tasks(tmp_path, pid=0x1111, tmpdir="tmp")
    os.remove(f"{tmp_path}/tmp/{min(tasks[Kind.CICC].reads)}")
    assert key_maker(tmp_path, paths).prepare(tasks[Kind.CICC]) is None  # the step runs and says what is wrong


def test_the_assembly_of_a_split_host_compile_is_keyed_apart(tmp_path):
    tasks, paths = compile_tasks(tmp_path, pid=0x1111, tmpdir="tmp")
    keys, task = key_maker(tmp_path, paths), tasks[Kind.HOST_COMPILE]
    whole, front = keys.prepare(task), keys.prepare(task, assembly=str(tmp_path / "front.s"))
    assert whole.outputs == (str(tmp_path / "src" / "kernel.o"),)
    assert front.outputs == (str(tmp_path / "front.s"),) and front.key != whole.key


def prepared_cicc(tmp_path, pid: int, tmpdir: str) -> Prepared:
    tasks, paths = compile_tasks(tmp_path, pid=pid, tmpdir=tmpdir)
    return key_maker(tmp_path, paths).prepare(tasks[Kind.CICC])


def test_a_text_output_stored_by_one_run_comes_back_with_another_runs_names(tmp_path):
    first, second = prepared_cicc(tmp_path, 0x1111, "tmp"), prepared_cicc(tmp_path, 0x2222, "other")
    assert first.key == second.key and first.text
    stub = f"{tmp_path}/tmp/tmpxft_00001111_00000000-6_kernel.cudafe1.stub.c"
    output = f'#include "{stub}"\n#include "tmpxft_00001111_00000000-3_kernel.fatbin.c"\n'.encode()
    stored = hide_names(output, first, text=True)
    assert b"00001111" not in stored and str(tmp_path).encode() not in stored
    restored = restore_names(stored, second, text=True)
    assert restored == output.replace(b"00001111", b"00002222").replace(f"{tmp_path}/tmp/".encode(),
                                                                         f"{tmp_path}/other/".encode())  # fmt: skip


def test_a_binary_output_keeps_its_length_and_gets_only_the_tag_changed(tmp_path):
    first, second = prepared_cicc(tmp_path, 0x1111, "tmp"), prepared_cicc(tmp_path, 0x2222, "tmp")
    output = b"\x7fELF\x00tmpxft_00001111_00000000-6_kernel.ptx\x00" + str(tmp_path).encode()
    stored = hide_names(output, first, text=False)
    assert len(stored) == len(output) and b"00001111" not in stored
    assert restore_names(stored, second, text=False) == output.replace(b"00001111", b"00002222")
