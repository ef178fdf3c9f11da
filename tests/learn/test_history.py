"""Learned step costs: recorded per (source, tool, arch), used for the next compile's order."""

import json
import os
import subprocess
import sys

import pytest

from fast_nvcc.learn.learned import measurements, source_of_steps, task_cost
from fast_nvcc.graph.tasks import Action
from fast_nvcc.guess.decisions import Outcome
from fast_nvcc.learn.history import ASSEMBLE, DEFAULT_SECONDS, Cost, History, Measurement, arch_weight, estimate
from fast_nvcc.learn.history_place import history_path
from fast_nvcc.plan.dryrun import Kind
from fast_nvcc.run.task_records import Record, State

from helpers import fast_nvcc_command, run_tool
from plans import dag_for, load, load_plan


def test_record_smooths_and_lookup_falls_back(tmp_path):
    history = History(str(tmp_path / "h.sqlite"))
    history.record([Measurement("/src/a.cu", "cicc", "compute_80", 10.0, 800_000)])
    history.record([Measurement("/src/a.cu", "cicc", "compute_80", 6.0, 900_000),
                    Measurement("/src/b.cu", "cicc", "compute_90", 2.0, 100_000)])  # fmt: skip
    known = history.lookup(["/src/a.cu"])
    assert known[("/src/a.cu", "cicc", "compute_80")] == Cost(8.0, 900_000)  # halfway, peak kept
    # A new source borrows the (tool, arch) average, then the tool's, then the default.
    assert estimate(known, source="/src/new.cu", tool="cicc", arch="compute_90", kind=Kind.CICC).seconds == 2.0
    assert estimate(known, source="/src/new.cu", tool="cicc", arch="sm_100", kind=Kind.CICC).seconds == 5.0
    assert estimate(known, source="/x.cu", tool="ptxas", arch="sm_80", kind=Kind.PTXAS).seconds == DEFAULT_SECONDS[Kind.PTXAS] * arch_weight("sm_80")
    history.close()


def test_a_broken_history_costs_nothing_but_scheduling(tmp_path):
    path = tmp_path / "h.sqlite"
    path.write_bytes(b"not a database")
    history = History(str(path))
    assert history.lookup(["/a.cu"]) == {}
    history.record([Measurement("/a.cu", "cicc", "", 1.0, 1)])  # no exception


def test_steps_belong_to_their_source():
    header, _ = load("two_sources_mmd")
    plan = load_plan("two_sources_mmd")
    sources = [f"{header['cwd']}/kernel.cu", f"{header['cwd']}/main.cu"]
    owners = source_of_steps(plan, sources)
    for step in plan.steps:
        if step.kind is Kind.CICC:
            assert owners[step.index] == (sources[0] if "_kernel." in step.text else sources[1])


def test_measurements_skip_cache_hits_and_failures():
    plan = load_plan("compile_1arch")
    dag = dag_for(plan, faithful=True)
    records = [Record(t.id, state=State.DONE, start=0.0, end=1.0, max_rss_kb=10) for t in dag.tasks]
    records[3].cached = True  # cicc replayed from the cache
    records[1].state = State.FAILED
    owners = {s.index: "/k.cu" for s in plan.steps}
    tools = [m.tool for m in measurements(dag, records, owners)]
    assert "cicc" not in tools and "cudafe++" not in tools and "ptxas" in tools


