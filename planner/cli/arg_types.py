"""argparse value types for the ranges of planner.specs.limits: whole numbers, numbers, offload
fractions in eighths and pipeline stage layouts (``5,6,...,6,5``, ``7,8x14,7`` or a Megatron-Core
layout string, expanded against --pp by ``expand_stage_layers``)."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from planner.errors import InputError
from planner.specs import limits as lim
from planner.specs.layouts import parse_megatron_layout
from planner.specs.quantities import OFFLOAD_STEPS, parse_eighths


def stage_layers(text: str) -> tuple[str, ...]:
    """An argparse type: comma-separated whole numbers, one '...' allowed (expanded against
    --pp in strategy_from), or a Megatron-Core layout string with E, t and L (read against
    --pp in strategy_from: planner.specs.layouts)."""
    if "E" in text or "t" in text:
        return ("layout", text)
    parts = tuple(part.strip() for part in text.split(","))
    count = whole(0, lim.MAX_LAYERS)
    if (
        parts.count("...") > 1
        or parts[0] == "..."
        or not all(part == "..." or _run(part) for part in parts)
    ):
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected whole numbers separated by commas, e.g. 5,6,...,6,5 or "
            "7,8x14,7 (8 on 14 stages), or a Megatron layout such as Et|(tt|)*6,tL"
        )
    for part in parts:
        if part != "...":
            blocks, _, times = part.partition("x")
            count(blocks)
            whole(1, lim.MAX_LAYERS)(times or "1")
    return parts


def _run(part: str) -> bool:
    """``8`` or ``8x14`` (8 blocks on each of 14 stages)."""
    blocks, _, times = part.partition("x")
    return blocks.isdigit() and (times.isdigit() or not _)


def expand_stage_layers(parts: tuple[str, ...] | None, pp: int) -> tuple[int, ...] | None:
    """5,6,...,6,5 with pp = 12 → (5, 6 × 10, 5): the entry before '...' fills the gap."""
    if parts is None:
        return None
    if parts[0] == "layout":
        return parse_megatron_layout(parts[1], pp)
    if "..." not in parts:
        return tuple(_runs(parts))
    cut = parts.index("...")
    head = _runs(parts[:cut])
    tail = _runs(parts[cut + 1 :])
    fill = pp - len(head) - len(tail)
    if fill < 0:
        raise InputError(
            f"--stage-layers {','.join(parts)}: {len(head) + len(tail)} stages given, --pp {pp}"
        )
    return tuple(head + [head[-1]] * fill + tail)


def _runs(parts: tuple[str, ...]) -> list[int]:
    """``7,8x3,7`` → [7, 8, 8, 8, 7]."""
    blocks: list[int] = []
    for part in parts:
        count, _, times = part.partition("x")
        blocks += [int(count)] * int(times or 1)
    return blocks


def whole(low: int, high: int) -> Callable[[str], int]:
    """An argparse type: a whole number in [low, high] (planner.specs.limits states the ranges)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is outside the allowed range {low}..{high}")
        return value

    return parse


def eighths(text: str) -> float:
    """An argparse type: an offload fraction, a multiple of 1/8 in (0, 1], as ``0.375`` or
    ``3/8``."""
    try:
        return parse_eighths(text) / OFFLOAD_STEPS
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def number(low: float, high: float, low_open: bool = True) -> Callable[[str], float]:
    """An argparse type: a finite number in (low, high] ([low, high] without ``low_open``)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        try:
            lim.check_range("value", value, low, high, low_open)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error).removeprefix("value = ")) from None
        return value

    return parse


fraction = number(0, 1)
"""An argparse type: a number in (0, 1]."""
