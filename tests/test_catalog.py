"""The built-in catalog: the promised names load, every number carries a source, lookups help."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

import hardware_catalog
from planner.accuracy.validation import load_dataset, resolve
from planner.cli.catalog_report import flatten, source_for
from planner.errors import InputError
from planner.specs import ModelSpec, StackProfile, SystemSpec
from planner.specs import limits as lim

ROOT = Path(__file__).resolve().parent.parent

SYSTEMS = [
    "dgx-a100-40g",
    "dgx-a100-80g",
    "dgx-h100",
    "hgx-h200",
    "hgx-b200",
    "gb200-nvl72",
    "gb300-nvl72",
    "frontier",
    "mi300x-node",
    "h100-offload-512g",
]
MODELS = [
    "mixtral-8x7b",
    "mixtral-8x22b",
    "dbrx",
    "deepseek-v3",
    "gpt3-1.3b",
    "gpt3-13b",
    "gpt3-175b",
    "megatron-22b",
    "megatron-530b",
    "megatron-1t",
    "turing-530b",
    "palm-540b",
    "chinchilla-70b",
    "llama2-7b",
    "llama2-70b",
    "llama3-8b",
    "llama3-70b",
    "llama3-405b",
    "mt-1t",
    "mt-2t",
    "mt-4t",
    "mt-7t",
    "mt-11t",
    "mt-18t",
    "mt-26t",
    "mt-37t",
    "mt-53t",
    "mt-72t",
    "mt-96t",
    "mt-128t",
]


def test_promised_systems_and_models_are_in_the_catalog() -> None:
    assert set(SYSTEMS) <= set(hardware_catalog.system_names())
    assert set(MODELS) <= set(hardware_catalog.model_names())


@pytest.mark.parametrize(
    ("kind", "name"), [("systems", n) for n in SYSTEMS] + [("models", n) for n in MODELS]
)
def test_every_number_in_a_catalog_file_has_a_source(kind: str, name: str) -> None:
    data = yaml.safe_load((hardware_catalog.CATALOG / kind / f"{name}.yaml").read_text())
    sources = data.get("sources", {})
    unsourced = [
        path
        for path, value in flatten(data)
        if isinstance(value, int | float)
        and not isinstance(value, bool)
        and value is not None
        and not source_for(path, sources).strip()
    ]
    assert not unsourced, f"numbers without a source: {unsourced}"


def test_names_and_aliases_are_unique_across_files() -> None:
    for kind in ("systems", "models", "reliability"):
        seen: dict[str, str] = {}
        for path in (hardware_catalog.CATALOG / kind).iterdir():
            data = yaml.safe_load(path.read_text())
            assert data["name"] == path.name.removesuffix(".yaml")
            for name in (data["name"], *data.get("aliases", [])):
                assert name.lower() not in seen, f"{name} in {path.name} and {seen[name.lower()]}"
                seen[name.lower()] = path.name


def test_lookup_is_case_insensitive_and_takes_aliases() -> None:
    assert hardware_catalog.load_system("DGX-H100").name == "dgx-h100"
    assert hardware_catalog.load_model("GPT3-175B").name == "gpt3-175b"


def test_typo_gets_a_suggestion() -> None:
    with pytest.raises(InputError, match="did you mean 'dgx-h100'"):
        hardware_catalog.load_system("dgx-h10")
    with pytest.raises(InputError, match="llama3-70b"):
        hardware_catalog.load_model("llama3-7b")


def test_user_files_load_in_yaml_and_json(tmp_path: Path) -> None:
    model = hardware_catalog.load_model("llama3-8b").model_dump(mode="json")
    model["name"] = "mine"
    yaml_path = tmp_path / "mine.yaml"
    yaml_path.write_text(yaml.safe_dump(model))
    json_path = tmp_path / "mine.json"
    json_path.write_text(ModelSpec.model_validate(model).model_dump_json())
    assert hardware_catalog.load_model(str(yaml_path)).name == "mine"
    assert hardware_catalog.load_model(str(json_path)).hidden == 4096
    system = hardware_catalog.load_system("dgx-h100").model_dump(mode="json")
    system_path = tmp_path / "sys.yaml"
    system_path.write_text(yaml.safe_dump(system))
    assert hardware_catalog.load_system(str(system_path)) == SystemSpec.model_validate(system)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("hidden: [1, 2", "not valid YAML/JSON"),
        ("- 1\n- 2\n", "expected a mapping"),
        (
            "hidden: 64\nlayers: 2\nheads: 4\nffn_hidden: 256\nvocab: 100\nhiden: 3\n",
            "hiden: unknown",
        ),
        ("hidden: -64\nlayers: 2\nheads: 4\nffn_hidden: 256\nvocab: 100\n", "hidden = -64"),
        (
            "hidden: 64\nlayers: 2\nheads: 5\nffn_hidden: 256\nvocab: 100\n",
            "not divisible by heads",
        ),
        ("hidden: 64\nlayers: 2\nffn_hidden: 256\nvocab: 100\n", "heads: required"),
    ],
)
def test_malformed_model_files_give_one_line_errors(
    tmp_path: Path, content: str, message: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(content)
    with pytest.raises(InputError, match=message) as error:
        hardware_catalog.load_model(str(path))
    assert "\n" not in str(error.value)


def test_missing_file_is_an_input_error() -> None:
    with pytest.raises(InputError, match="cannot read"):
        hardware_catalog.load_system("no/such/system.yaml")


def _every_system_and_stack() -> tuple[list[SystemSpec], list[StackProfile]]:
    """The catalog's systems and stacks, the example system and every system and stack the
    bundled calibration dataset's runs name."""
    example = ROOT / "examples" / "specs" / "my-cluster.yaml"
    systems = [hardware_catalog.load_system(name) for name in hardware_catalog.system_names()]
    systems.append(hardware_catalog.read_spec_file(example, SystemSpec, "system"))
    runs = load_dataset().runs
    systems += [resolve(run)[1] for run in runs]
    stacks = [hardware_catalog.load_stack(name) for name in hardware_catalog.stack_names()]
    stacks += [hardware_catalog.load_stack(run.job.stack) for run in runs]
    return systems, stacks