def test_a_split_host_compile_is_learned_as_its_parts():
    plan = load_plan("compile_1arch")
    dag = dag_for(plan)
    front = next(t for t in dag.tasks if t.action is Action.HOST_FRONT)
    back = next(t for t in dag.tasks if t.action is Action.HOST_BACK)
    owners = {s.index: "/k.cu" for s in plan.steps}
    records = [Record(t.id, state=State.DONE, start=0.0, end=1.0) for t in dag.tasks]
    records[front.id].end, records[back.id].end, records[back.id].split = 4.0, 0.2, True
    measured = [(m.tool, m.seconds) for m in measurements(dag, records, owners) if "gcc -c" in m.tool or m.tool == "as"]
    assert sorted(measured) == [("as", 0.2), ("gcc -c", 4.0)]
    # Fallen back: the back task did the whole compile; the front only looked for a placeholder.
    records[front.id].end, records[back.id].end, records[back.id].split = 0.01, 5.0, False
    measured = [(m.tool, m.seconds) for m in measurements(dag, records, owners) if "gcc -c" in m.tool or m.tool == "as"]
    assert measured == [("gcc -c", 5.0)]
    assert task_cost({}, back, owners) == ASSEMBLE
    assert task_cost({}, front, owners).seconds == DEFAULT_SECONDS[Kind.HOST_COMPILE]


def _learned_with_split_cicc(*, end: float, cpu: float, timeline, serial: float) -> dict:
    """What a one-architecture compile teaches, by tool, its cicc split (run 0 to ``end``, its
    ``cpu``, ``timeline`` of cores held, ``serial`` seconds of one thread), its other steps 10 s."""
    plan = load_plan("compile_1arch")
    dag = dag_for(plan, faithful=True)
    owners = {s.index: "/k.cu" for s in plan.steps}
    records = [Record(t.id, state=State.DONE, start=0.0, end=10.0, cpu_seconds=9.0) for t in dag.tasks]
    cicc = next(t for t in dag.tasks if t.step.kind is Kind.CICC)
    records[cicc.id].end, records[cicc.id].cpu_seconds = end, cpu
    records[cicc.id].core_timeline, records[cicc.id].serial_seconds = timeline, serial
    return {m.tool: m for m in measurements(dag, records, owners)}


def test_a_split_step_is_learned_as_its_cpu_and_its_serial_share():
    """A split step's wall depends on the cores it was granted (161 s on 2-4 cores for a cicc of
    281 s of cpu in TE's seven): learned as its wall, it ranked below shorter ciccs on one core.
    Its cpu is what one core would take; its seconds of one thread at a time give its share."""
    learned = _learned_with_split_cicc(end=161.0, cpu=281.0, timeline=[(0.0, 1), (10.0, 3)], serial=70.25)
    assert (learned["cicc"].seconds, learned["cicc"].serial) == (281.0, 70.25 / 281.0)
    assert (learned["ptxas"].seconds, learned["ptxas"].serial) == (10.0, None)  # not split: its wall


def test_a_split_step_under_a_second_teaches_its_cpu_but_no_serial_share():
    """The grant looks at a split step's threads a tenth of a second apart: a 0.21 s split cicc on
    2 cores logged 0.00 s one thread at a time, which learned as a share of 0 would have taught
    the build's next cicc that split costs nothing.  Its cpu is learned; its share is not (the
    history keeps the one it had)."""
    learned = _learned_with_split_cicc(end=0.21, cpu=0.3, timeline=[(0.0, 1), (0.1, 2)], serial=0.0)
    assert (learned["cicc"].seconds, learned["cicc"].serial) == (0.3, None)


def test_the_serial_share_is_smoothed_kept_and_averaged(tmp_path):
    history = History(str(tmp_path / "h.sqlite"))
    history.record([Measurement("/a.cu", "cicc", "sm_90", 200.0, 1, 0.2),
                    Measurement("/b.cu", "cicc", "sm_90", 100.0, 1, 0.4)])  # fmt: skip
    history.record([Measurement("/a.cu", "cicc", "sm_90", 300.0, 1, 0.3)])
    history.record([Measurement("/a.cu", "cicc", "sm_90", 250.0, 1)])  # ran unsplit: the share stays
    known = history.lookup(["/a.cu"])
    assert known[("/a.cu", "cicc", "sm_90")] == Cost(250.0, 1, 0.25)
    assert known[("", "cicc", "sm_90")].serial == pytest.approx((0.25 + 0.4) / 2)  # a new source's guess
    rows = history.export_rows(root="/")
    history.close()
    other = History(str(tmp_path / "o.sqlite"))
    assert other.import_rows(rows, root="/") == 2
    assert other.lookup(["/b.cu"])[("/b.cu", "cicc", "sm_90")] == Cost(100.0, 1, 0.4)


