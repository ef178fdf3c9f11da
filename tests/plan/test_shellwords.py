import pytest

from fast_nvcc.plan.shellwords import Redirect, split_words

ENV = {"CICC_PATH": "/cuda/nvvm/bin", "SPACED": "a b", "EMPTY": ""}


@pytest.mark.parametrize(
    ("line", "words", "redirects", "needs_shell"),
    [
        ('"$CICC_PATH/cicc" -arch compute_80', ("/cuda/nvvm/bin/cicc", "-arch", "compute_80"), (), False),
        ("${CICC_PATH}/cicc", ("/cuda/nvvm/bin/cicc",), (), False),
        ('gcc "-I/a b/include"  -o "x.o" ', ("gcc", "-I/a b/include", "-o", "x.o"), (), False),
        # -dlink's host compile quotes the file name inside a macro definition.
        (
            'gcc -DFATBINFILE="\\"/tmp/t.fatbin.c\\"" -c',
            ("gcc", '-DFATBINFILE="/tmp/t.fatbin.c"', "-c"),
            (),
            False,
        ),
        ("echo 'single $CICC_PATH'", ("echo", "single $CICC_PATH"), (), False),
        ("a\\ b c", ("a b", "c"), (), False),
        # nvcc -t redirects every command's output to temp files.
        (
            "ptxas x.ptx > /tmp/o_stdout 2>/tmp/o_stderr",
            ("ptxas", "x.ptx"),
            (Redirect(1, "/tmp/o_stdout"), Redirect(2, "/tmp/o_stderr")),
            False,
        ),
        ("cmd >> log", ("cmd",), (Redirect(1, "log", append=True),), False),
        ("cmd 2> err", ("cmd",), (Redirect(2, "err"),), False),
        ("cmd a2>x", ("cmd", "a2"), (Redirect(1, "x"),), False),
        # -lib's archiver comes from a command substitution: only sh can run that.
        ('"`gcc -print-prog-name=ar`" cr "lib.a" "a.o"', ("`gcc -print-prog-name=ar`", "cr", "lib.a", "a.o"), (), True),
        ("echo $SPACED", ("echo", "a b"), (), True),
        ("echo $EMPTY x", ("echo", "", "x"), (), False),
        ("a | b", ("a", "b"), (), True),
        ("a && b", ("a", "b"), (), True),
        ("a 2>&1", ("a",), (), True),
        ('echo "unterminated', ("echo", "unterminated"), (), True),
        ("echo $(date)", ("echo", "$", "date"), (), True),
    ],
)
def test_split_words(line, words, redirects, needs_shell):
    result = split_words(line, ENV)
    assert result.words == words
    assert result.redirects == redirects
    assert result.needs_shell == needs_shell
