import pytest

from fast_nvcc.graph.build import build_dag, sequential_dag
from fast_nvcc.graph.paths import critical_path, priorities, topological_order
from fast_nvcc.graph.tasks import Action, Dag
from fast_nvcc.plan.dryrun import Kind

from plans import load, load_plan, names


def ancestors(dag: Dag, task_id: int) -> set[int]:
    seen, todo = set(), [task_id]
    while todo:
        for pred in dag.preds[todo.pop()]:
            if pred not in seen:
                seen.add(pred)
                todo.append(pred)
    return seen


def find(dag: Dag, kind: Kind, arch: str | None = None, action: Action | None = None):
    found = [
        t for t in dag.tasks
        if t.step.kind is kind and (arch is None or t.step.arch == arch)
        and (action is None or t.action is action)
    ]  # fmt: skip
    assert found, (kind, arch)
    return found


def exists(_path):
    return False


@pytest.mark.parametrize("name", names())
@pytest.mark.parametrize("speculate", [False, True])
def test_every_fixture_gives_a_valid_dag(name, speculate):
    dag = build_dag(load_plan(name), speculate=speculate, split_host=speculate, workdir="/w", exists=exists)
    assert dag.problems == ()
    order = topological_order(dag)  # raises on a cycle
    assert sorted(order) == list(range(len(dag.tasks)))


def test_host_compile_waits_for_fatbinary_and_the_stub_writing_cicc():
    dag = build_dag(load_plan("compile_3arch_md"), exists=exists)
    (host,) = find(dag, Kind.HOST_COMPILE)
    (fatbinary,) = find(dag, Kind.FATBINARY)
    (cudafe,) = find(dag, Kind.CUDAFE)
    before_host = ancestors(dag, host.id)
    assert {fatbinary.id, cudafe.id} <= before_host
    assert all(c.id in before_host for c in find(dag, Kind.CICC))
    # cicc itself never waits for fatbinary, though it names the .fatbin.c first.
    assert all(fatbinary.id not in ancestors(dag, c.id) for c in find(dag, Kind.CICC))


def test_without_speculation_cicc_waits_for_cudafe_module_id():
    dag = build_dag(load_plan("compile_3arch_md"), exists=exists)
    (cudafe,) = find(dag, Kind.CUDAFE)
    for cicc in find(dag, Kind.CICC):
        assert cudafe.id in cicc_preds(dag, cicc.id)


def cicc_preds(dag, task_id):
    return dag.preds[task_id]


def test_speculation_takes_cudafe_off_ciccs_path_and_checks_each():
    dag = build_dag(load_plan("compile_3arch_md"), speculate=True, workdir="/w", exists=exists)
    (cudafe,) = find(dag, Kind.CUDAFE)
    checks = [t for t in dag.tasks if t.action is Action.CHECK_MODULE_ID]
    ciccs = find(dag, Kind.CICC, action=Action.EXEC)
    assert len(checks) == len(ciccs) == 3
    for cicc in ciccs:
        assert cudafe.id not in ancestors(dag, cicc.id)
        check = dag.tasks[cicc.checked_by]
        assert dag.preds[check.id] == {cudafe.id, cicc.id}
        # cicc now generates a private module_id; the check reruns the original on a mismatch.
        assert "--gen_module_id_file" in cicc.argv and "--gen_module_id_file" not in check.rerun
        private = cicc.argv[cicc.argv.index("--module_id_file_name") + 1]
        assert private.startswith("/w/") and check.module_ids[1] == private
        assert check.module_ids[0].endswith(".module_id")
        # Everything downstream of the cicc waits for its check.
        (ptxas,) = find(dag, Kind.PTXAS, arch=cicc.step.arch.replace("compute", "sm"))
        assert check.id in dag.preds[ptxas.id] and cicc.id not in dag.preds[ptxas.id]


def test_older_nvcc_first_cicc_generates_module_id():
    dag = build_dag(load_plan("older_nvcc_module_id"), speculate=True, workdir="/w", exists=exists)
    first, *others = find(dag, Kind.CICC, action=Action.EXEC)
    assert first.step.generates_module_id and first.checked_by is None
    (cudafe,) = find(dag, Kind.CUDAFE)
    assert first.id in dag.preds[cudafe.id]  # cudafe++ reads the module_id cicc made
    for cicc in others:
        assert first.id not in ancestors(dag, cicc.id)
        assert dag.preds[cicc.checked_by] == {first.id, cicc.id}


