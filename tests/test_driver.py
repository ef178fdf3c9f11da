"""The driver's decisions that need no nvcc: jobs, fallbacks, discovery."""

import stat
from pathlib import Path

import pytest

from fast_nvcc.driver import Config, jobs_for
from fast_nvcc.errors import FastNvccError
from fast_nvcc.graph.tasks import Action
from fast_nvcc.machine.cpus import usable_cpus
from fast_nvcc.plan.dryrun import Plan
from fast_nvcc.plan.toolchain import ToolchainError, find_nvcc

from plans import dag_for, load_plan


@pytest.mark.parametrize(
    ("config", "env", "jobs"),
    [
        (Config(), {}, None),
        (Config(), {"FAST_NVCC_JOBS": "3"}, 3),
        (Config(jobs=5), {"FAST_NVCC_JOBS": "3"}, 5),
        (Config(sequential=True, jobs=5), {}, 1),
        (Config(), {"FAST_NVCC_JOBS": ""}, None),
    ],
)
def test_jobs(config, env, jobs):
    assert jobs_for(config, env) == (jobs if jobs is not None else len(usable_cpus()))


def test_jobs_that_are_no_count_are_an_error():
    with pytest.raises(FastNvccError, match="FAST_NVCC_JOBS='zero'"):
        jobs_for(Config(), {"FAST_NVCC_JOBS": "zero"})


def test_a_dag_in_doubt_runs_in_nvccs_order(capsys):
    plan = load_plan("compile_1arch")
    broken = Plan(steps=plan.steps[:3] + plan.steps[4:], env=plan.env, assignments=())
    dag = dag_for(broken, say=Config(verbose=1).say)
    assert [sorted(p) for p in dag.preds] == [[]] + [[i] for i in range(len(broken.steps) - 1)]
    assert "running the plan in nvcc's order: step" in capsys.readouterr().err


def test_default_mode_speculates_and_faithful_does_not():
    plan = load_plan("compile_3arch")
    assert any(t.action is Action.CHECK_MODULE_ID for t in dag_for(plan).tasks)
    faithful = dag_for(plan, faithful=True)
    assert not any(t.action is Action.CHECK_MODULE_ID for t in faithful.tasks)


def fake_nvcc(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "nvcc"
    path.write_text("#!/bin/sh\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_discovery_order(tmp_path):
    explicit = fake_nvcc(tmp_path / "explicit")
    variable = fake_nvcc(tmp_path / "variable")
    on_path = fake_nvcc(tmp_path / "path")
    home = fake_nvcc(tmp_path / "home" / "bin")
    env = {"FAST_NVCC_NVCC": str(variable), "PATH": str(on_path.parent), "CUDA_HOME": str(tmp_path / "home")}
    assert find_nvcc(str(explicit), env=env) == str(explicit)
    assert find_nvcc(None, env=env) == str(variable)
    del env["FAST_NVCC_NVCC"]
    assert find_nvcc(None, env=env) == str(on_path)
    env["PATH"] = str(tmp_path / "empty")
    assert find_nvcc(None, env=env) == str(home)
    # A bare name (the launcher form "nvcc ...") is looked up on PATH.
    env["PATH"] = str(on_path.parent)
    assert find_nvcc("nvcc", env=env) == str(on_path)


def test_explicit_nvcc_must_exist(tmp_path):
    with pytest.raises(ToolchainError, match="--nvcc"):
        find_nvcc(str(tmp_path / "missing"), env={"PATH": ""})
