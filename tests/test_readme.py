"""The README's examples stay true (issue 37): each ``$ planner ...`` command shown in a code
block with its output is run, and every line of output it shows must appear in what the
command prints now.

How a shown line is matched: table borders and runs of spaces are ignored (the README may be
laid out at another width); ``...`` stands for text the README leaves out; a timing ("in
0.35 s", "took 2.3 s") matches any number, since it depends on the machine (the README states
the machine its timings were measured on); every other number and word must match exactly. A
line that starts with ``...`` is the README's note of what it left out. A command marked
"(the text above, saved)" reads the previous command's emitted launch configuration from the
file it names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from planner.cli import main

ROOT = Path(__file__).resolve().parents[1]
BORDERS = re.compile(r"[│┃┏┓┗┛┡┩└┘┌┐━─┳┻╇┼╋┬┴]")
TIMING = re.compile(r"\b(in|took)\\ \d+(?:\\\.\d+)?\\ s\b")
SAVED = "(the text above, saved)"


@dataclass
class Example:
    command: str
    shown: list[str]
    line: int


def examples() -> list[Example]:
    """The ``$ planner`` commands of README.md's code blocks, each with the lines shown under
    it (up to the next command or the block's end)."""
    found: list[Example] = []
    in_block, current = False, None
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    index = 0
    while index < len(lines):
        line = lines[index]
        if line.startswith("```"):
            in_block, current = not in_block, None
        elif in_block and line.startswith("$ planner "):
            command, start = line[2:], index + 1
            while command.rstrip().endswith("\\"):
                index += 1
                command = command.rstrip()[:-1] + " " + lines[index].strip()
            current = Example(" ".join(command.split()), [], start)
            found.append(current)
        elif in_block and current is not None:
            current.shown.append(line)
        index += 1
    return found


def _normal(text: str) -> str:
    return " ".join(BORDERS.sub(" ", text).split())


def pattern(shown: str) -> re.Pattern[str]:
    """A regular expression for a shown line: spaces and borders loose, ``...`` any text,
    timings any number."""
    parts = [re.escape(part) for part in _normal(shown).split("...")]
    body = ".*".join(TIMING.sub(lambda m: rf"{m.group(1)}\ [\d.]+\ s", part) for part in parts)
    return re.compile(body.replace(r"\ ", r"\s*"))


def _launch_text(output: str) -> str:
    """The launch configuration a plan --emit printed (after its heading)."""
    return output.split("launch configuration (", 1)[1].split("\n", 1)[1]


@pytest.mark.parametrize("example", examples(), ids=lambda e: f"README.md:{e.line}")
def test_readme_example(
    example: Example,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)  # piped: the wide page, a row a line
    monkeypatch.chdir(ROOT)
    command = example.command
    if SAVED in command:  # the previous example's launch configuration, saved to a file
        command = command.replace(SAVED, "").strip()
        previous = examples()[examples().index(example) - 1]
        main(previous.command.split()[1:])
        saved = tmp_path / command.split()[4]
        saved.write_text(_launch_text(capsys.readouterr().out), encoding="utf-8")
        monkeypatch.chdir(tmp_path)  # the file by the name the README gives it
    main(command.split()[1:])
    captured = capsys.readouterr()
    printed = [_normal(line) for line in (captured.out + captured.err).splitlines()]
    missing = [
        shown
        for shown in example.shown
        if shown.strip()
        and not shown.strip().startswith("...")
        and not any(pattern(shown).search(line) for line in printed)
    ]
    assert not missing, "\n".join(["README lines not printed:", *missing, "printed:", *printed])


def test_readme_has_examples() -> None:
    """The parser finds the README's shown examples (a change of format would skip them)."""
    assert len(examples()) >= 5
    assert all(example.shown for example in examples())