def test_a_history_from_before_serial_shares_gains_the_column(tmp_path):
    import sqlite3

    path = tmp_path / "h.sqlite"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE costs (source TEXT, tool TEXT, arch TEXT, seconds REAL, rss_kb INTEGER, runs INTEGER,"
               " updated REAL, PRIMARY KEY (source, tool, arch))")  # fmt: skip
    db.execute("INSERT INTO costs VALUES ('/a.cu', 'cicc', 'sm_90', 7.0, 1, 1, 0)")
    db.commit()
    db.close()
    history = History(str(path))
    history.record([Measurement("/a.cu", "cicc", "sm_90", 9.0, 1, 0.5)])
    assert history.lookup(["/a.cu"])[("/a.cu", "cicc", "sm_90")] == Cost(8.0, 1, 0.5)
    history.close()


def test_costs_come_from_history():
    plan = load_plan("compile_1arch")
    dag = dag_for(plan)
    owners = {s.index: "/k.cu" for s in plan.steps}
    known = {("/k.cu", "cudafe++", ""): Cost(42.0, 7)}
    cudafe = next(t for t in dag.tasks if t.step.kind is Kind.CUDAFE)
    assert task_cost(known, cudafe, owners) == Cost(42.0, 7)


@pytest.mark.nvcc
def test_a_compile_records_its_costs(nvcc, sources, tmp_path):
    cache = tmp_path / "cache"
    args = ["-c", "kernel.cu", "-Iinclude", "-arch=sm_80"]
    outcome = run_tool(fast_nvcc_command(nvcc, args), cwd=sources, tmpdir=tmp_path / "t",
                       env={"FAST_NVCC_CACHE_DIR": str(cache)})  # fmt: skip
    assert outcome.returncode == 0
    known = History(str(cache / "history.sqlite")).lookup([str(sources / "kernel.cu")])
    mine = {(t, a) for s, t, a in known if s == str(sources / "kernel.cu")}
    assert {("cicc", "compute_80"), ("ptxas", "sm_80"), ("cudafe++", ""), ("gcc -c", "")} <= mine
    run_tool(fast_nvcc_command(nvcc, args), cwd=sources, tmpdir=tmp_path / "t",
             env={"FAST_NVCC_CACHE_DIR": str(cache), "FAST_NVCC_HISTORY": "0", "FAST_NVCC_LOG": str(tmp_path / "l")})  # fmt: skip
    assert json.loads((tmp_path / "l").read_text())["exit_code"] == 0


def test_a_first_build_guesses_the_architecture_specific_cicc_longest():
    """With nothing known, device steps for an architecture-specific target (sm_90a, 100f) are
    guessed twice the per-tool default, and a newer architecture a little above an older one,
    so that a compile's likely longest cicc ranks first."""
    def guess(arch):
        return estimate({}, source="/x.cu", tool="cicc", arch=arch, kind=Kind.CICC).seconds

    assert guess("compute_90a") > 1.9 * guess("compute_90")
    assert guess("compute_100f") > guess("compute_90a") > guess("compute_90") > guess("compute_80")
    assert guess("") == DEFAULT_SECONDS[Kind.CICC]
    assert arch_weight("sm_80") == pytest.approx(1.0, abs=0.01)
    known = {("", "cicc", "compute_80"): Cost(30.0, 0)}  # anything learned wins over the guess
    assert estimate(known, source="/x.cu", tool="cicc", arch="compute_80", kind=Kind.CICC).seconds == 30.0


