"""Hardware quantities a user may vary without editing a system file: the HBM and offload
capacity, the offload bandwidth, the scale-up and scale-out bandwidth, the scale-up domain and
the accelerator's power limit.

``plan``, ``evaluate`` and ``min-hardware`` take them as flags (``--hbm-gib`` …), a study takes
them as axes (``hardware: {hbm_gib: [80, 120]}``); both go through ``HardwareOverrides.apply``,
which re-validates the changed system, so an override that breaks it (a scale-up domain not
smaller than the next tier's) is one input error naming the flag. Every number is per GPU and
per direction, like the system file's; a tier's efficiency is kept (the override is the raw
bandwidth, as a datasheet gives it).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from planner.errors import InputError
from planner.specs import MemoryTierSpec, SystemSpec
from planner.specs import limits as lim

OVERRIDE_LABELS = {
    "hbm_gib": ("HBM", "GiB"),
    "offload_gib": ("offload", "GiB"),
    "offload_gbps": ("offload", "GB/s"),
    "scale_up_gbps": ("scale-up", "GB/s"),
    "scale_up_domain": ("scale-up domain", "GPUs"),
    "scale_out_gbps": ("scale-out", "GB/s"),
    "power_cap_w": ("power cap", "W"),
}
"""Each override's short label and unit, for reports and the system's name."""


CAPACITY_GIB = (lim.MIN_CAPACITY_GIB, lim.MAX_CAPACITY_GIB)
"""The range of a capacity override (GiB per GPU): a memory tier's (specs.MemoryTierSpec)."""
BANDWIDTH_GBPS = (lim.MIN_BANDWIDTH_GBPS, lim.MAX_BANDWIDTH_GBPS)
"""The range of a bandwidth override (GB/s per GPU per direction): a tier's (specs)."""


class HardwareOverrides(BaseModel):
    """Hardware quantities that replace the system file's (None: keep the file's)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    hbm_gib: float | None = Field(default=None, ge=CAPACITY_GIB[0], le=CAPACITY_GIB[1])
    offload_gib: float | None = Field(default=None, ge=CAPACITY_GIB[0], le=CAPACITY_GIB[1])
    offload_gbps: float | None = Field(default=None, ge=BANDWIDTH_GBPS[0], le=BANDWIDTH_GBPS[1])
    scale_up_gbps: float | None = Field(default=None, ge=BANDWIDTH_GBPS[0], le=BANDWIDTH_GBPS[1])
    scale_up_domain: int | None = Field(default=None, gt=0, le=lim.MAX_GPUS)
    scale_out_gbps: float | None = Field(default=None, ge=BANDWIDTH_GBPS[0], le=BANDWIDTH_GBPS[1])
    power_cap_w: float | None = Field(default=None, gt=0, le=lim.MAX_POWER_W)
    """The accelerator's configured power limit (``nvidia-smi -pl``): compute-bound rates scale
    by AcceleratorSpec.clock_fraction; needs the system's ``tdp_w``."""

    def given(self) -> dict[str, float]:
        """The overrides set, by field name."""
        return {k: v for k, v in self.model_dump().items() if v is not None}

    def describe(self) -> str:
        """'HBM 120 GiB, scale-out 50 GB/s' (empty if nothing is overridden)."""
        return ", ".join(describe_override(k, v) for k, v in self.given().items())

    def apply(self, system: SystemSpec) -> SystemSpec:
        """The system with these quantities; its name says what changed.

        An offload override on a system without an offload tier adds one, which needs both its
        capacity and its bandwidth. On a system with a single network tier (scale-up and
        scale-out are one), ``scale_up_gbps`` and ``scale_out_gbps`` set the same tier and must
        agree if both are given; a scale-up domain needs a second tier to bound."""
        given = self.given()
        if not given:
            return system
        data = system.model_dump()
        memory, network = list(data["memory_tiers"]), list(data["network_tiers"])
        data["memory_tiers"], data["network_tiers"] = memory, network
        if self.hbm_gib is not None:
            memory[0]["capacity_gib"] = self.hbm_gib
        if self.offload_gib is not None or self.offload_gbps is not None:
            if len(memory) == 1:
                memory.append(self._new_offload_tier(system))
            if self.offload_gib is not None:
                memory[1]["capacity_gib"] = self.offload_gib
            if self.offload_gbps is not None:
                memory[1]["bandwidth_gbps"] = self.offload_gbps
        self._set_network(system, network)
        if self.power_cap_w is not None:
            if system.accelerator.tdp_w is None:
                raise InputError(
                    f"--power-cap-w {self.power_cap_w:g}: system {system.name!r} gives no tdp_w "
                    "for its accelerator, which a power limit is relative to"
                )
            self._check_power_cap(system)
            data["accelerator"]["power_cap_w"] = self.power_cap_w
        data["name"] = f"{system.name} ({self.describe()})"
        try:
            return SystemSpec.model_validate(data)
        except ValidationError as error:
            reason = "; ".join(e["msg"].removeprefix("Value error, ") for e in error.errors())
            flags = " ".join(f"--{k.replace('_', '-')} {v:g}" for k, v in given.items())
            invalid = f"system {system.name!r} would be invalid"
            raise InputError(f"{flags}: {invalid}: {reason}") from None

    def _check_power_cap(self, system: SystemSpec) -> None:
        """A one-line InputError unless --power-cap-w lies in [MIN_POWER_CAP_FRACTION · TDP,
        MAX_POWER_W] and above the accelerator's idle power."""
        accelerator = system.accelerator
        lowest_w = accelerator.lowest_power_cap_w
        cap_w = self.power_cap_w
        if cap_w is None or lowest_w is None:
            return
        if cap_w < lowest_w or cap_w <= accelerator.idle_power_w:
            idle_w = accelerator.idle_power_w
            idle = f", above its idle power {idle_w:g} W" if idle_w else ""
            raise InputError(
                f"--power-cap-w {cap_w:g}: allowed range on system {system.name!r} is "
                f"[{lowest_w:g}, {lim.MAX_POWER_W:g}] W ({lim.MIN_POWER_CAP_FRACTION:g} of its "
                f"accelerator's tdp_w {accelerator.tdp_w:g} W, about the lowest a driver "
                f"accepts{idle})"
            )

    def _new_offload_tier(self, system: SystemSpec) -> dict[str, Any]:
        if self.offload_gib is None or self.offload_gbps is None:
            missing = "--offload-gib" if self.offload_gib is None else "--offload-gbps"
            raise InputError(
                f"{missing}: system {system.name!r} has no offload tier; adding one needs both "
                "--offload-gib and --offload-gbps"
            )
        tier = MemoryTierSpec(
            name="offload", capacity_gib=self.offload_gib, bandwidth_gbps=self.offload_gbps
        )
        return tier.model_dump()

    def _set_network(self, system: SystemSpec, network: list[dict[str, Any]]) -> None:
        up, out = self.scale_up_gbps, self.scale_out_gbps
        if len(network) == 1:
            if up is not None and out is not None and up != out:
                raise InputError(
                    f"--scale-up-gbps = {up:g} and --scale-out-gbps = {out:g}: system "
                    f"{system.name!r} has one network tier; give one of them"
                )
            if self.scale_up_domain is not None:
                raise InputError(
                    f"--scale-up-domain = {self.scale_up_domain}: system {system.name!r} has one "
                    "network tier, which spans every GPU"
                )
        if up is not None:
            network[0]["bandwidth_gbps"] = up
        if out is not None:
            network[-1]["bandwidth_gbps"] = out
        if self.scale_up_domain is not None:
            network[0]["domain_gpus"] = self.scale_up_domain


