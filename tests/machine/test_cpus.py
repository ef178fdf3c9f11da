import os

from fast_nvcc.machine.cpus import usable_cpus


def test_usable_cpus_are_the_affinity():
    assert usable_cpus() == frozenset(os.sched_getaffinity(0))


def test_usable_cpus_without_affinity_are_the_machine(monkeypatch):
    monkeypatch.delattr(os, "sched_getaffinity")
    monkeypatch.setattr(os, "cpu_count", lambda: 3)
    assert usable_cpus() == {0, 1, 2}
    monkeypatch.setattr(os, "cpu_count", lambda: None)  # undeterminable
    assert usable_cpus() == {0}