def test_history_travels_to_another_checkout(tmp_path):
    """Costs exported on one machine (sources relative to its checkout) and imported on
    another, whose checkout lies elsewhere, are found there under its own paths; what the
    second machine learned itself stays."""
    first = History(str(tmp_path / "a" / "history.sqlite"))
    first.record([Measurement("/ci/one/src/k.cu", "cicc", "compute_90a", 40.0, 900_000),
                  Measurement("/ci/one/src/l.cu", "cudafe++", "", 5.0, 600_000)])  # fmt: skip
    rows = first.export_rows(root="/ci/one")
    first.close()
    assert {r["source"] for r in rows} == {"src/k.cu", "src/l.cu"}
    second = History(str(tmp_path / "b" / "history.sqlite"))
    second.record([Measurement("/work/two/src/k.cu", "cicc", "compute_90a", 30.0, 800_000)])  # learned here
    assert second.import_rows(rows, root="/work/two") == 1
    known = second.lookup(["/work/two/src/k.cu", "/work/two/src/l.cu"])
    assert known[("/work/two/src/k.cu", "cicc", "compute_90a")].seconds == 30.0
    assert known[("/work/two/src/l.cu", "cudafe++", "")].seconds == 5.0
    second.close()


def test_an_export_holds_only_the_sources_under_its_root(tmp_path):
    """The history is the user's, shared by every project built on the machine: `history export
    --root .` carries this checkout's sources, not other projects' absolute paths (one export held
    1,087 entries for 106 sources, 100 of them other projects'), nor a link's (no source)."""
    history = History(str(tmp_path / "history.sqlite"))
    history.record([Measurement("/ci/one/src/k.cu", "cicc", "compute_80", 4.0, 1),
                    Measurement("/ci/one-other/k.cu", "cicc", "compute_80", 4.0, 1),
                    Measurement("/ci/k.cu", "cicc", "compute_80", 4.0, 1),
                    Measurement("/opt/other/project/x.cu", "cicc", "compute_80", 4.0, 1),
                    Measurement("", "nvlink", "", 0.5, 1)])  # fmt: skip
    history.record_guesses([Outcome("/ci/one/src/k.cu", "module_id", "compute_80", True),
                            Outcome("/opt/other/project/x.cu", "module_id", "compute_80", False)])  # fmt: skip
    assert [r["source"] for r in history.export_rows(root="/ci/one")] == ["src/k.cu"]
    assert [r["source"] for r in history.export_guesses(root="/ci/one/")] == ["src/k.cu"]
    history.close()


def test_history_export_and_import_on_the_command_line(tmp_path):
    env = {**os.environ, "FAST_NVCC_CACHE_DIR": str(tmp_path / "state")}
    history = History(history_path(env))
    history.record([Measurement(str(tmp_path / "k.cu"), "cicc", "compute_80", 12.0, 700_000),
                    Measurement("/elsewhere/other.cu", "cicc", "compute_80", 12.0, 700_000)])  # fmt: skip
    history.close()
    command = [sys.executable, "-m", "fast_nvcc", "history"]
    exported = subprocess.run([*command, "export", "-", "--root", str(tmp_path)], env=env,
                              capture_output=True, text=True, check=True)  # fmt: skip
    assert [row["source"] for row in json.loads(exported.stdout)["costs"]] == ["k.cu"]
    (tmp_path / "h.json").write_text(exported.stdout)
    elsewhere = {**os.environ, "FAST_NVCC_CACHE_DIR": str(tmp_path / "other")}
    imported = subprocess.run([*command, "import", str(tmp_path / "h.json"), "--root", "/src"], env=elsewhere,
                              capture_output=True, text=True)  # fmt: skip
    assert imported.returncode == 0 and imported.stdout.startswith("1 of 1 costs added"), imported.stderr
    assert History(history_path(elsewhere)).lookup(["/src/k.cu"])[("/src/k.cu", "cicc", "compute_80")].seconds == 12.0
    (tmp_path / "bad.json").write_text("[1, 2]")
    bad = subprocess.run([*command, "import", str(tmp_path / "bad.json")], env=elsewhere, capture_output=True, text=True)
    assert bad.returncode == 1 and bad.stderr.count("\n") == 1 and bad.stderr.startswith("fast_nvcc: error: history import")