def test_fatbin_mode_speculates_against_the_generating_cicc():
    dag = build_dag(load_plan("fatbin"), speculate=True, workdir="/w", exists=exists)
    generating = [t for t in find(dag, Kind.CICC, action=Action.EXEC) if t.step.generates_module_id]
    assert len(generating) == 1
    checks = [t for t in dag.tasks if t.action is Action.CHECK_MODULE_ID]
    assert len(checks) == 1 and generating[0].id in dag.preds[checks[0].id]


@pytest.mark.parametrize("speculate", [False, True])
def test_ptxas_check_of_the_users_ptx_waits_for_cicc(speculate):
    """nvcc -ptx for compute_90 and later ends in 'ptxas -arch=compute_90 "kernel.ptx"': a check
    of the user's own output file, named by no temp name."""
    dag = build_dag(load_plan("ptx_check"), speculate=speculate, workdir="/w", exists=exists)
    (cicc,) = find(dag, Kind.CICC)
    (ptxas,) = find(dag, Kind.PTXAS)
    assert cicc.step.outputs == ("kernel.ptx",) and "-o" not in ptxas.argv
    assert cicc.id in dag.preds[ptxas.id]


def test_link_waits_for_every_object():
    dag = build_dag(load_plan("link_executable"), exists=exists)
    (link,) = find(dag, Kind.LINK)
    compiles = find(dag, Kind.HOST_COMPILE)
    assert len(compiles) == 3  # two sources and the device-link stub
    assert {c.id for c in compiles} <= ancestors(dag, link.id)


def test_sources_are_independent_until_the_link():
    dag = build_dag(load_plan("two_sources_mmd"), exists=exists)
    kernel = [t for t in dag.tasks if "kernel" in t.step.text and t.step.kind is Kind.CICC]
    main = [t for t in dag.tasks if "_main." in t.step.text and t.step.kind is Kind.HOST_COMPILE]
    assert not ancestors(dag, main[0].id) & {k.id for k in kernel}


def test_threads_plan_rm_first_still_orders_correctly():
    dag = build_dag(load_plan("threads"), exists=exists)
    (host,) = find(dag, Kind.HOST_COMPILE)
    (fatbinary,) = find(dag, Kind.FATBINARY)
    assert fatbinary.id in ancestors(dag, host.id)


def test_a_read_nobody_writes_is_a_problem():
    plan = load_plan("compile_1arch")
    broken = plan.steps[:3] + plan.steps[4:]  # drop cicc: ptxas reads a PTX nobody writes
    dag = build_dag(type(plan)(steps=broken, env=plan.env, assignments=()), exists=exists)
    assert any("ptx" in problem for problem in dag.problems)


def test_rm_waits_for_readers_and_writers_of_its_file():
    plan = load_plan("compile_1arch")
    dag = build_dag(plan, exists=exists)
    (rm,) = find(dag, Kind.REMOVE)
    (target,) = rm.step.writes
    for task in dag.tasks:
        if task.id != rm.id and (target in task.step.reads or target in task.step.writes):
            assert task.id in ancestors(dag, rm.id)


def test_sequential_dag_is_a_chain():
    plan = load_plan("compile_1arch")
    dag = sequential_dag(plan)
    assert [sorted(p) for p in dag.preds] == [[]] + [[i] for i in range(len(plan.steps) - 1)]
    assert all(t.action in (Action.EXEC, Action.REMOVE) for t in dag.tasks)


def test_faithful_runs_every_command_through_sh():
    dag = build_dag(load_plan("compile_1arch"), shell=True, exists=exists)
    assert {t.action for t in dag.tasks} == {Action.SHELL, Action.REMOVE}


def test_priorities_and_critical_path_on_a_diamond():
    plan = load_plan("compile_1arch")
    tasks = sequential_dag(plan).tasks[:4]
    dag = Dag(tasks, (frozenset(), frozenset({0}), frozenset({0}), frozenset({1, 2})))
    costs = [1.0, 5.0, 2.0, 1.0]
    assert priorities(dag, costs) == [7.0, 6.0, 3.0, 1.0]
    assert critical_path(dag, costs) == [0, 1, 3]


