"""The collective model on its own against published nccl-tests results (``planner validate
--network``).

A network dataset is a YAML/JSON file with a ``curves`` list: each curve is one nccl-tests run
(all_reduce_perf, all_gather_perf, reduce_scatter_perf or sendrecv_perf) on ``nodes`` nodes of
``gpus_per_node`` GPUs, with its bus bandwidth (GB/s, nccl-tests' busbw) at each message size,
the catalog system it is modelled on (``scale_out`` replacing that system's scale-out tier where
the cluster's fabric differs) and the algorithm NCCL ran. Each point is predicted with the cost
model's collectives (planner/cost/network.py): the predicted time gives the predicted bus
bandwidth with nccl-tests' own factor (2(n − 1)/n for all-reduce, (n − 1)/n for all-gather and
reduce-scatter, 1 for send/recv), and the error is predicted / measured − 1. The summary counts
points from 64 KiB to 4 GiB on curves whose algorithm the model covers (``ring`` and
``default``, NCCL's own choice, which the model makes too: planner/cost/network.py all_reduce_s);
curves run with NVLink SHARP (``nvls``, ``nvls_tree``) or InfiniBand SHARP (``collnet``) are
reported beside it, as what the model leaves out.

The bundled dataset is hardware_catalog/calibration/nccl_tests.yaml.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

import hardware_catalog
from planner.cost import network
from planner.cost.context import CostContext
from planner.specs import JobSpec, ModelSpec, SystemSpec
from planner.specs.system import NetworkTierSpec

BUNDLED_NETWORK_DATASET = hardware_catalog.CATALOG / "calibration" / "nccl_tests.yaml"

Collective = Literal["all_reduce", "all_gather", "reduce_scatter", "sendrecv"]
Algorithm = Literal["ring", "default", "nvls", "nvls_tree", "collnet"]
MODELLED: tuple[str, ...] = ("ring", "default")
"""The algorithms the collective model runs (NCCL's ring and tree, chosen as NCCL chooses)."""

SUMMARY_BYTES = (64 * 1024, 4 * 1024**3)
"""The message sizes the summary counts: 64 KiB to 4 GiB."""


class MeasuredPoint(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    bytes: int = Field(gt=0, le=2**40)
    busbw_gbps: float = Field(gt=0, le=1e5)
    time_us: float | None = Field(default=None, gt=0, le=1e12)


class NcclCurve(BaseModel):
    """One published nccl-tests run. Provenance fields beyond these are kept, not checked."""

    model_config = ConfigDict(extra="allow", frozen=True, allow_inf_nan=False)

    id: str = Field(min_length=1)
    source: str = ""
    nodes: int = Field(gt=0, le=1_000_000)
    gpus_per_node: int = Field(gt=0, le=4096)
    collective: Collective
    algorithm: Algorithm = "default"
    system: str | SystemSpec
    scale_out: NetworkTierSpec | None = None
    points: tuple[MeasuredPoint, ...] = Field(min_length=1)


class NetworkDataset(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)

    curves: tuple[NcclCurve, ...] = Field(min_length=1)


class PointResult(BaseModel):
    bytes: int
    measured_busbw_gbps: float
    predicted_busbw_gbps: float
    error: float
    """predicted / measured bus bandwidth − 1."""


class CurveResult(BaseModel):
    id: str
    system: str
    ranks: int
    nodes: int
    collective: str
    algorithm: str
    modelled: bool
    points: list[PointResult]
    mean_abs_error: float | None
    """Over the points from 64 KiB to 4 GiB (None where the curve has none there)."""
    worst_abs_error: float | None


SIZE_BANDS = (
    ("64 KiB-1 MiB", 64 * 1024, 2**20),
    ("1-64 MiB", 2**20, 64 * 2**20),
    ("64 MiB-4 GiB", 64 * 2**20, 4 * 2**30),
)
"""The message-size bands the summary also reports (lower bound excluded but for the first)."""


class BandSummary(BaseModel):
    band: str
    points: int
    mean_abs_error: float
    mean_error: float
    """Signed: negative where the model is slower than measured."""


class NetworkSummary(BaseModel):
    curves: int
    points: int
    mean_abs_error: float
    """The mean over curves of each curve's mean absolute error (a long curve counts once)."""
    point_mean_abs_error: float
    worst_abs_error: float
    bands: list[BandSummary]


class NetworkValidation(BaseModel):
    curves: list[CurveResult]
    modelled: NetworkSummary | None
    """The curves whose algorithm the model covers."""
    left_out: NetworkSummary | None
    """The curves run with NVLink or InfiniBand SHARP, which the model does not have."""


def load_network_dataset(path: str | Path | None = None) -> NetworkDataset:
    """The bundled nccl-tests dataset, or a user's file of the same shape."""
    source = Path(path) if path else BUNDLED_NETWORK_DATASET
    return hardware_catalog.read_spec_file(source, NetworkDataset, "network dataset")


def curve_system(curve: NcclCurve) -> SystemSpec:
    """The curve's system, its scale-out tier replaced where the curve states one."""
    system = (
        curve.system
        if isinstance(curve.system, SystemSpec)
        else hardware_catalog.load_system(curve.system)
    )
    if curve.scale_out is None:
        return system
    tiers = (*system.network_tiers[:-1], curve.scale_out)
    return system.model_copy(
        update={"network_tiers": tiers, "name": f"{system.name} (own scale-out)"}
    )


_PROBE_MODEL = ModelSpec(name="probe", hidden=1024, layers=1, heads=8, ffn_hidden=4096, vocab=1024)
"""The cost context needs a model; the collectives read only the system and the stack."""

BUS_FACTOR = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "sendrecv": lambda n: 1.0,
}
"""nccl-tests' bus bandwidth factors (NVIDIA/nccl-tests src/*.cu *GetBw)."""


def predicted_seconds(ctx: CostContext, curve: NcclCurve, nbytes: float) -> float:
    """The model's time of one of the curve's collectives of ``nbytes`` (nccl-tests' size:
    the whole gathered or scattered buffer for all-gather and reduce-scatter), its ranks
    spread over the curve's nodes, a rank per GPU."""
    ranks = curve.nodes * curve.gpus_per_node
    span = ranks if curve.gpus_per_node > 1 else ranks * _node_gpus(ctx)
    if curve.collective == "all_reduce":
        return float(network.all_reduce_s(ctx, ranks, span, nbytes))
    if curve.collective == "sendrecv":
        return float(network.point_to_point_s(ctx, span, nbytes))
    return float(network.reduce_scatter_s(ctx, ranks, span, nbytes))


def _node_gpus(ctx: CostContext) -> int:
    """GPUs one scale-up domain holds (one GPU per node still crosses the network)."""
    return ctx.system.network_tiers[0].domain_gpus or 1


def validate_network(dataset: NetworkDataset) -> NetworkValidation:
    """Every curve's points predicted; errors per curve, for the modelled curves and for the
    ones left out."""
    results = [_curve_result(curve) for curve in dataset.curves]
    return NetworkValidation(
        curves=results,
        modelled=_summary([r for r in results if r.modelled]),
        left_out=_summary([r for r in results if not r.modelled]),
    )


def _curve_result(curve: NcclCurve) -> CurveResult:
    system = curve_system(curve)
    ctx = CostContext(_PROBE_MODEL, system, JobSpec(global_batch=1))
    ranks = curve.nodes * curve.gpus_per_node
    factor = BUS_FACTOR[curve.collective](ranks)
    points = []
    for point in curve.points:
        seconds = predicted_seconds(ctx, curve, point.bytes)
        predicted = factor * point.bytes / seconds / 1e9
        points.append(
            PointResult(
                bytes=point.bytes,
                measured_busbw_gbps=point.busbw_gbps,
                predicted_busbw_gbps=predicted,
                error=predicted / point.busbw_gbps - 1,
            )
        )
    low, high = SUMMARY_BYTES
    counted = [abs(p.error) for p in points if low <= p.bytes <= high]
    return CurveResult(
        id=curve.id,
        system=system.name,
        ranks=ranks,
        nodes=curve.nodes,
        collective=curve.collective,
        algorithm=curve.algorithm,
        modelled=curve.algorithm in MODELLED,
        points=points,
        mean_abs_error=statistics.fmean(counted) if counted else None,
        worst_abs_error=max(counted) if counted else None,
    )


def _summary(results: list[CurveResult]) -> NetworkSummary | None:
    counted = [r for r in results if r.mean_abs_error is not None]
    if not counted:
        return None
    low, high = SUMMARY_BYTES
    errors = [abs(p.error) for r in counted for p in r.points if low <= p.bytes <= high]
    bands = []
    for name, lower, upper in SIZE_BANDS:
        first = lower == low
        inside = [
            p.error
            for r in counted
            for p in r.points
            if lower < p.bytes <= upper or (first and p.bytes == lower)
        ]
        if inside:
            bands.append(
                BandSummary(
                    band=name,
                    points=len(inside),
                    mean_abs_error=statistics.fmean(abs(e) for e in inside),
                    mean_error=statistics.fmean(inside),
                )
            )
    return NetworkSummary(
        curves=len(counted),
        points=len(errors),
        mean_abs_error=statistics.fmean(r.mean_abs_error for r in counted),
        point_mean_abs_error=statistics.fmean(errors),
        worst_abs_error=max(errors),
        bands=bands,
    )
