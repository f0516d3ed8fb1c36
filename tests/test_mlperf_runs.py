"""The MLPerf Training dataset (hardware_catalog/calibration/mlperf_runs.yaml) loads, and every
run in it resolves: its model and system exist, its strategy passes the planner's rules, and the
cost model predicts a finite step time. Not an accuracy check: what the predictions are against
the measured steps is `planner validate --dataset` (issue 34 item 8)."""

from __future__ import annotations

import math

import pytest

import hardware_catalog
from planner.accuracy.validation import load_dataset, predict_run, resolve, source_of

DATASET = hardware_catalog.CATALOG / "calibration" / "mlperf_runs.yaml"


@pytest.fixture(scope="module")
def dataset():
    return load_dataset(DATASET)


def test_every_run_resolves_and_predicts(dataset) -> None:
    for run in dataset.runs:
        model, system = resolve(run)
        assert run.strategy.gpus == run.gpus, run.id
        assert run.job.seq_len_for(model) in (2048, 8192), run.id
        predicted = predict_run(run, {}).predicted_step_time_s
        assert math.isfinite(predicted) and predicted > 0, run.id


def test_ids_are_unique_and_sources_named(dataset) -> None:
    ids = [run.id for run in dataset.runs]
    assert len(ids) == len(set(ids))
    assert all(source_of(run).startswith("mlperf-training-v") for run in dataset.runs)
    assert len({source_of(run) for run in dataset.runs}) >= 2  # cross-validation by source


def test_the_405b_runs_state_megatrons_embedding_and_loss_slots(dataset) -> None:
    """Every Llama 3.1 405B submission splits 126 blocks plus the embedding and the loss slots
    over pp·v = 64 virtual stages: one block in the first and the last, two in the others."""
    runs = [run for run in dataset.runs if "llama405b" in run.id]
    assert runs
    for run in runs:
        strategy = run.strategy
        assert strategy.pp * strategy.interleave == 64, run.id
        assert strategy.stage_layers == (1, *[2] * 62, 1), run.id
    assert {run.job.precision for run in runs} == {"fp8-delayed", "nvfp4"}
