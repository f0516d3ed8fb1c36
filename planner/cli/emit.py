"""--emit, shared by evaluate and plan: the flag, and the strategy written as a framework's
launch configuration (planner.launch loads only when asked for)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from planner.specs.quantities import LAUNCH_FORMATS

if TYPE_CHECKING:
    from planner.launch import LaunchConfig
    from planner.specs import JobSpec, Strategy


def add_emit_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--emit",
        choices=list(LAUNCH_FORMATS),
        help="also print the strategy as this framework's launch configuration",
    )


def emit(fmt: str, model, system, job: JobSpec, strategy: Strategy) -> LaunchConfig:
    """The launch configuration of ``--emit`` (planner.launch loads only when asked for)."""
    from planner import launch

    return launch.emit(fmt, model, system, job, strategy)


def launch_payload(config: LaunchConfig) -> dict[str, object]:
    return {"format": config.format, "text": config.text, "notes": config.notes}
