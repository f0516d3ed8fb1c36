"""Shared fixtures: small hand-made specs whose numbers are easy to check by hand."""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

from planner.cost.context import CostContext
from planner.specs import JobSpec, ModelSpec, SystemSpec

# CI runs the property tests on a fixed example sequence (reproducible failures); local runs
# draw fresh examples each time.
settings.register_profile("ci", derandomize=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


def gpt_model(**overrides: object) -> ModelSpec:
    """A GPT-shaped model (MHA, GeLU, f = 4h, dropout): Korthikanti's and Narayanan's setting."""
    fields = dict(
        name="gpt-test", hidden=1024, layers=8, heads=16, ffn_hidden=4096, vocab=51200, seq_len=2048
    )
    fields.update(overrides)
    return ModelSpec(**fields)


def simple_system(**overrides: object) -> SystemSpec:
    """An H100-like node with an offload tier; flat matmul efficiency unless overridden."""
    fields: dict[str, object] = dict(
        name="test-system",
        accelerator=dict(
            name="test-gpu",
            peak_tflops={"bf16": 1000.0, "fp8": 2000.0},
            matmul_efficiency=[dict(gflop=1.0, efficiency=0.5), dict(gflop=1000.0, efficiency=0.8)],
        ),
        memory_tiers=[
            dict(name="HBM", capacity_gib=80, bandwidth_gbps=3000, efficiency=0.9),
            dict(name="offload", capacity_gib=512, bandwidth_gbps=100),
        ],
        network_tiers=[
            dict(name="nvlink", domain_gpus=8, bandwidth_gbps=450, latency_us=3, efficiency=0.8),
            dict(name="ib", bandwidth_gbps=50, latency_us=5, efficiency=0.8),
        ],
    )
    fields.update(overrides)
    return SystemSpec.model_validate(fields)


def calculon_tables(network_tiers: int) -> dict[str, object]:
    """The poster system's Calculon tables (hardware_catalog/systems/h100-offload-512g-poster
    .yaml) for a system of ``network_tiers`` network tiers (the first and the last tier's
    processor_usage and all-reduce offset), for tests under the Calculon arithmetic."""
    import hardware_catalog

    tables = hardware_catalog.load_system("h100-offload-512g-poster").calculon.model_dump()
    for key in ("processor_usage", "all_reduce_offset"):
        tables[key] = tuple(tables[key][-network_tiers:] if network_tiers == 1 else tables[key])
    return tables


@pytest.fixture
def ctx() -> CostContext:
    return CostContext(
        gpt_model(), simple_system(), JobSpec(global_batch=64, attention="materialized")
    )
