"""Reliability inputs of the goodput model (issue 35): failure rates, checkpoint storage,
checkpointing modes and restart costs, as one catalog-backed profile
(``hardware_catalog/reliability/*.yaml``, every number with its source).

Rates are **failures per 1,000 device-hours** (a GPU, a node's host, a network link). Rates,
unlike MTBFs, add: a job that needs every one of its devices fails at

    λ_job = Σ_i rate_i · count_i          (failures per hour, rate_i per device-hour)
    M     = 1 / λ_job                     (job MTBF, hours)

under the usual series-system assumption (any device's failure stops the synchronous job; the
devices fail independently, at constant rates: exponential inter-failure times). A per-1,000-hour
unit keeps the catalog numbers readable (an H100's rate is ~0.013, not 1.3e-5) and lets a
component that never fails be 0 rather than an infinite MTBF. Software failures (bugs, NCCL
watchdog timeouts) are counted per GPU-hour: they grow with the ranks a job has.

Planned interruptions (maintenance, firmware, configuration changes) are a job-level rate per
day; they cost a restart but no lost work (the job checkpoints before it stops).

A system names its profile (``SystemSpec.reliability``: a catalog name, a file, or the profile
inline; unset: ``DEFAULT_RELIABILITY``, an H100-era profile calibrated on Llama 3's run) and a
job may override it, the checkpoint mode and the interval formula (JobSpec). The catalog's
loader is ``hardware_catalog.load_reliability``.

Sources: Dubey et al. 2024, "The Llama 3 Herd of Models" §3.3.4 and its Table 5 (the default
profile's rates); Young 1974 and Daly 2006 for the interval (planner/cost/goodput.py).
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field

from planner.specs import limits as lim
from planner.specs.base import Spec

CheckpointMode = Literal["sync", "async", "in-memory"]
"""How a checkpoint is taken:

- ``sync``: training stops while every writer writes its shard to the parallel file system;
- ``async``: training stops only while each GPU copies its shard to host memory over its host
  link; a background process drains host memory to the file system while training goes on
  (NVIDIA Resiliency Extension / Megatron-Core async save, PyTorch DCP ``async_save``);
- ``in-memory``: as ``async``, and the host copy is also kept in a peer node's host memory, so a
  restart reads it over the network instead of the file system (Gemini, Wang et al. SOSP 2023).
"""

IntervalFormula = Literal["young", "daly"]
"""The optimal checkpoint interval's formula: Young 1974 (first order) or Daly 2006 (higher
order; the default)."""

DEFAULT_RELIABILITY = "h100-llama3"
"""The profile a plan uses unless the system or the job names one: the H100-era rates of
Meta's Llama 3 405B run (16,384 H100, 2024): a default calibrated on one cluster and one
hardware generation, not a law for other GPUs or clusters."""


class FailureRates(Spec):
    """Failures per 1,000 hours of one device of each kind (see the module docstring)."""

    gpu_per_1k_hours: float = Field(ge=0, le=1e3)
    """Failures of one GPU (die, HBM, SRAM, GSP, NVLink, thermal, silent data corruption) per
    1,000 GPU-hours."""
    node_per_1k_hours: float = Field(ge=0, le=1e3)
    """Failures of one node's host (CPU, DRAM, PSU, SSD, chassis, IO board, unplanned host
    maintenance) per 1,000 node-hours."""
    link_per_1k_hours: float = Field(ge=0, le=1e3)
    """Failures of one scale-out network link (NIC, cable, switch port share) per 1,000
    link-hours."""
    links_per_gpu: float = Field(default=1.0, ge=0, le=64)
    """Scale-out links counted per GPU (one NIC per GPU on rail-optimized H100 systems)."""
    software_per_1k_gpu_hours: float = Field(default=0.0, ge=0, le=1e3)
    """Software and unattributed failures (framework bugs, dependencies, NCCL watchdog
    timeouts) per 1,000 GPU-hours of the job."""
    planned_per_day: float = Field(default=0.0, ge=0, le=1e3)
    """Planned interruptions of the job per day (maintenance, upgrades): a restart each, no
    lost work."""


class CheckpointStorage(Spec):
    """Where checkpoints go and how fast: the parallel file system (per node and in
    aggregate) and the host link a GPU copies its shard over (async and in-memory modes).
    Every bandwidth is at least planner.specs.limits.MIN_STORAGE_GBPS (10 MB/s)."""

    name: str = "storage"
    write_gbps_per_node: float = Field(ge=lim.MIN_STORAGE_GBPS, le=1e5)
    """What one node can write to the file system, GB/s (its storage NICs)."""
    read_gbps_per_node: float = Field(ge=lim.MIN_STORAGE_GBPS, le=1e5)
    """What one node can read from the file system, GB/s."""
    aggregate_write_gbps: float | None = Field(default=None, ge=lim.MIN_STORAGE_GBPS, le=1e8)
    """The file system's total write bandwidth for this job, GB/s (None: no cap)."""
    aggregate_read_gbps: float | None = Field(default=None, ge=lim.MIN_STORAGE_GBPS, le=1e8)
    """The file system's total read bandwidth for this job, GB/s (None: no cap)."""
    host_link_gbps: float = Field(ge=lim.MIN_STORAGE_GBPS, le=1e5)
    """GPU → host memory copy bandwidth per GPU, GB/s, used for the async stall when the system
    has no offload tier (PCIe Gen5 x16 on H100 SXM)."""
    fully_parallel_save: bool = False
    """False: each unique shard is written once, by the replica of data-parallel rank 0 (its
    weights, and the optimizer state unless ZeRO shards it over the replicas). True: the
    replicas split the writing of the replicated state and a restart reads each shard once and
    exchanges it over the network (Megatron-Core ``--ckpt-fully-parallel-save`` /
    ``--ckpt-fully-parallel-load``, PyTorch DCP's de-duplicated plans)."""


