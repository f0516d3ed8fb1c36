"""The collective model on its own against published nccl-tests results
(planner/accuracy/network_validation.py, hardware_catalog/calibration/nccl_tests.yaml)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

import hardware_catalog
from planner.accuracy.network_validation import (
    BUS_FACTOR,
    NcclCurve,
    NetworkDataset,
    curve_system,
    load_network_dataset,
    validate_network,
)
from planner.cli import main
from planner.cost import network
from planner.cost.context import CostContext
from planner.specs import JobSpec
from tests.conftest import gpt_model

DATASET = load_network_dataset()
RESULT = validate_network(DATASET)


def test_bundled_curves_keep_their_source_and_check_out() -> None:
    """Every curve names its source and its system; where the log has times, nccl-tests' own
    arithmetic holds: busbw = factor · bytes / time (the helper's consistency check, kept)."""
    assert len(DATASET.curves) >= 20
    for curve in DATASET.curves:
        assert curve.source.startswith("http") or "github" in curve.source, curve.id
        curve_system(curve)  # resolves
        ranks = curve.nodes * curve.gpus_per_node
        for point in curve.points:
            if point.time_us is None:
                continue
            busbw = BUS_FACTOR[curve.collective](ranks) * point.bytes / point.time_us / 1e3
            assert busbw == pytest.approx(point.busbw_gbps, rel=0.03, abs=0.02), curve.id


def test_a_point_is_the_models_collective_time() -> None:
    """The predicted bus bandwidth is nccl-tests' factor × bytes over the model's all-reduce
    time on the curve's system."""
    curve = next(c for c in DATASET.curves if c.id == "h100-ndr-2node-gjaion-ring")
    result = next(r for r in RESULT.curves if r.id == curve.id)
    ctx = CostContext(
        gpt_model(), hardware_catalog.load_system("dgx-h100"), JobSpec(global_batch=1)
    )
    point = result.points[-1]
    seconds = float(network.all_reduce_s(ctx, 16, 16, point.bytes))
    assert point.predicted_busbw_gbps == pytest.approx(2 * 15 / 16 * point.bytes / seconds / 1e9)
    assert point.error == pytest.approx(point.predicted_busbw_gbps / point.measured_busbw_gbps - 1)


def test_the_models_error_by_message_size() -> None:
    """Recorded so that a change that widens the gap shows (README, 'Network model'): over the
    curves the model covers, 64 KiB-4 GiB, mean 29 %; the large messages of DP buckets and
    FSDP units (64 MiB-4 GiB) 17 %; small ones 44 %, the model slower (NCCL's tree and LL
    protocols, left out, do better there on some fabrics)."""
    modelled = RESULT.modelled
    assert modelled.curves >= 17
    assert modelled.mean_abs_error < 0.32
    bands = {band.band: band for band in modelled.bands}
    assert bands["64 MiB-4 GiB"].mean_abs_error < 0.20
    assert bands["64 KiB-1 MiB"].mean_error < 0  # slower than measured: on the safe side
    # NVLink and InfiniBand SHARP are reported beside it, not counted
    assert RESULT.left_out.curves == sum(not c.modelled for c in RESULT.curves) >= 5


def test_the_forced_ring_curve_within_twenty_percent_at_every_size() -> None:
    result = next(r for r in RESULT.curves if r.id == "h100-ndr-2node-gjaion-ring")
    assert all(abs(p.error) < 0.2 for p in result.points)


def test_a_curve_can_replace_the_scale_out_fabric() -> None:
    curve = next(c for c in DATASET.curves if c.scale_out is not None)
    system = curve_system(curve)
    assert system.network_tiers[-1] == curve.scale_out
    assert system.network_tiers[0] == hardware_catalog.load_system(curve.system).network_tiers[0]


def test_a_users_curve_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    curve = {
        "id": "mine",
        "nodes": 2,
        "gpus_per_node": 8,
        "collective": "all_gather",
        "algorithm": "ring",
        "system": "dgx-h100",
        "points": [{"bytes": 2**30, "busbw_gbps": 350.0}],
    }
    path = tmp_path / "curves.yaml"
    path.write_text(yaml.safe_dump({"curves": [curve]}))
    assert main(["validate", "--network", "--dataset", str(path)]) == 0
    out = capsys.readouterr().out
    assert "mine" in out and "dgx-h100" in out
    NetworkDataset(curves=(NcclCurve(**curve),))
    bad = {**curve, "collective": "broadcast"}
    path.write_text(yaml.safe_dump({"curves": [bad]}))
    assert main(["validate", "--network", "--dataset", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "collective" in err