def describe_override(key: str, value: float) -> str:
    """One override in words: 'HBM 120 GiB', 'scale-up domain 72 GPUs'."""
    name, unit = OVERRIDE_LABELS[key]
    return f"{name} {value:g} {unit}"


def overrides_from(values: dict[str, Any]) -> HardwareOverrides:
    """The override fields found in ``values`` (other keys and None ignored): a study's scenario
    or parsed flags; a bad one is an input error naming its flag."""
    fields = {k: values[k] for k in HardwareOverrides.model_fields if values.get(k) is not None}
    try:
        return HardwareOverrides(**fields)
    except ValidationError as error:
        first = error.errors()[0]
        field = "--" + str(first["loc"][0]).replace("_", "-")
        raise InputError(f"{field} = {first['input']!r}: {first['msg']}") from None


def override_system(system: SystemSpec, values: dict[str, Any]) -> SystemSpec:
    """``system`` with the overrides found in ``values`` (``overrides_from``)."""
    return overrides_from(values).apply(system)


SETTABLE_QUANTITIES = ("hbm", "offload-capacity", "offload-bandwidth", "scale-out-bandwidth")
"""The quantities of planner.specs.quantities.QUANTITIES that are one number of a system file
(``with_quantity`` sets them; the GPU count and the cost are not)."""
SWEEP_QUANTITIES = (*SETTABLE_QUANTITIES, "step-time")
"""What ``min-hardware --sweep`` can trace a Pareto front against: a quantity it can cap
(SETTABLE_QUANTITIES) or the step time."""


def with_tier_capacity(system: SystemSpec, tier: int, gib: float) -> SystemSpec:
    """``system`` with memory tier ``tier`` (0: HBM) holding ``gib`` GiB per GPU.

    Unlike ``HardwareOverrides.apply`` the name is kept and nothing is re-validated: this is
    for the queries that probe hardware the user did not ask for (min-hardware's grid, a
    diagnosis's fixes), not for a user's input."""
    tiers = tuple(
        t.model_copy(update={"capacity_gib": gib}) if i == tier else t
        for i, t in enumerate(system.memory_tiers)
    )
    return system.model_copy(update={"memory_tiers": tiers})


def with_quantity(system: SystemSpec, quantity: str, value: float) -> SystemSpec:
    """``system`` with one of SETTABLE_QUANTITIES set to ``value``, as ``with_tier_capacity``
    (name kept, not re-validated): ``hbm`` / ``offload-capacity`` the capacity of memory tier
    0 / 1 (GiB per GPU), ``offload-bandwidth`` the bandwidth of memory tier 1 and
    ``scale-out-bandwidth`` that of the last network tier (GB/s per GPU per direction)."""
    if quantity == "hbm":
        return with_tier_capacity(system, 0, value)
    if quantity == "offload-capacity":
        return with_tier_capacity(system, 1, value)
    if quantity == "offload-bandwidth":
        memory = list(system.memory_tiers)
        memory[1] = memory[1].model_copy(update={"bandwidth_gbps": value})
        return system.model_copy(update={"memory_tiers": tuple(memory)})
    if quantity == "scale-out-bandwidth":
        network = list(system.network_tiers)
        network[-1] = network[-1].model_copy(update={"bandwidth_gbps": value})
        return system.model_copy(update={"network_tiers": tuple(network)})
    raise ValueError(f"{quantity!r} is not a system quantity; settable: {SETTABLE_QUANTITIES}")
