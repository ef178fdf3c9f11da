"""fast_nvcc's environment variables (fast_nvcc/settings.py): every value fast_nvcc cannot read is
one line ``fast_nvcc: error: ...`` and exit code 2 before anything runs, and every reader of an
on/off or numeric variable goes through the one module that checks it."""

import re
from pathlib import Path

import pytest
from test_cli import run_cli

from fast_nvcc import settings
from fast_nvcc.driver import Config, jobs_for
from fast_nvcc.errors import FastNvccError
from fast_nvcc.learn.pruning import keep_seconds

ROOT = Path(__file__).parent.parent


@pytest.mark.parametrize(("value", "on"), [("1", True), ("on", True), ("YES", True), (" true ", True),
                                           ("0", False), ("off", False), ("No", False), ("false", False)])  # fmt: skip
def test_a_switch_takes_the_usual_words(value, on):
    assert settings.switch({"FAST_NVCC_YIELD": value}, "FAST_NVCC_YIELD") is on


def test_an_unset_or_empty_switch_is_its_default():
    for name, default in settings.SWITCHES.items():
        assert settings.switch({}, name) is default
        assert settings.switch({name: ""}, name) is default


def test_readers_follow_the_word_not_its_spelling():
    # before, FAST_NVCC_POOL_SIZE=x meant the CPU count and KEEP_DAYS=abc meant 60 days
    assert jobs_for(Config(nvcc=None), env={"FAST_NVCC_JOBS": " 3 "}) == 3
    assert keep_seconds({"FAST_NVCC_KEEP_DAYS": "0.5"}) == 12 * 3600
    assert keep_seconds({"FAST_NVCC_KEEP_DAYS": "0"}) is None
    assert settings.stub_probe({"FAST_NVCC_STUB_PROBE": "off"}) == "off"
    assert settings.stub_probe({"FAST_NVCC_STUB_PROBE": "Idle"}) == "idle"
    assert settings.stub_probe({}) == "on"
    assert settings.cache_size({"FAST_NVCC_CACHE_SIZE": "2G"}) == 2 << 30
    assert settings.cache_size({"FAST_NVCC_CACHE_SIZE": "0"}) == 0


BAD = [("FAST_NVCC_YIELD", "of"), ("FAST_NVCC_DISABLE", "maybe"), ("FAST_NVCC_SPLIT_EARLY", "2"),
       ("FAST_NVCC_JOBS", "abc"), ("FAST_NVCC_JOBS", "0"), ("FAST_NVCC_POOL_SIZE", "-4"),
       ("FAST_NVCC_KEEP_DAYS", "abc"), ("FAST_NVCC_KEEP_DAYS", "-1"), ("FAST_NVCC_KEEP_DAYS", "nan"),
       ("FAST_NVCC_STUB_PROBE", "lazy"), ("FAST_NVCC_CACHE_SIZE", "big")]  # fmt: skip


@pytest.mark.parametrize(("name", "value"), BAD)
def test_check_names_the_variable_and_its_value(name, value):
    with pytest.raises(FastNvccError, match=f"^{name}={value!r}: use "):
        settings.check({name: value})


@pytest.mark.parametrize(("name", "value"), [BAD[0], BAD[3], BAD[6], BAD[10]])
def test_a_malformed_value_stops_the_compile_before_it_runs(tmp_path, name, value):
    source = tmp_path / "k.cu"
    source.write_text("__global__ void k() {}\n")
    # the nvcc named does not exist: the check comes before fast_nvcc looks for it
    proc = run_cli("--nvcc", str(tmp_path / "nvcc"), "--", "-c", str(source), "-o", str(tmp_path / "k.o"),
                   env={name: value})  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr == f"fast_nvcc: error: {name}={value!r}: {proc.stderr.split(': ', 3)[3]}"
    assert proc.stderr.count("\n") == 1 and proc.stdout == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k.cu"]


def test_every_variable_is_registered_and_documented():
    registered = {*settings.SWITCHES, *settings.COUNTS, *settings.OTHERS, *settings.AS_GIVEN,
                  *settings.CHECKED_WHERE_READ}  # fmt: skip
    options = (ROOT / "docs" / "options.md").read_text()
    table = options[options.index("## Environment"):options.index("Other variables fast_nvcc reads")]
    assert set(re.findall(r"FAST_NVCC_[A-Z_]+", table)) == registered


def test_no_reader_bypasses_the_checks():
    # An on/off or numeric variable read as a raw string would take a malformed value silently.
    checked = {*settings.SWITCHES, *settings.COUNTS, *settings.OTHERS}
    raw = re.compile(r"""(?:env|environ)(?:\.get\(|\[)\s*["'](FAST_NVCC_[A-Z_]+)["']""")
    # fast_nvcc/lean.py reads three before settings is imported (its import is a third of that
    # path's cpu); a value it does not take as plainly valid sends the compile to fast_nvcc's run,
    # whose check answers it (tests/test_lean.py: the malformed ones).
    lean = {("fast_nvcc/lean.py", name) for name in ("FAST_NVCC_LEAN", "FAST_NVCC_NICE", "FAST_NVCC_POOL_SIZE")}
    found = {(path.relative_to(ROOT).as_posix(), name)
             for path in (ROOT / "fast_nvcc").rglob("*.py") if path.name != "settings.py"
             for name in raw.findall(path.read_text()) if name in checked}  # fmt: skip
    assert not found - lean