def test_critical_path_takes_the_first_of_an_any_of_group():
    """A task that waits for one of two predecessors starts when the earlier one ends: the
    critical path runs through that one, unless a regular predecessor ends later."""

    tasks = list(sequential_dag(load_plan("compile_3arch")).tasks[:5])
    tasks[3] = tasks[3]._replace(any_of=frozenset({1, 2}))
    preds = (frozenset(), frozenset({0}), frozenset({0}), frozenset({1, 2, 4}), frozenset())
    dag = Dag(tuple(tasks), preds)
    # 3 starts when 2 ends (1 + 2 s), not 1 (1 + 5 s): 0-2-3 ends at 7 s, 0-1 at 6 s.
    assert critical_path(dag, [1.0, 5.0, 2.0, 4.0, 1.0]) == [0, 2, 3]
    # A regular predecessor that ends later (4: 3.5 s) decides 3's start instead.
    assert critical_path(dag, [1.0, 5.0, 2.0, 4.0, 3.5]) == [4, 3]
    # With 3 short, the path ends in 1.
    assert critical_path(dag, [1.0, 5.0, 2.0, 1.0, 1.0]) == [0, 1]


def test_cycle_is_detected():
    tasks = sequential_dag(load_plan("compile_1arch")).tasks[:2]
    dag = Dag(tasks, (frozenset({1}), frozenset({0})))
    with pytest.raises(ValueError, match="cycle"):
        topological_order(dag)


@pytest.mark.parametrize("seed", range(20))
def test_critical_path_agrees_with_networkx(seed):
    """Our one-pass longest path against networkx's, on random DAGs with random durations."""
    import random

    import networkx as nx

    rng = random.Random(seed)
    tasks = sequential_dag(load_plan("compile_3arch")).tasks
    n = len(tasks)
    preds = [frozenset(j for j in range(i) if rng.random() < 0.3) for i in range(n)]
    dag = Dag(tasks, tuple(preds))
    durations = [rng.uniform(0, 10) for _ in range(n)]
    ours = critical_path(dag, durations)
    assert all(ours[i] in dag.preds[ours[i + 1]] for i in range(len(ours) - 1))  # a real chain
    weighted = nx.DiGraph()
    for v in range(n):
        weighted.add_edge(v, "end", weight=durations[v])
        for u in preds[v]:
            weighted.add_edge(u, v, weight=durations[u])
    expected = nx.dag_longest_path_length(weighted, weight="weight")
    assert sum(durations[i] for i in ours) == pytest.approx(expected)


def test_split_host_compile_starts_before_fatbinary():
    plain = build_dag(load_plan("compile_3arch_md"), speculate=True, exists=exists)
    dag = build_dag(load_plan("compile_3arch_md"), speculate=True, split_host=True, workdir="/w", exists=exists)
    (front,) = find(dag, Kind.HOST_COMPILE, action=Action.HOST_FRONT)
    (back,) = find(dag, Kind.HOST_COMPILE, action=Action.HOST_BACK)
    (fatbinary,) = find(dag, Kind.FATBINARY)
    (old_host,) = find(plain, Kind.HOST_COMPILE)
    assert fatbinary.id not in ancestors(dag, front.id)
    assert all(p.step.kind is not Kind.PTXAS for p in map(dag.tasks.__getitem__, ancestors(dag, front.id)))
    # It waits for cudafe++ and for any one cicc of its compile (each one's module_id check),
    # whose stub it starts from; the last cicc writes the stub nvcc's host compile includes
    # (early_stubs).
    ciccs = find(dag, Kind.CICC, action=Action.EXEC)
    (last,) = [t for t in ciccs if t.step.writes & front.reads]
    assert last.id == max(t.id for t in ciccs)
    assert find(dag, Kind.CUDAFE)[0].id in ancestors(dag, front.id)
    checks = {t.checked_by for t in ciccs}
    (probe,) = [t for t in dag.tasks if t.action is Action.STUB_PROBE]
    (learned,) = [t for t in dag.tasks if t.action is Action.LEARNED_STUB]
    assert front.any_of == checks | {probe.id, learned.id} and front.any_of <= dag.preds[front.id]
    # The last cicc writes its stub to a private path, also when its module_id check reruns
    # it; the back task waits for that check and puts the real stub in place.
    real_stub, private_stub, seeds = front.stub
    assert back.stub == front.stub and private_stub == "/w/%d.stub.c" % last.step.index
    assert real_stub in last.step.argv and private_stub in last.argv and real_stub not in last.argv
    assert dict(seeds) == {t.checked_by: (private_stub if t is last else t.argv[t.argv.index("--stub_file_name") + 1])
                           for t in ciccs} | {probe.id: "/w/%d.probe.stub.c" % last.step.index,
                                              learned.id: "/w/%d.learned.stub.c" % last.step.index}  # fmt: skip
    # The sure stubs first (the probe's, the last cicc's own), then the one learned, then the rest.
    assert [done for done, _ in seeds[:3]] == [probe.id, last.checked_by, learned.id]
    # The stub probe: the last cicc's front end alone, on the same input, once the same steps
    # are done, every file it writes private; the front takes its stub before any other.
    assert seeds[0][0] == probe.id and probe.optional and probe.step is last.step
    assert probe.idle_only  # not a split compile: only on idle cores
    assert dag.preds[probe.id] == dag.preds[last.id] and dag.succs[probe.id] == {front.id}
    assert probe.argv[1] == "--device-syntax-only" and probe.argv[0] == last.argv[0]
    written = {"-o", "--gen_c_file_name", "--gen_device_file_name", "--stub_file_name", "--module_id_file_name"}
    assert len(probe.argv) == len(last.argv) + 1
    for at, (ours, theirs) in enumerate(zip(probe.argv[2:], last.argv[1:])):
        after = last.argv[at]  # the word before ``theirs``
        assert ours == theirs if after not in written else ours.startswith("/w/%d.probe." % last.step.index)
    assert not any(w in probe.argv for w in last.step.outputs) and private_stub not in probe.argv
    unprobed = build_dag(load_plan("compile_3arch_md"), speculate=True, split_host=True, probe_stubs=False,
                         workdir="/w", exists=exists)  # fmt: skip
    assert not [t for t in unprobed.tasks if t.action is Action.STUB_PROBE]
    unprobed_learned = {t.id for t in unprobed.tasks if t.action is Action.LEARNED_STUB}
    assert find(unprobed, Kind.HOST_COMPILE, action=Action.HOST_FRONT)[0].any_of == checks | unprobed_learned
    check = dag.tasks[last.checked_by]
    assert private_stub in check.rerun and real_stub not in check.rerun
    assert dag.preds[back.id] == {front.id, fatbinary.id, check.id}
    assert back.front == front.id and back.order > front.order
    # fatbinary writes the private path; the front puts a placeholder where nvcc's stub looks.
    real, private = front.fatbin
    assert real.endswith(".fatbin.c") and private == "/w/fatbin.%d.c" % front.step.index
    assert any(private in word for word in fatbinary.argv) and not any(real in w for w in fatbinary.argv)
    # What came after the host compile now comes after the back task.
    for succ in plain.succs[old_host.id]:
        assert back.id in dag.preds[succ] and front.id not in dag.preds[succ]


