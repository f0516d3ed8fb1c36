"""The multi-trillion example: its studies load (names, axes, rules valid), and its
assumption-by-assumption comparison switches every difference between the poster's assumptions
and planner's, so the path it measures ends exactly at planner's."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

import hardware_catalog
from planner.studies.study import load_study, scenarios

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "multi_trillion"
IGNORED = {"name", "description", "aliases", "sources", "calibrated_gpus"}
"""Fields that name or document a spec and never enter the step time (calibrated_gpus: what a
profile was fitted on, which widens its range only)."""


@pytest.mark.parametrize("path", sorted(EXAMPLE.glob("**/*.yaml")), ids=lambda p: p.name)
def test_every_study_of_the_example_loads(path: Path) -> None:
    study = load_study(path)
    assert list(scenarios(study))


def _assumptions_module():
    spec = importlib.util.spec_from_file_location("mt_assumptions", EXAMPLE / "assumptions.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


def _cost_fields(data: object) -> object:
    """A spec's dump without its names, descriptions and sources (also inside tiers)."""
    if isinstance(data, dict):
        return {k: _cost_fields(v) for k, v in data.items() if k not in IGNORED}
    if isinstance(data, list | tuple):
        return [_cost_fields(v) for v in data]
    return data


def test_the_assumptions_cover_every_difference_between_the_two_sets(tmp_path: Path) -> None:
    example = _assumptions_module()
    system, stack_path = example._mixed(list(example.ASSUMPTIONS), tmp_path)
    stack = hardware_catalog.load_stack(stack_path)
    planner_system = hardware_catalog.load_system(example.PLANNER_SYSTEM)
    planner_stack = hardware_catalog.load_stack(example.PLANNER_STACK)
    assert _cost_fields(system.model_dump()) == _cost_fields(planner_system.model_dump())
    assert _cost_fields(stack.model_dump()) == _cost_fields(planner_stack.model_dump())
    # and none of them is a no-op: each switches something that differs
    poster_system = hardware_catalog.load_system(example.POSTER_SYSTEM)
    poster_stack = hardware_catalog.load_stack(example.POSTER_STACK)
    for assumption in example.ASSUMPTIONS:
        one, one_stack_path = example._mixed([assumption], tmp_path)
        one_stack = hardware_catalog.load_stack(one_stack_path)
        assert _cost_fields(one.model_dump()) != _cost_fields(poster_system.model_dump()) or (
            _cost_fields(one_stack.model_dump()) != _cost_fields(poster_stack.model_dump())
        ), assumption.label
