"""`planner plot`: draw a sweep's results (matplotlib loads only here)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from planner.cli.arg_types import fraction, number
from planner.cli.output import EXIT_OK, print_error
from planner.specs import limits as lim
from planner.specs.quantities import PLOT_KINDS

if TYPE_CHECKING:
    from rich.console import Console


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The `plot` command's parser, under ``commands``."""
    plot_cmd = commands.add_parser("plot", help="draw a sweep's results (needs .[plot])")
    plot_cmd.add_argument("results", help="a sweep's --out folder")
    plot_cmd.add_argument("--kind", required=True, choices=list(PLOT_KINDS), help="what to draw")
    plot_cmd.add_argument("--out", help="image file (.png or .svg); default: results/KIND.png")
    plot_cmd.add_argument(
        "--mfu-line",
        type=fraction,
        action="append",
        default=[],
        metavar="F",
        help="mfu-vs-gpus, mfu-vs-model, offload-bandwidth (its MFU panels): a reference "
        "line at MFU F (0-1), e.g. 0.75; repeatable",
    )
    plot_cmd.add_argument(
        "--gib-line",
        type=number(0, lim.MAX_CAPACITY_GIB),
        action="append",
        default=[],
        metavar="GIB",
        help="least-hardware of HBM or offload capacity: a reference line at GIB GiB per GPU, "
        "e.g. 120; repeatable",
    )
    plot_cmd.add_argument(
        "--gbps-line",
        type=number(0, lim.MAX_BANDWIDTH_GBPS),
        action="append",
        default=[],
        metavar="GBPS",
        help="offload-bandwidth: a reference line at this bandwidth, e.g. 100; repeatable",
    )


def run(args: argparse.Namespace, console: Console) -> int:
    """`planner plot` with the parsed ``args``; its exit code."""
    from pathlib import Path

    from planner.errors import InputError
    from planner.studies.plots import plot

    if args.out is not None and not args.out.strip():
        raise InputError(
            f"--out {args.out!r}: an empty file name; name an image file (.png or .svg), or "
            "leave --out out for RESULTS/KIND.png"
        )
    path = plot(
        Path(args.results),
        args.kind,
        Path(args.out) if args.out is not None else None,
        mfu_lines=tuple(args.mfu_line),
        gbps_lines=tuple(args.gbps_line),
        gib_lines=tuple(args.gib_line),
        warn=lambda line: print_error(f"planner: warning: {line}"),
    )
    console.print(f"wrote {path}")
    return EXIT_OK
