"""Reading a launch script as a shell would: the words of a command line (quotes, escapes, line
continuations and comments as POSIX sh reads them) and the --flags among them with their values,
for the Megatron-LM reader (planner.launch.megatron)."""

from __future__ import annotations

import re

from planner.errors import InputError

_WORD = r"""(?:[^\s'"\\#]+|\\.|'[^']*'|"[^"\\]*(?:\\.[^"\\]*)*")+"""


_SCAN = re.compile(rf"\s*(?:\#[^\n]*|({_WORD}))?", re.DOTALL)
"""Blanks, then a comment (``#`` to the end of the line) or a word of unquoted characters,
backslash escapes and quoted strings: matched in time linear in the text (shlex builds a word
one character at a time, quadratic in its length)."""


_QUOTED = re.compile(r'''\\(.)|'([^']*)'|"([^"\\]*(?:\\.[^"\\]*)*)"''', re.DOTALL)


_DOUBLE_QUOTED_ESCAPE = re.compile(r'\\([\\"])')


_QUOTING = re.compile(r"""['"\\]""")


def words(text: str) -> list[str]:
    """The words of a command line as ``shlex.split(text, comments=True)`` gives them (POSIX
    quoting: within double quotes a backslash escapes only ``"`` and ``\\``; an unquoted ``#``
    ends the word and comments out the rest of the line), a backslash-newline joining lines.
    What the scan cannot take (an unclosed quote, a trailing backslash) is left over by it."""
    text = text.replace("\\\n", " ")
    if _SCAN.sub("", text).strip():
        raise InputError(
            "megatron arguments: cannot split into words (an unclosed quote or a trailing "
            "backslash)"
        )
    return [_QUOTED.sub(_unquote, word) if _QUOTING.search(word) else word
            for word in _SCAN.findall(text) if word]  # fmt: skip


def _unquote(piece: re.Match[str]) -> str:
    escaped, single, double = piece.groups()
    if escaped is not None:
        return escaped
    if single is not None:
        return single
    return _DOUBLE_QUOTED_ESCAPE.sub(r"\1", double)


def flags(tokens: list[str]) -> dict[str, list[str]]:
    """``--flag value...`` and ``--flag=value`` pairs; the last occurrence of a flag wins."""
    flags: dict[str, list[str]] = {}
    current: list[str] | None = None
    for token in tokens:
        if token.startswith("--"):
            name, eq, value = token.partition("=")
            current = flags[name] = [value] if eq else []
        elif current is not None:
            current.append(token)
    return flags