def test_a_first_build_runs_the_host_chain_before_a_plain_architectures_cicc():
    """With nothing known, once a compile's device preprocessing is done, its host chain
    (preprocessing, cudafe++, the host compile) ranks above the cicc of any plain architecture:
    a template library's host side is as heavy as one cicc, and on two cores a host chain left
    for last runs on one core while the other idles.  The early stub's front needs one cicc,
    so no cicc counts it in its own path; an architecture-specific cicc (sm_90a) still ranks
    first."""
    from fast_nvcc.graph.paths import priorities

    plan = load_plan("compile_3arch")
    dag = dag_for(plan)
    owners = {s.index: "/k.cu" for s in plan.steps}
    ranks = priorities(dag, [task_cost({}, t, owners).seconds for t in dag.tasks])
    host_preprocess = next(t for t in dag.tasks if t.step.kind is Kind.PREPROCESS and not t.step.arch)
    ciccs = [t for t in dag.tasks if t.step.kind is Kind.CICC and t.action is Action.EXEC]
    cudafe = next(t for t in dag.tasks if t.step.kind is Kind.CUDAFE)
    assert len(ciccs) == 3 and all(ranks[host_preprocess.id] > ranks[cudafe.id] > ranks[c.id] for c in ciccs)
    specific = estimate({}, source="/k.cu", tool="cicc", arch="compute_90a", kind=Kind.CICC).seconds
    assert specific > ranks[host_preprocess.id]


def _split_dag():
    """compile_1arch's graph with its cicc and ptxas told ``-split-compile 16``."""
    plan = load_plan("compile_1arch")
    dag = dag_for(plan, faithful=True)
    tasks = tuple(t._replace(step=t.step._replace(argv=(*t.step.argv, "-split-compile", "16")))
                  if t.step.kind in (Kind.CICC, Kind.PTXAS) else t for t in dag.tasks)  # fmt: skip
    return plan, dag._replace(tasks=tasks)


def test_a_compile_knows_its_split_costs_only_from_its_own_sources_split_rows():
    """FAST_NVCC_LONGEST_FIRST (core_grants.Grant.longest) acts where the source's own split
    steps have costs in the history, decided once before the run: in learned builds of TE's seven the
    compile's credibility, shown by its early steps, came too late or never (round 37)."""
    from fast_nvcc.guess.decisions import NOTHING_KNOWN
    from fast_nvcc.learn.learned import Learned

    plan, dag = _split_dag()
    owners = {s.index: "/k.cu" for s in plan.steps}
    split = [t.step for t in dag.tasks if t.step.kind in (Kind.CICC, Kind.PTXAS)]
    own = {("/k.cu", s.tool, s.arch or ""): Cost(100.0, 1, 0.3) for s in split}
    assert Learned(plan, None, own, NOTHING_KNOWN, owners).split_costs_known(dag)
    # Another source's averages (source '' and '*') are a guess, not its own.
    peers = {(key, tool, arch): cost for (_, tool, arch), cost in own.items() for key in ("", "*")}
    assert not Learned(plan, None, peers, NOTHING_KNOWN, owners).split_costs_known(dag)
    # Measured unsplit (no serial share: a split ptxas under a second teaches none) is its own;
    # one split step unknown is not.
    unsplit = {key: cost._replace(serial=None) for key, cost in own.items()}
    assert Learned(plan, None, unsplit, NOTHING_KNOWN, owners).split_costs_known(dag)
    assert not Learned(plan, None, dict(list(own.items())[1:]), NOTHING_KNOWN, owners).split_costs_known(dag)
    # A step whose source is unknown (owner '') would read the averages' row: not known.
    assert not Learned(plan, None, own, NOTHING_KNOWN, {}).split_costs_known(dag)
    # No split step: nothing to rank by it.
    unsplit_dag = dag_for(plan, faithful=True)
    assert not Learned(plan, None, own, NOTHING_KNOWN, owners).split_costs_known(unsplit_dag)
