import pytest

from fast_nvcc.plan.depfile import collect_dependencies, format_depfile, iter_included
from fast_nvcc.plan.nvcc_args import DependencyOptions

DEVICE = b"""# 0 "k.cu"
# 0 "<built-in>"
# 0 "<command-line>"
# 1 "/usr/include/stdc-predef.h" 1 3 4
# 0 "<command-line>" 2
# 1 "k.cu"
# 1 "dir with space/a.h" 1
int a;
# 2 "k.cu" 2
# 1 "/opt/sys/s.h" 1 3
# 1 "dev.h" 1
# 1 "we$ird#h.h" 1
# 1 "quo\\"te\\\\x\\101.h" 1
#pragma once
"""
HOST = b"""# 0 "k.cu"
# 1 "/usr/include/stdc-predef.h" 1 3 4
# 1 "dir with space/a.h" 1
# 1 "host.h" 1
"""


def options(target=None, phony=False, nonsystem=False, output_dir=None):
    return DependencyOptions(target=target, output_dir=output_dir, phony_targets=phony, nonsystem=nonsystem)


def test_line_markers_are_unescaped_and_flagged():
    found = list(iter_included(DEVICE))
    assert ("/usr/include/stdc-predef.h", True) in found
    assert ("/opt/sys/s.h", True) in found
    assert ('quo"te\\xA.h', False) in found
    assert ("dir with space/a.h", False) in found


def test_union_in_order_of_first_appearance():
    deps = collect_dependencies([DEVICE, HOST], nonsystem=False)
    assert deps == [
        "k.cu", "/usr/include/stdc-predef.h", "dir with space/a.h", "/opt/sys/s.h",
        "dev.h", "we$ird#h.h", 'quo"te\\xA.h', "host.h",
    ]  # fmt: skip


def test_markers_that_enter_no_file_are_no_dependencies():
    """gcc -E -g names the working directory in the second marker; #line renames lines. Neither
    enters a file (flag 1), and nvcc lists neither; a file entered later counts from there."""
    data = b"""# 0 "k.cu"
# 1 "/build/dir//"
# 0 "<built-in>"
# 1 "k.cu"
# 5 "other.h"
# 7 "a.h"
# 1 "a.h" 1
# 3 "k.cu" 2
"""
    assert list(iter_included(data)) == [("k.cu", False), ("a.h", False)]
    assert collect_dependencies([data, HOST], nonsystem=False)[:3] == ["k.cu", "a.h", "/usr/include/stdc-predef.h"]


def test_nonsystem_leaves_out_flagged_headers():
    deps = collect_dependencies([DEVICE, HOST], nonsystem=True)
    assert "/usr/include/stdc-predef.h" not in deps and "/opt/sys/s.h" not in deps
    assert deps[0] == "k.cu" and "host.h" in deps


def test_format_matches_nvcc_layout():
    text = format_depfile(["k.cu", "a b.h", "c.h"], options=options(target="out/k.o"))
    assert text == "out/k.o : k.cu \\\n    a\\ b.h \\\n    c.h\n"


def test_phony_targets_follow_the_rule():
    text = format_depfile(["k.cu", "a.h", "b.h"], options=options(phony=True))
    assert text == "k.o : k.cu \\\n    a.h \\\n    b.h\n\na.h:\n\nb.h:\n"


@pytest.mark.parametrize(
    ("opts", "source", "target"),
    [
        (options(), "dir/k.cu", "k.o"),
        (options(output_dir="out"), "/abs/k.x.cu", "out/k.x.o"),
        (options(output_dir="out/"), "k.cu", "out//k.o"),
        (options(target="a b$c"), "k.cu", "a b$c"),
    ],
)
def test_default_target(opts, source, target):
    assert opts.target_for(source) == target


def test_empty():
    assert format_depfile([], options=options()) == ""
