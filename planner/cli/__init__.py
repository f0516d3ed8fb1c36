"""The ``planner`` command line.

Exit codes: 0 success; 2 bad input (one line naming the field, the value and what is allowed);
3 infeasible (the strategy or problem does not fit, with the reason); 4 the time limit ran out
before any answer (neither a plan nor a proof that none exists); 1 an internal error (a bug: one
line; PLANNER_DEBUG=1 shows the traceback).

Commands import what they need when they run: ``catalog``, ``evaluate``, ``validate``,
``calibrate``, ``plot`` and ``--help`` never load OR-Tools (tests/test_startup.py guards it), and
matplotlib loads only inside ``plot``.

One module per command (catalog, evaluate, plan, min_hardware, sweep, plot, validate, calibrate:
its flags and its run), beside the flags several share (options), what every command prints
besides tables, exit codes included (output), --emit (emit), the rich tables (report,
catalog_report, accuracy_report) and CP-SAT's lean import (cpsat_import); this module builds the
parser, dispatches and sets up the console script's process.
"""

from __future__ import annotations

import argparse
import gc
import os
import re
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from planner.cli import calibrate, catalog, evaluate, min_hardware, plan, plot, sweep, validate
from planner.cli.output import EXIT_BAD_INPUT, EXIT_INTERNAL, degrade_to_encoding, print_error
from planner.errors import InputError

COMMANDS = {
    "catalog": catalog,
    "evaluate": evaluate,
    "plan": plan,
    "min-hardware": min_hardware,
    "sweep": sweep,
    "plot": plot,
    "validate": validate,
    "calibrate": calibrate,
}
"""Each command's module: its ``add_parser(commands)`` and ``run(args, console)``, in the
order of `planner --help`."""


NEGATIVE_NUMBER = re.compile(
    r"^-(\d+\.?\d*|\.\d+)(e[+-]?\d+)?$|^-(inf|infinity|nan)$", re.IGNORECASE
)
"""What argparse takes as a flag's value rather than an unknown option: a negative number in
any spelling float() reads (argparse's own pattern misses -1e5, -inf and -nan, so
``--train-tokens -inf`` said "expected one argument" instead of naming the allowed range)."""


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage error as one line, exit code 2, and reads a negative
    number (NEGATIVE_NUMBER) as a flag's value."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = NEGATIVE_NUMBER

    def error(self, message: str) -> None:  # type: ignore[override]
        raise InputError(f"{message} (see `{self.prog} --help`)")


def build_parser() -> argparse.ArgumentParser:
    from planner import __version__

    description = __doc__.splitlines()[0].replace("``", "") if __doc__ else None  # no RST
    parser = _Parser(prog="planner", description=description)
    parser.add_argument(
        "--version", action="version", version=f"planner {__version__}", help="print the version"
    )
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for command in COMMANDS.values():
        command.add_parser(commands)
    return parser


SOLVING_COMMANDS = frozenset({"plan", "min-hardware", "sweep"})
"""Commands that import OR-Tools' CP-SAT API."""


def main(argv: Sequence[str] | None = None, own_process: bool = False) -> int:
    """Run one command; its exit code. ``own_process``: the caller is the console script, so
    the solving commands import CP-SAT without pandas (planner.cli.cpsat_import)."""
    from pydantic import ValidationError

    degrade_to_encoding()  # an ASCII terminal gets "..." for "…", not a UnicodeEncodeError
    try:
        args = build_parser().parse_args(argv)
        if own_process and args.command in SOLVING_COMMANDS:
            from planner.cli.cpsat_import import import_cp_model_without_pandas

            import_cp_model_without_pandas()
        from planner.cli.layout import make_console  # after parsing: `--help` skips rich

        return COMMANDS[args.command].run(args, make_console())
    except InputError as error:
        print_error(f"planner: error: {error}")
        return EXIT_BAD_INPUT
    except ValidationError as error:
        from planner.errors import describe_validation_error

        print_error(f"planner: error: {describe_validation_error(error, 'input')}")
        return EXIT_BAD_INPUT
    except OSError as error:  # a file the user named cannot be read or written
        where = f"{error.filename}: " if error.filename else ""
        print_error(f"planner: error: {where}{error.strerror or error}")
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print_error("planner: interrupted")
        return 130
    except Exception as error:  # a bug: one line, the traceback only on request
        if os.environ.get("PLANNER_DEBUG"):
            raise
        print_error(
            f"planner: internal error: {type(error).__name__}: {error} (a bug in planner; "
            "PLANNER_DEBUG=1 shows the traceback)"
        )
        return EXIT_INTERNAL


YOUNG_GC_THRESHOLD = 10_000
"""Allocations between collections of the youngest generation in the console script (run)."""


def run() -> NoReturn:
    """The ``planner`` console script (and ``python -m planner``): main(), then exit.

    Before exiting, every object is moved out of the garbage collector's reach (gc.freeze), so
    the collections that the interpreter runs while tearing down its modules do not traverse
    pydantic's, rich's and numpy's tens of thousands of objects one last time: ~30 ms of a
    ~200 ms command (benchmarks/startup.py). Nothing is lost: objects are still freed by their
    reference counts, atexit handlers still run, and the process ends right after. main() itself
    does not do it, since tests and library users call it many times in one process.

    The youngest generation is collected every YOUNG_GC_THRESHOLD allocations rather than
    Python's 700: start-up imports allocate ~100,000 long-lived objects (pydantic's schemas,
    numpy, rich, OR-Tools), and each early collection re-traverses them (plan: ~15 ms).

    The process is the console script's own, so solving commands import CP-SAT without pandas
    (main's ``own_process``; planner.cli.cpsat_import)."""
    gc.set_threshold(YOUNG_GC_THRESHOLD, *gc.get_threshold()[1:])
    code = main(own_process=True)
    gc.freeze()
    sys.exit(code)


if __name__ == "__main__":
    run()
