"""Split one line of nvcc's plan the way ``sh -c`` would, for the subset nvcc prints.

nvcc runs every plan line through ``sh -c`` with its own variables in the environment
(``"$CICC_PATH/cicc"``, ``-DFATBINFILE="\\"/tmp/x.fatbin.c\\""``, ``> a_stdout 2>a_stderr`` under
``-t``).  Running the words directly saves a shell per step and lets the scheduler see the real
argv.  Anything beyond quoting, ``$VAR`` expansion and plain redirections (command
substitution for ``-lib``'s ``ar``, pipes, lists) marks the line as needing the shell; its words
are still returned so the file references can be found.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import NamedTuple

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_OPERATORS = frozenset("|&;()<>")


class Redirect(NamedTuple):
    """A redirection of the line: ``fd`` to ``target`` (``>``, ``2>``; ``>>`` appends)."""

    fd: int
    target: str
    append: bool = False


class Words(NamedTuple):
    """One plan line split: its words, its redirections, and whether only ``sh -c`` can run it."""

    words: tuple[str, ...]
    redirects: tuple[Redirect, ...]
    needs_shell: bool


class _Scanner:
    def __init__(self, line: str, env: Mapping[str, str]) -> None:
        self.line = line
        self.env = env
        self.pos = 0
        self.needs_shell = False

    def peek(self, offset: int = 0) -> str:
        index = self.pos + offset
        return self.line[index] if index < len(self.line) else ""

    def expand(self, *, quoted: bool) -> str:
        """Read ``$NAME`` or ``${NAME}`` at pos (which is on the '$')."""
        self.pos += 1
        if self.peek() == "{":
            end = self.line.find("}", self.pos)
            name = self.line[self.pos + 1 : end] if end >= 0 else ""
            if end < 0 or not _NAME.fullmatch(name):
                self.needs_shell = True
                return "$"
            self.pos = end + 1
        else:
            match = _NAME.match(self.line, self.pos)
            if match is None:
                if self.peek() == "(":
                    self.needs_shell = True
                return "$"
            name = match.group()
            self.pos = match.end()
        value = self.env.get(name, "")
        if not quoted and any(c.isspace() for c in value):
            # An unquoted expansion would be split into fields by sh: let sh do it.
            self.needs_shell = True
        return value

    def double_quoted(self) -> str:
        out = []
        self.pos += 1
        while self.pos < len(self.line):
            c = self.line[self.pos]
            if c == '"':
                self.pos += 1
                return "".join(out)
            if c == "\\" and self.peek(1) in ('"', "\\", "$", "`", "\n"):
                out.append(self.peek(1))
                self.pos += 2
            elif c == "$":
                out.append(self.expand(quoted=True))
            else:
                if c == "`":
                    self.needs_shell = True
                out.append(c)
                self.pos += 1
        self.needs_shell = True  # unterminated quote: leave it to sh to complain
        return "".join(out)

    def word(self) -> str | None:
        """Read one word; None when the line is exhausted."""
        while self.pos < len(self.line) and self.line[self.pos].isspace():
            self.pos += 1
        if self.pos >= len(self.line):
            return None
        out: list[str] = []
        while self.pos < len(self.line):
            c = self.line[self.pos]
            if c.isspace() or c in _OPERATORS:
                break
            if c == "'":
                end = self.line.find("'", self.pos + 1)
                if end < 0:
                    self.needs_shell = True
                    end = len(self.line)
                out.append(self.line[self.pos + 1 : end])
                self.pos = end + 1
            elif c == '"':
                out.append(self.double_quoted())
            elif c == "\\":
                out.append(self.peek(1))
                self.pos += 2
            elif c == "$":
                out.append(self.expand(quoted=False))
            else:
                if c == "`":
                    self.needs_shell = True
                out.append(c)
                self.pos += 1
        return "".join(out)


def split_words(line: str, env: Mapping[str, str]) -> Words:
    """Split ``line`` into argv words and redirections, expanding variables from ``env``."""
    scanner = _Scanner(line, env)
    words: list[str] = []
    redirects: list[Redirect] = []
    while True:
        while scanner.peek().isspace():
            scanner.pos += 1
        c = scanner.peek()
        if not c:
            break
        if c in "<>":
            _read_redirect(scanner, redirects, fd=1 if c == ">" else 0)
        elif c in _OPERATORS:
            scanner.needs_shell = True
            scanner.pos += 1
        else:
            start = scanner.pos
            word = scanner.word() or ""
            raw = line[start : scanner.pos]
            if scanner.peek() in ("<", ">") and raw.isdigit():
                _read_redirect(scanner, redirects, fd=int(raw))
            else:
                words.append(word)
    return Words(tuple(words), tuple(redirects), scanner.needs_shell)


def _read_redirect(scanner: _Scanner, redirects: list[Redirect], *, fd: int) -> None:
    """At a '<' or '>': record ``fd>target`` (or ``>>``); anything fancier needs sh."""
    c = scanner.peek()
    scanner.pos += 1
    append = c == ">" and scanner.peek() == ">"
    if append:
        scanner.pos += 1
    if c == "<" or scanner.peek() == "&":
        # Input redirection and fd duplication (2>&1) never occur in nvcc's plans; keep sh.
        scanner.needs_shell = True
        if scanner.peek() == "&":
            scanner.pos += 1
            while scanner.peek().isdigit() or scanner.peek() == "-":
                scanner.pos += 1
            return
    target = scanner.word()
    if target is None:
        scanner.needs_shell = True
        return
    redirects.append(Redirect(fd, target, append))
