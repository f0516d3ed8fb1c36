"""`planner catalog`: list or show the built-in systems, models, training stacks, reliability
profiles and precision recipes."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from planner.cli.output import EXIT_OK, print_json
from planner.errors import InputError

if TYPE_CHECKING:
    from rich.console import Console


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The `catalog` command's parser, under ``commands``."""
    catalog = commands.add_parser(
        "catalog",
        help="list or show built-in systems, models, stacks, reliability profiles and precisions",
    )
    catalog.add_argument(
        "what",
        choices=["systems", "models", "stacks", "reliability", "precisions", "show"],
        help="list the systems, models, training stacks, reliability profiles or precision "
        "recipes, or show one entry's every field",
    )
    catalog.add_argument(
        "name",
        nargs="?",
        help="with show: a system, model, stack, reliability profile or precision recipe",
    )
    catalog.add_argument("--json", action="store_true", help="print JSON instead of tables")


def run(args: argparse.Namespace, console: Console) -> int:
    """`planner catalog` with the parsed ``args``; its exit code."""
    import hardware_catalog
    from planner.cli import catalog_report, report
    from planner.cli.layout import print_table

    catalog = hardware_catalog
    listings = {
        "systems": (catalog.system_names, catalog.load_system, catalog_report.systems_table),
        "models": (catalog.model_names, catalog.load_model, catalog_report.models_table),
        "stacks": (catalog.stack_names, catalog.load_stack, catalog_report.stacks_table),
        "reliability": (
            catalog.reliability_names,
            catalog.load_reliability,
            catalog_report.reliability_table,
        ),
        "precisions": (
            catalog.precision_names,
            catalog.load_precision,
            catalog_report.precisions_table,
        ),
    }
    if args.what in listings:
        names, load, table = listings[args.what]
        specs = [load(name) for name in names()]
        if args.json:
            print_json([_catalog_json(spec) for spec in specs])
        else:
            print_table(console, table(specs))
        return EXIT_OK
    if not args.name:
        raise InputError("catalog show needs a name, e.g. `planner catalog show dgx-h100`")
    spec = _find_any(args.name)
    data = spec.model_dump(mode="json")
    if args.json:
        print_json(data)
        return EXIT_OK
    title = f"{spec.name}: {spec.description}" if spec.description else spec.name
    catalog_report.print_spec(console, title, data, spec.sources)
    if hasattr(spec, "params"):
        console.print(f"parameters: {report.format_params(spec.params)} ({spec.params:,})")
        if spec.is_moe:
            active = spec.active_params
            console.print(f"active per token: {report.format_params(active)} ({active:,})")
    if spec.aliases:
        console.print(f"aliases: {', '.join(spec.aliases)}")
    return EXIT_OK


def _catalog_json(spec) -> dict:
    """A catalog entry as JSON; a model also gives its parameter counts (total, and active per
    token: the same for a dense model)."""
    data = spec.model_dump(mode="json")
    if not hasattr(spec, "params"):
        return data
    return {**data, "params": spec.params, "active_params": spec.active_params}


def _find_any(name: str):
    """A system, model, stack or reliability profile by name; the error names the four
    catalogs."""
    import hardware_catalog

    try:
        return hardware_catalog.load_system(name)
    except InputError as system_error:
        loaders = (
            hardware_catalog.load_model,
            hardware_catalog.load_stack,
            hardware_catalog.load_reliability,
            hardware_catalog.load_precision,
        )
        for load in loaders:
            try:
                return load(name)
            except InputError:
                pass
        raise InputError(
            str(system_error).replace(
                "system", "system, model, stack, reliability profile or precision", 1
            )
        ) from None
