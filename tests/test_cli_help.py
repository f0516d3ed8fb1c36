"""`planner --help` and `--version` (issue 37): every option and argument of every command says
what it is, and the description is plain text (no reStructuredText markup)."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

import pytest

from planner import __version__
from planner.cli import build_parser, main


def _actions(
    parser: argparse.ArgumentParser, path: str = "planner"
) -> Iterator[tuple[str, argparse.Action]]:
    """Every (command path, action) of ``parser`` and its subcommands, help actions aside."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _actions(sub, f"{path} {name}")
        elif not isinstance(action, argparse._HelpAction):
            yield path, action


def test_every_option_has_help() -> None:
    missing = [
        f"{path} {'/'.join(action.option_strings) or action.dest}"
        for path, action in _actions(build_parser())
        if not action.help
    ]
    assert not missing, missing


def test_help_has_no_markup(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "``" not in out and "The planner command line." in out


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"planner {__version__}"