def test_the_stub_probe_of_a_split_compile_waits_its_turn_as_a_real_step():
    """A split cicc (--split-compile) is a long pole the user named: its host compile must not
    wait for its end on a machine with no idle core, so its stub probe is urgent."""
    from fast_nvcc.plan.dryrun import parse_plan

    header, body = load("compile_3arch_md")
    split = body.replace('"$CICC_PATH/cicc" ', '"$CICC_PATH/cicc" -split-compile 8 ')
    dag = build_dag(parse_plan(split, env={}, cwd=header["cwd"]), speculate=True, split_host=True, workdir="/w",
                    exists=exists)  # fmt: skip
    (probe,) = [t for t in dag.tasks if t.action is Action.STUB_PROBE]
    assert probe.optional and probe.urgent and not probe.idle_only
    assert "-split-compile" in probe.argv  # the front end ignores it; the command is the cicc's
    # FAST_NVCC_STUB_PROBE=idle: on idle cores only, as for an unsplit compile.
    idle = build_dag(parse_plan(split, env={}, cwd=header["cwd"]), speculate=True, split_host=True, workdir="/w",
                     exists=exists, urgent_probes=False)  # fmt: skip
    (probe,) = [t for t in idle.tasks if t.action is Action.STUB_PROBE]
    assert probe.idle_only


@pytest.mark.parametrize("flag", ["-g", "-ggdb3", "-flto", "-save-temps", "-pipe", "-fdump-tree-all"])
def test_no_split_where_more_than_the_data_may_differ(flag):
    from fast_nvcc.graph.host_compile import can_split

    argv = ["gcc", "-c", "-x", "c++", flag, "a.cudafe1.cpp", "-o", "a.o"]
    assert not can_split(argv)
    assert can_split([w for w in argv if w != flag])
    assert can_split(["gcc", "-c", "-g0", "a.cpp"])


def _early_stub_dag(name: str) -> Dag:
    return build_dag(load_plan(name), speculate=True, split_host=True, workdir="/w", exists=exists)


