"""Hardware overrides (--hbm-gib, --offload-gib, --offload-gbps, --scale-up-gbps,
--scale-up-domain, --scale-out-gbps, --power-cap-w): what they change, what they refuse, and
each command that takes them, in tables and in JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from hardware_catalog import load_system
from planner.cli import main
from planner.errors import InputError
from planner.specs import SystemSpec
from planner.specs.hardware import HardwareOverrides, override_system

SMALL_PLAN = ["--model", "gpt3-1.3b", "--system", "dgx-h100", "--gpus", "8", "--global-batch", "64"]
SMALL_STRATEGY = ["--tp", "1", "--pp", "1", "--micro-batch", "1"]


def test_each_override_changes_its_quantity_and_nothing_else() -> None:
    base = load_system("h100-offload-512g")
    changed = HardwareOverrides(
        hbm_gib=120,
        offload_gib=1024,
        offload_gbps=200,
        scale_up_gbps=900,
        scale_up_domain=16,
        scale_out_gbps=100,
    ).apply(base)
    assert changed.hbm.capacity_gib == 120
    assert changed.offload_tiers[0].capacity_gib == 1024
    assert changed.offload_tiers[0].bandwidth_gbps == 200
    assert changed.network_tiers[0].bandwidth_gbps == 900
    assert changed.network_tiers[0].domain_gpus == 16
    assert changed.network_tiers[-1].bandwidth_gbps == 100
    assert changed.accelerator == base.accelerator
    assert changed.hbm.bandwidth_gbps == base.hbm.bandwidth_gbps
    assert [t.efficiency for t in changed.network_tiers] == [
        t.efficiency for t in base.network_tiers
    ]
    assert changed.name.startswith("h100-offload-512g (HBM 120 GiB")
    assert HardwareOverrides().apply(base) is base


def test_an_offload_override_adds_a_tier_only_with_both_numbers() -> None:
    base = load_system("dgx-h100")
    assert not base.offload_tiers
    added = override_system(base, {"offload_gib": 512, "offload_gbps": 64})
    assert (added.offload_tiers[0].capacity_gib, added.offload_tiers[0].bandwidth_gbps) == (512, 64)
    with pytest.raises(InputError, match="--offload-gib: system 'dgx-h100' has no offload tier"):
        override_system(base, {"offload_gbps": 64})


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"hbm_gib": -1}, "--hbm-gib = -1: Input should be greater than or equal to 0.001"),
        ({"hbm_gib": 1e-300}, "--hbm-gib = 1e-300: Input should be greater than or equal to"),
        ({"scale_up_domain": 1 << 40}, "--scale-up-domain = "),
        ({"offload_gbps": float("inf")}, "--offload-gbps = inf"),
        ({"scale_up_gbps": 5e-324}, "--scale-up-gbps = 5e-324: .* greater than or equal to 0.1"),
        ({"scale_out_gbps": 0.09}, "--scale-out-gbps = 0.09: .* greater than or equal to 0.1"),
        ({"offload_gib": 10.0, "offload_gbps": 1e-300}, "--offload-gbps = 1e-300"),
        ({"scale_up_gbps": float("nan")}, "--scale-up-gbps = nan"),
    ],
)
def test_bad_overrides_are_one_line_input_errors(values: dict, message: str) -> None:
    with pytest.raises(InputError, match=message) as caught:
        override_system(load_system("dgx-h100"), values)
    assert "\n" not in str(caught.value)


def three_tier_system() -> SystemSpec:
    """dgx-h100 with a rail tier of 64 GPUs between NVLink (8) and InfiniBand."""
    base = load_system("dgx-h100")
    nvlink, infiniband = base.network_tiers
    rail = nvlink.model_copy(update={"name": "rail", "domain_gpus": 64, "bandwidth_gbps": 100})
    return base.model_copy(update={"network_tiers": (nvlink, rail, infiniband)})


def test_a_scale_up_domain_past_the_next_tier_is_refused() -> None:
    assert override_system(three_tier_system(), {"scale_up_domain": 32}).scale_up_gpus == 32
    with pytest.raises(InputError, match="would be invalid: network_tiers: domain_gpus must grow"):
        override_system(three_tier_system(), {"scale_up_domain": 128})


def test_a_single_tier_network_takes_one_bandwidth() -> None:
    one_tier = load_system("dgx-h100").model_copy(
        update={"network_tiers": load_system("dgx-h100").network_tiers[-1:]}
    )
    same = override_system(one_tier, {"scale_up_gbps": 50, "scale_out_gbps": 50})
    assert same.network_tiers[0].bandwidth_gbps == 50
    with pytest.raises(InputError, match="one network tier; give one of them"):
        override_system(one_tier, {"scale_up_gbps": 50, "scale_out_gbps": 60})
    with pytest.raises(InputError, match="spans every GPU"):
        override_system(one_tier, {"scale_up_domain": 8})


def _json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, dict]:
    code = main(argv)
    return code, json.loads(capsys.readouterr().out)


@pytest.mark.parametrize(
    "command",
    [
        ["plan", *SMALL_PLAN],
        ["evaluate", *SMALL_PLAN, *SMALL_STRATEGY],
        ["min-hardware", *SMALL_PLAN, "--minimize", "offload-bandwidth"],
    ],
    ids=["plan", "evaluate", "min-hardware"],
)
def test_commands_take_overrides_and_report_them(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    flags = ["--hbm-gib", "40", "--offload-gib", "256", "--offload-gbps", "50"]
    code, payload = _json(capsys, [*command, *flags, "--json"])
    assert code == 0
    assert payload["hardware_overrides"] == {"hbm_gib": 40, "offload_gib": 256, "offload_gbps": 50}
    assert payload["system"] == "dgx-h100 (HBM 40 GiB, offload 256 GiB, offload 50 GB/s)"
    estimate = payload.get("estimate") or payload["minimum"]["estimate"]
    assert estimate["memory_gib"]["hbm"]["capacity"] == 40
    assert main([*command, *flags]) == 0
    assert "HBM 40 GiB, offload 256 GiB" in capsys.readouterr().out


def test_a_smaller_hbm_changes_the_plan(capsys: pytest.CaptureFixture[str]) -> None:
    job = ["plan", "--model", "llama2-7b", "--system", "dgx-h100", "--gpus", "8"]
    job += ["--global-batch", "64", "--json"]
    _, roomy = _json(capsys, job)
    code, tight = _json(capsys, [*job, "--hbm-gib", "24"])
    assert code == 0
    assert tight["estimate"]["memory_gib"]["hbm"]["total"] <= 24 * 0.95
    assert tight["strategy"] != roomy["strategy"]
    code, none = _json(capsys, [*job, "--hbm-gib", "2"])
    assert code == 3 and none["status"] == "infeasible"


@pytest.mark.parametrize("as_json", [False, True])
@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--hbm-gib", "0"], "--hbm-gib: "),
        (["--scale-up-domain", "2.5"], "--scale-up-domain: "),
        (["--offload-gbps", "10"], "--offload-gib: system 'dgx-h100' has no offload tier"),
        (["--scale-up-domain", "128"], "would be invalid: network_tiers"),
    ],
)
def test_bad_override_flags_exit_2_with_one_line(
    flags: list[str],
    message: str,
    as_json: bool,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    spec = tmp_path / "three-tier.yaml"
    spec.write_text(yaml.safe_dump(three_tier_system().model_dump(mode="json")))
    problem = [*SMALL_PLAN[:2], "--system", str(spec), *SMALL_PLAN[4:]]
    argv = ["plan", *problem, *flags] + (["--json"] if as_json else [])
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "Traceback" not in err and len(err.splitlines()) == 1


def test_a_power_cap_slows_the_step_by_the_accelerators_power_law(
    capsys: pytest.CaptureFixture[str],
) -> None:
    capped = override_system(load_system("dgx-h100"), {"power_cap_w": 500})
    assert capped.accelerator.power_cap_w == 500
    assert capped.accelerator.clock_fraction == pytest.approx(0.844, abs=5e-4)
    assert capped.name == "dgx-h100 (power cap 500 W)"
    command = ["evaluate", *SMALL_PLAN, *SMALL_STRATEGY]
    _, full = _json(capsys, [*command, "--json"])
    code, slow = _json(capsys, [*command, "--power-cap-w", "500", "--json"])
    assert code == 0
    assert slow["hardware_overrides"] == {"power_cap_w": 500}
    assert slow["system"] == "dgx-h100 (power cap 500 W)"
    assert slow["estimate"]["step_time_s"] > full["estimate"]["step_time_s"]
    assert main([*command, "--power-cap-w", "500"]) == 0
    assert "dgx-h100 (power cap 500 W)" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("system", "watts", "message"),
    [
        ("dgx-a100-80g", "300", "--power-cap-w 300: system 'dgx-a100-80g' gives no tdp_w"),
        ("dgx-h100", "100", "--power-cap-w 100: allowed range on system 'dgx-h100' is [175, "),
        ("dgx-h100", "0", "--power-cap-w: 0.0: allowed range is (0, 10000]"),
        ("gb300-nvl72", "1e-09", "--power-cap-w 1e-09: allowed range on system 'gb300-nvl72' is "),
        (
            "gb300-nvl72",
            "5e-324",
            "(0.25 of its accelerator's tdp_w 1400 W, about the lowest a driver",
        ),
    ],
)
def test_a_power_cap_without_a_tdp_or_below_its_floor_is_an_input_error(
    system: str, watts: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["evaluate", "--model", "gpt3-1.3b", "--system", system, "--gpus", "8"]
    code = main([*argv, "--global-batch", "64", *SMALL_STRATEGY, "--power-cap-w", watts])
    assert code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
