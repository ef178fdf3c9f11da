import os
import re

import pytest

from fast_nvcc.plan.dryrun import Kind, PlanError, is_temp, parse_plan, retarget, source_outputs

from plans import load, load_plan, names


def kinds(plan):
    return [step.kind for step in plan.steps]


def test_every_fixture_parses():
    for name in names():
        plan = load_plan(name)
        assert plan.steps, name
        assert plan.temp_tag.startswith("tmpxft_"), name


def test_compile_one_arch_shape():
    plan = load_plan("compile_1arch")
    assert kinds(plan) == [
        Kind.PREPROCESS, Kind.CUDAFE, Kind.PREPROCESS, Kind.CICC,
        Kind.PTXAS, Kind.FATBINARY, Kind.REMOVE, Kind.HOST_COMPILE,
    ]  # fmt: skip
    preprocess_host, cudafe, preprocess_dev, cicc, ptxas, fatbinary, rm, host = plan.steps
    assert preprocess_host.arch is None and preprocess_dev.arch == "compute_80"
    assert cicc.arch == "compute_80" and ptxas.arch == "sm_80"
    # "$CICC_PATH/cicc" is expanded from the plan's own assignment.
    assert cicc.argv[0] == "/usr/local/cuda-13.0/bin/../nvvm/bin/cicc"
    assert cudafe.generates_module_id and not cicc.generates_module_id
    assert cudafe.module_id == cicc.module_id and cicc.module_id in cicc.reads
    # cudafe++ only names the stub it #includes; cicc writes it; the host compile reads the
    # .cudafe1.cpp, which names it.
    (stub,) = cudafe.names
    assert stub.endswith(".cudafe1.stub.c") and stub in cicc.writes
    (fatbin_c,) = cicc.names
    assert fatbin_c.endswith(".fatbin.c") and fatbin_c in fatbinary.writes
    assert source_outputs(cicc) == {stub, *(k for k in cicc.writes if k.endswith(".cudafe1.c"))}
    assert host.outputs == ("kernel.o",)
    assert host.writes == {os.path.join(load("compile_1arch")[0]["cwd"], "kernel.o")}
    assert rm.writes and all(k.endswith(".fatbin") for k in rm.writes)


def test_assignments_become_the_environment_verbatim():
    plan = load_plan("compile_1arch")
    # _TARGET_DIR_ is assigned twice; the last one counts. Quotes and spaces stay as printed.
    assert plan.env["_TARGET_DIR_"] == "targets/x86_64-linux"
    assert plan.env["INCLUDES"].startswith('"-I/usr/local/cuda-13.0/bin/../targets')
    assert plan.env["_SPACE_"] == " "
    assert plan.env["PATH"].startswith("/usr/local/cuda-13.0/bin/../nvvm/bin:")


def test_threads_plan_redirections_and_order():
    plan = load_plan("threads")
    assert plan.steps[0].kind is Kind.REMOVE  # nvcc -t prints its rm first
    for step in plan.steps[1:]:
        targets = [r.target for r in step.redirects]
        assert [r.fd for r in step.redirects] == [1, 2]
        assert targets[0].endswith("_stdout") and targets[1].endswith("_stderr")
        assert step.outputs == () or step.kind is Kind.HOST_COMPILE


def test_library_archive_runs_through_the_shell():
    plan = load_plan("library")
    archive = plan.steps[-1]
    assert archive.kind is Kind.ARCHIVE and archive.needs_shell
    assert archive.outputs == ("libkernel.a",)
    (member,) = archive.reads
    assert member.endswith("_kernel.o")


def test_depfile_to_stdout_reads_every_preprocessed_file_in_plan_order():
    plan = load_plan("deps_stdout")
    (depfile,) = [s for s in plan.steps if s.kind is Kind.DEPFILE]
    assert depfile.outputs == ()
    assert [p.rsplit(".", 2)[-2] for p in depfile.sources] == ["cpp1", "cpp4"]