class RestartCosts(Spec):
    """Time from a failure to training again, besides reading the checkpoint (computed from
    its size and the storage): ``detection_s`` (the failure noticed: a hang or watchdog
    timeout), ``relaunch_s`` (the bad node drained and replaced, the job rescheduled, processes
    and containers started), ``comm_init_s`` (NCCL communicators built) and ``warmup_s`` (first
    steps slower: data loader, compilation, allocator)."""

    detection_s: float = Field(ge=0, le=86400)
    relaunch_s: float = Field(ge=0, le=86400)
    comm_init_s: float = Field(ge=0, le=86400)
    warmup_s: float = Field(ge=0, le=86400)

    @property
    def fixed_s(self) -> float:
        return self.detection_s + self.relaunch_s + self.comm_init_s + self.warmup_s


class ReliabilityProfile(Spec):
    """Failure rates, checkpoint storage and restart costs of a cluster, with the checkpoint
    mode a plan assumes. A catalog file (``hardware_catalog/reliability/*.yaml``) or a user's
    YAML/JSON of the same shape."""

    name: str = "custom"
    description: str = ""
    failures: FailureRates
    storage: CheckpointStorage
    restart: RestartCosts
    checkpoint_mode: CheckpointMode = "sync"
    aliases: tuple[str, ...] = ()
    sources: dict[str, str] = Field(default_factory=dict)


def job_nodes(gpus: int, gpus_per_node: int) -> int:
    """Nodes a job of ``gpus`` GPUs occupies: ⌈gpus / gpus_per_node⌉."""
    return math.ceil(gpus / gpus_per_node)


def failure_rates_per_hour(rates: FailureRates, gpus: int, gpus_per_node: int) -> dict[str, float]:
    """The job's failures per hour by kind: rate_i · count_i / 1,000 with counts gpus,
    ⌈gpus / gpus_per_node⌉ nodes, gpus · links_per_gpu links and gpus (software)."""
    nodes = job_nodes(gpus, gpus_per_node)
    return {
        "gpu": rates.gpu_per_1k_hours * gpus / 1e3,
        "node": rates.node_per_1k_hours * nodes / 1e3,
        "network": rates.link_per_1k_hours * gpus * rates.links_per_gpu / 1e3,
        "software": rates.software_per_1k_gpu_hours * gpus / 1e3,
    }


def job_mtbf_h(rates: FailureRates, gpus: int, gpus_per_node: int) -> float:
    """Job MTBF in hours, M = 1 / Σ_i rate_i · count_i (unplanned failures only); infinite when
    every rate is 0."""
    total = sum(failure_rates_per_hour(rates, gpus, gpus_per_node).values())
    return math.inf if total == 0 else 1.0 / total


def without_failures(profile: ReliabilityProfile) -> ReliabilityProfile:
    """``profile`` with every failure rate and planned interruption at 0 (``--no-failures``):
    its checkpoint size and times are still reported, the goodput is 1 and the effective time
    the ideal one."""
    rates = profile.failures.model_copy(
        update={
            "gpu_per_1k_hours": 0.0,
            "node_per_1k_hours": 0.0,
            "link_per_1k_hours": 0.0,
            "software_per_1k_gpu_hours": 0.0,
            "planned_per_day": 0.0,
        }
    )
    return profile.model_copy(update={"failures": rates, "name": f"{profile.name} (no failures)"})
