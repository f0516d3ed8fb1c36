"""Tables that fit the width they get, on a terminal or piped (issue 37).

The console (make_console): on a terminal, its width (or COLUMNS); piped or redirected, where
rich would assume 80 columns, COLUMNS if set, else PIPED_WIDTH, so that a table keeps one row
per line and a log line is not wrapped.

A table (print_table): its numeric columns (those built with ``no_wrap=True``) are never
wrapped, truncated or dropped; its text columns (strategies, names, notes) wrap at spaces and
fold only words longer than WORD_CAP. When the numeric columns, the text columns at their
floor (a column's ``min_width``, else its longest word) and the borders fit the width, the
table is laid out here column by column (rich's own layout shrinks every column evenly as a
last resort, numbers included, and cuts them with "…"); when they do not, each row is printed
as a block of ``header  value`` lines under the row's first cell (the stacked layout), which
fits any width a number fits in.
"""

from __future__ import annotations

import os
import sys

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

PIPED_WIDTH = 240
"""Columns of a piped or redirected page without COLUMNS: wide enough for every table at its
natural width (the widest, validate's, takes ~150), so a file or a grep gets one row a line."""

TEXT_FLOOR = 10
"""The narrowest a text column is squeezed to (less where its longest cell is shorter) before
the table is stacked instead."""

WORD_CAP = 24
"""A text column is not squeezed below its longest word (``interleave=10``, a run's name), up
to this many characters: a word is broken across lines only where it is longer."""


def make_console() -> Console:
    """The console for stdout: a terminal's own width; piped or redirected (rich sees no
    terminal), COLUMNS if set, else PIPED_WIDTH."""
    if sys.stdout.isatty() or os.environ.get("COLUMNS", "").isdigit():
        return Console()
    return Console(width=PIPED_WIDTH)


def _text(cell: object) -> Text:
    """A cell as rich Text (a str is rich markup, as Table renders it)."""
    if isinstance(cell, Text):
        return cell
    return Text.from_markup(str(cell)) if isinstance(cell, str) else Text(str(cell))


def _longest_line(cell: object) -> int:
    return max((len(line) for line in _text(cell).plain.splitlines()), default=0)


def _longest_word(cell: object) -> int:
    return max((len(word) for word in _text(cell).plain.split()), default=0)


def _padding(table: Table) -> int:
    """Horizontal padding of one cell (left + right)."""
    return table.padding[1] + table.padding[3]


def _borders(table: Table) -> int:
    """Width of a table's vertical rules: one between columns, and the two edges."""
    if table.box is None:
        return 0
    return len(table.columns) - 1 + (2 if table.show_edge else 0)


def _column_range(table: Table, index: int) -> tuple[int, int]:
    """(floor, natural) width of a column's content, without padding. A numeric (no_wrap)
    column's floor is its widest cell and its header's longest word (the header may wrap
    at spaces); a text column's is its min_width, else its longest word up to WORD_CAP, and at
    least the shorter of TEXT_FLOOR and its widest cell."""
    column = table.columns[index]
    cells = list(column.cells)
    headers = [column.header] if table.show_header else []
    natural = max((_longest_line(c) for c in [*headers, *cells]), default=1)
    if column.no_wrap:
        floor = max((_longest_line(c) for c in cells), default=0)
        floor = max([floor, *(_longest_word(h) for h in headers)])
    else:
        longest = max((_longest_word(c) for c in [*headers, *cells]), default=0)
        floor = column.min_width or max(min(TEXT_FLOOR, natural), min(longest, WORD_CAP))
    return max(floor, 1), max(natural, floor, 1)


def _fit_widths(table: Table, width: int) -> list[int] | None:
    """Content widths of the columns that fit ``width``: numeric columns at their floor or
    more, text columns water-filled (the widest shrunk first); None where even the floors do
    not fit."""
    ranges = [_column_range(table, i) for i in range(len(table.columns))]
    spare = width - _borders(table) - _padding(table) * len(ranges)
    if sum(natural for _, natural in ranges) <= spare:
        return [natural for _, natural in ranges]
    if sum(floor for floor, _ in ranges) > spare:
        return None
    numeric = [c.no_wrap for c in table.columns]
    fixed = sum(floor for (floor, _), n in zip(ranges, numeric, strict=True) if n)
    text = [r for r, n in zip(ranges, numeric, strict=True) if not n]

    def used(cap: int) -> int:
        return sum(max(floor, min(natural, cap)) for floor, natural in text)

    cap = max(natural for _, natural in text)
    while cap > 0 and fixed + used(cap) > spare:
        cap -= 1
    return [
        floor if n else max(floor, min(natural, cap))
        for (floor, natural), n in zip(ranges, numeric, strict=True)
    ]


def print_table(console: Console, table: Table) -> None:
    """``table`` at the console's width: laid out column by column where its numbers fit,
    else stacked (module docstring)."""
    widths = _fit_widths(table, console.width)
    if widths is None:
        console.print(stacked(table))
        return
    for column, width in zip(table.columns, widths, strict=True):
        column.width = width
        column.overflow = "fold"
        if isinstance(column.header, str) and column.header:  # a header may wrap at spaces
            column.header = Text.from_markup(column.header, overflow="fold")
            column.header.no_wrap = False
    console.print(table)


def stacked(table: Table) -> Group:
    """Each row of ``table`` as a block: its first cell in bold (after the first header), then
    one ``header  value`` line per other column, indented (a header's line breaks become
    spaces); a blank line between rows."""
    columns = table.columns
    cells = [list(column.cells) for column in columns]
    rows = len(cells[0]) if cells else 0
    headers = [" ".join(_text(c.header).plain.split()) for c in columns]
    key_width = max((len(h) for h in headers[1:]), default=0)
    parts: list[Text] = []
    if table.title:
        parts.append(Text.from_markup(str(table.title), style="italic"))
    for row in range(rows):
        if row:
            parts.append(Text(""))
        first = _text(cells[0][row]).copy()
        first.stylize("bold")
        parts.append(Text.assemble(Text(headers[0] + " ", style="dim"), first))
        for index in range(1, len(columns)):
            key = Text(f"  {headers[index]:<{key_width}}  ", style="dim")
            parts.append(Text.assemble(key, _text(cells[index][row])))
    return Group(*parts)