@pytest.mark.parametrize("name", names())
def test_an_early_stub_comes_from_its_own_compile(name):
    """Plans with several sources (a link, a library): each front starts from a cicc of its
    own compile (the one whose stub names the same .fatbin.c), never another source's."""
    dag = _early_stub_dag(name)
    for front in (t for t in dag.tasks if t.action is Action.HOST_FRONT and t.stub is not None):
        fatbin_c = front.fatbin[0].rsplit("/", 1)[-1]
        for done, path in front.stub[2]:
            if dag.tasks[done].action is Action.LEARNED_STUB:  # its compile's: what its last cicc reads
                (cicc,) = [t for t in dag.tasks if t.step.kind is Kind.CICC and t.action is Action.EXEC
                           and dag.tasks[done].argv[2] in t.argv]  # fmt: skip
                assert any(fatbin_c in word for word in cicc.argv) and path == dag.tasks[done].argv[-1]
                continue
            (cicc,) = [t for t in dag.tasks if t.step.kind is Kind.CICC and t.action in (Action.EXEC, Action.STUB_PROBE)
                       and (t.id == done or t.checked_by == done)]  # fmt: skip
            assert path in cicc.argv and any(fatbin_c in word for word in cicc.argv)


def test_early_stubs_need_two_architectures_of_one_compile_or_a_learned_stub():
    def stubs(name, learned):
        dag = build_dag(load_plan(name), speculate=True, split_host=True, workdir="/w", exists=exists,
                        learned_stubs=learned)  # fmt: skip
        return [t.stub for t in dag.tasks if t.action is Action.HOST_FRONT]

    assert stubs("compile_1arch", False) == [None]
    assert stubs("link_executable", False) == [None, None, None]  # two sources and the -dlink stub
    assert all(stubs("compile_3arch", False)) and stubs("compile_3arch", False)
    # A learned stub stands in for a compile's only cicc: both sources' compiles get one; the
    # -dlink stub's compile has no cicc and no cudafe++.
    assert all(stubs("compile_1arch", True)) and stubs("compile_1arch", True)
    assert [s is not None for s in stubs("link_executable", True)] == [True, True, False]


def test_a_learned_stub_waits_for_cudafe_and_the_preprocessing_but_no_cicc():
    """One architecture: the front may start on the learned stub as soon as cudafe++ and the
    device preprocessing are done, while cicc runs; the back still waits for cicc's own."""
    dag = _early_stub_dag("compile_1arch")
    (front,) = find(dag, Kind.HOST_COMPILE, action=Action.HOST_FRONT)
    (back,) = find(dag, Kind.HOST_COMPILE, action=Action.HOST_BACK)
    (learned,) = [t for t in dag.tasks if t.action is Action.LEARNED_STUB]
    (cicc,) = find(dag, Kind.CICC, action=Action.EXEC)
    (cudafe,) = find(dag, Kind.CUDAFE)
    waits = ancestors(dag, learned.id)
    assert cudafe.id in waits and not any(dag.tasks[t].step.kind is Kind.CICC for t in waits)
    assert not any(dag.tasks[t].action is Action.CHECK_MODULE_ID for t in waits)
    assert {p for p in dag.preds[cicc.id] if dag.tasks[p].step.kind is Kind.PREPROCESS} <= waits
    assert learned.id in front.any_of and cicc.checked_by in front.any_of
    assert cicc.checked_by in dag.preds[back.id] and learned.id not in dag.preds[back.id]
    key, host_side, cicc_input, module_id, output = learned.argv
    assert host_side.endswith(".cudafe1.cpp") and cicc_input.endswith(".cpp1.ii") and module_id.endswith(".module_id")
    assert output == "/w/%d.learned.stub.c" % cicc.step.index and key.startswith("/")  # the source's path first
    assert "tmpxft_" not in key  # run after run the same


def test_a_member_of_an_any_of_group_does_not_count_the_groups_task():
    """The task needs one member, not each: a member's remaining path is its own."""

    plan_tasks = sequential_dag(load_plan("compile_1arch")).tasks[:4]
    tasks = tuple(t._replace(id=i) for i, t in enumerate(plan_tasks))
    tasks = tasks[:2] + (tasks[2]._replace(any_of=frozenset({0, 1})),) + tasks[3:]
    dag = Dag(tasks, (frozenset(), frozenset(), frozenset({0, 1}), frozenset({2})))
    assert priorities(dag, [1.0, 5.0, 10.0, 2.0]) == [1.0, 5.0, 12.0, 2.0]
    plain = Dag(tuple(t._replace(any_of=frozenset()) for t in tasks), dag.preds)
    assert priorities(plain, [1.0, 5.0, 10.0, 2.0]) == [13.0, 17.0, 12.0, 2.0]