@pytest.mark.parametrize("printed", [[3, 0, 1, 2], [2, 3, 0, 1], [1, 0, 3, 2]])
def test_depfile_reads_in_nvccs_order_whatever_order_its_threads_printed(printed):
    """Under -t nvcc's threads print the preprocessing steps in any order (seen: the host's
    gcc -E before the architectures' in 2 of 30 dryruns), while the dependency file it writes
    always lists the architectures' files in -gencode order and the host's last."""
    header, body = load("compile_3arch_md")
    lines = body.splitlines()
    steps = [i for i, line in enumerate(lines) if " -E " in line]
    assert len(steps) == 4 and steps == list(range(steps[0], steps[0] + 4))
    shuffled = [lines[steps[0] + k] for k in printed]
    lines[steps[0] : steps[0] + 4] = shuffled
    plan = parse_plan("\n".join(lines) + "\n", env={}, cwd=header["cwd"])
    (depfile,) = [s for s in plan.steps if s.kind is Kind.DEPFILE]
    names = [p.rsplit("_kernel.", 1)[-1] for p in depfile.sources]
    assert names == ["compute_75.cpp1.ii", "compute_80.cpp1.ii", "compute_90.cpp1.ii", "cpp4.ii"]


def test_two_sources_each_get_their_own_depfile_whatever_order_threads_printed():
    """Under -t both sources' preprocessing may be printed before the first dependency step."""
    header, body = load("two_sources_mmd")
    lines = body.splitlines()
    first_filter = next(i for i, line in enumerate(lines) if line.startswith("#$ -- Filter"))
    second_pp = [i for i, line in enumerate(lines) if " -E " in line and "main" in line]
    moved = [lines[i] for i in second_pp]
    rest = [line for i, line in enumerate(lines) if i not in second_pp]
    rest[first_filter:first_filter] = moved
    plan = parse_plan("\n".join(rest) + "\n", env={}, cwd=header["cwd"])
    depfiles = [s for s in plan.steps if s.kind is Kind.DEPFILE]
    assert [d.outputs for d in depfiles] == [("kernel.d",), ("main.d",)]
    assert len(depfiles[0].sources) == len(depfiles[1].sources) == 2
    assert all("_kernel." in p for p in depfiles[0].sources)
    assert all("_main." in p for p in depfiles[1].sources)


def test_two_sources_each_get_their_own_depfile():
    plan = load_plan("two_sources_mmd")
    depfiles = [s for s in plan.steps if s.kind is Kind.DEPFILE]
    assert [d.outputs for d in depfiles] == [("kernel.d",), ("main.d",)]
    assert all("_kernel." in p for p in depfiles[0].sources)
    assert all("_main." in p for p in depfiles[1].sources)


def test_dlink_host_compile_reads_files_named_in_macros():
    plan = load_plan("dlink")
    host = plan.steps[-1]
    assert host.kind is Kind.HOST_COMPILE
    assert {k.rsplit(".", 1)[-1] for k in host.reads} == {"c"}
    assert len(host.reads) == 2  # the .fatbin.c and the .reg.c
    nvlink = plan.steps[0]
    assert nvlink.kind is Kind.NVLINK and nvlink.arch == "sm_80"


def test_retarget_keeps_length_and_replaces_every_tag():
    _, body = load("compile_3arch_md")
    new = retarget(body, pid=0x1234)
    assert len(new) == len(body)
    tags = set(re.findall(r"tmpxft_[0-9a-f]{8}_", new))
    assert tags == {"tmpxft_00001234_"}


def test_messages_keep_their_position():
    _, body = load("compile_1arch")
    lines = body.splitlines(keepends=True)
    first_command = next(i for i, l in enumerate(lines) if l.startswith("#$ gcc"))
    warning = "nvcc warning : something\n"
    lines.insert(first_command, warning)
    lines.append("trailing note\n")
    plan = parse_plan("".join(lines), env={}, cwd="/src")
    assert plan.messages == ((0, warning), (len(plan.steps), "trailing note\n"))


def test_no_commands_is_an_error():
    with pytest.raises(PlanError):
        parse_plan("#$ _HERE_=/x\n", env={}, cwd="/")


def test_is_temp():
    assert is_temp("/tmp/tmpxft_0000abcd_00000000-6_k.ptx")
    assert is_temp("tmpxft_0000abcd_00000000-6_k.stub.c")
    assert not is_temp("/home/me/kernel.o")