def test_the_physical_ranges_leave_room_around_every_real_number() -> None:
    """The lower bounds of planner.specs.limits reject no catalog, example or dataset number, and
    sit well below the smallest of each kind (so they cut no real question)."""
    systems, stacks = _every_system_and_stack()
    tiers = [tier for s in systems for tier in (*s.memory_tiers, *s.network_tiers)]
    kernels = [p for s in systems for ps in s.accelerator.attention_kernels.values() for p in ps]
    efficiencies = [tier.efficiency for tier in tiers]
    efficiencies += [p.efficiency for s in systems for p in s.accelerator.matmul_efficiency]
    efficiencies += [share for p in kernels for share in (p.forward, p.backward)]
    efficiencies += [
        share
        for stack in stacks
        for share in (
            stack.gemm_efficiency,
            stack.attention_efficiency,
            stack.memory_bound_efficiency,
        )
    ]
    assert min(efficiencies) >= 4 * lim.MIN_EFFICIENCY
    assert min(tier.bandwidth_gbps for tier in tiers) >= 10 * lim.MIN_BANDWIDTH_GBPS
    assert min(tier.capacity_gib for s in systems for tier in s.memory_tiers) >= (
        1000 * lim.MIN_CAPACITY_GIB
    )
    peaks = [tflops for s in systems for tflops in s.accelerator.peak_tflops.values()]
    assert min(peaks) >= 100 * lim.MIN_TFLOPS
    assert min(stack.hbm_usable_fraction for stack in stacks) >= 5 * lim.MIN_USABLE_FRACTION
    assert min(stack.dp_bucket_params for stack in stacks) >= 100 * lim.MIN_DP_BUCKET_PARAMS


def test_hopper_parts_share_the_kernel_timed_cudnn_attention_curve() -> None:
    """H100 SXM, H200, H800 and the H100 offload node have the same 132 SMs and clocks: one
    cuDNN curve, the kernel-timed cuDNN 9.19.1 H200 set from 2k tokens (cudnn-frontend, the
    harness of the Blackwell curves), which rises with the sequence and stays below 1."""
    curves = {
        name: hardware_catalog.load_system(name).accelerator.attention_kernels["cudnn"]
        for name in ("dgx-h100", "hgx-h200", "hgx-h800", "h100-offload-512g")
    }
    reference = curves["dgx-h100"]
    assert all(curve == reference for curve in curves.values())
    at = {p.seq_len: p for p in reference}
    assert (at[8192].forward, at[8192].backward) == (0.651, 0.547)  # 644 / 541 of 989.4 TF
    points = [p for p in reference if p.seq_len >= 2048]
    pairs = zip(points, points[1:], strict=False)
    assert all(a.forward <= b.forward and a.backward <= b.backward for a, b in pairs)
    assert all(0 < p.backward < p.forward < 1 for p in reference)
