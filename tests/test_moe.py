"""Mixture-of-experts and latent-attention models (issue 13, first part): shapes, parameter and
FLOP counts against the published totals, memory that holds every expert, and the CLI paths."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

import hardware_catalog
from planner.cli import main
from planner.cost.context import BYTES_PER_GIB, CostContext
from planner.cost.flops import block_forward_flops, block_gemms
from planner.specs import JobSpec, ModelSpec


@pytest.mark.parametrize(
    ("name", "total_b", "active_b"),
    [
        # Mixtral model card: 46.7B total, 12.9B active
        ("mixtral-8x7b", 46.7, 12.9),
        # Mistral AI announcement: 141B total, 39B active
        ("mixtral-8x22b", 141, 39),
        # DeepSeek-V3 report: 671B total, 37B activated
        ("deepseek-v3", 671, 37),
        # Databricks: 132B total, 36B active
        ("dbrx", 132, 36),
    ],
)
def test_parameter_counts_match_the_published_totals(
    name: str, total_b: float, active_b: float
) -> None:
    model = hardware_catalog.load_model(name)
    assert model.params / 1e9 == pytest.approx(total_b, rel=0.005)
    assert model.active_params / 1e9 == pytest.approx(active_b, rel=0.016)


def test_a_dense_model_is_unchanged() -> None:
    dense = hardware_catalog.load_model("llama3-70b")
    assert not dense.is_moe and dense.active_params == dense.params
    assert dense.ffn_intermediate_width == dense.ffn_hidden


def _ctx(model: ModelSpec) -> CostContext:
    return CostContext(model, hardware_catalog.load_system("dgx-h100"), JobSpec(global_batch=8))


def test_an_moe_block_computes_its_top_k_experts() -> None:
    """Mixtral's top-2 of 8 experts: the FLOPs of a dense block twice as wide, plus the router."""
    mixtral = hardware_catalog.load_model("mixtral-8x7b")
    wide = mixtral.model_copy(
        update={"experts": 0, "experts_per_token": 0, "ffn_hidden": 2 * mixtral.ffn_hidden}
    )
    seq = mixtral.seq_len
    router = 2 * seq * mixtral.hidden * mixtral.experts
    assert block_forward_flops(_ctx(mixtral), 1) == pytest.approx(
        block_forward_flops(_ctx(wide), 1) + router, rel=1e-12
    )


def test_flops_per_token_are_twice_the_active_block_parameters() -> None:
    """DeepSeek-V3 (latent attention, 3 dense blocks, 8 of 256 routed + 1 shared expert): weight
    GEMM FLOPs per token and block are 2 × its active parameters (up to norms and biases)."""
    model = hardware_catalog.load_model("deepseek-v3")
    ctx = _ctx(model)
    gemms = block_gemms(ctx, 1, 1)
    per_token = gemms.projection_flops / model.seq_len
    embeddings = 2 * model.embedding_params + 2 * model.hidden
    active_block = (model.active_params - embeddings) / model.layers
    assert per_token == pytest.approx(2 * active_block, rel=1e-3)
    # the attention core of latent attention: 2·s²·a·(d_qk + d_v) per sequence
    assert gemms.attention_core == pytest.approx(2 * model.seq_len**2 * 128 * (192 + 128))


def test_memory_holds_every_expert(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["evaluate", "--model", "mixtral-8x7b", "--system", "dgx-h100", "--gpus", "64"]
    argv += ["--global-batch", "64", "--tp", "8", "--pp", "8", "--micro-batch", "1", "--json"]
    assert main(argv) == 0
    weights_gib = json.loads(capsys.readouterr().out)["estimate"]["memory_gib"]["hbm"]["weights"]
    model = hardware_catalog.load_model("mixtral-8x7b")
    blocks = model.block_params * model.layers / 64 * 2 / BYTES_PER_GIB
    assert blocks < weights_gib < blocks * 1.1  # the first stage adds its embedding


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"experts_per_token": 2}, "need experts > 0"),
        ({"experts": 8, "experts_per_token": 9}, "experts_per_token=9"),
        ({"experts": 8, "experts_per_token": 2, "dense_layers": 4}, "dense_layers=4"),
        ({"kv_lora_rank": 64, "kv_heads": 4}, "latent attention"),
        ({"q_lora_rank": 64}, "give kv_lora_rank"),
    ],
)
def test_inconsistent_moe_shapes_are_refused(fields: dict[str, int], message: str) -> None:
    shape = {"hidden": 512, "layers": 4, "heads": 8, "ffn_hidden": 2048, "vocab": 1000}
    with pytest.raises(ValidationError, match=message):
        ModelSpec(**shape, **fields)


@pytest.mark.parametrize("as_json", [False, True], ids=["table", "json"])
def test_plan_an_moe_model(capsys: pytest.CaptureFixture[str], as_json: bool) -> None:
    argv = ["plan", "--model", "mixtral-8x7b", "--system", "dgx-h100", "--gpus", "64"]
    argv += ["--global-batch", "512", *(["--json"] if as_json else [])]
    assert main(argv) == 0
    out = capsys.readouterr().out
    if as_json:
        payload = json.loads(out)
        assert payload["status"] == "optimal"
        assert any("expert parallelism" in w for w in payload["estimate"]["warnings"])
    else:
        assert "proven optimal" in out and "expert parallelism" in out


def test_tp_must_split_the_expert_width(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "moe.yaml"
    spec.write_text(
        "name: small-moe\nhidden: 1024\nlayers: 8\nheads: 16\nffn_hidden: 4096\nvocab: 32000\n"
        "experts: 8\nexperts_per_token: 2\nexpert_ffn_hidden: 1028\n"
    )
    argv = ["evaluate", "--model", str(spec), "--system", "dgx-h100", "--gpus", "8"]
    assert main([*argv, "--global-batch", "64", "--tp", "8"]) == 2
    err = capsys.readouterr().err
    assert "expert_ffn_hidden (1028)" in err and len(err.strip().splitlines()) == 1
    plan = ["plan", "--model", str(spec), "--system", "dgx-h100", "--gpus", "8"]
    assert main([*plan, "--global-batch", "64", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["strategy"]["tp"] in (1, 2, 4)


@pytest.mark.parametrize("fmt", ["megatron", "nemo", "torchtitan"])
def test_launch_configurations_of_moe_models_are_refused(
    capsys: pytest.CaptureFixture[str], fmt: str
) -> None:
    argv = ["plan", "--model", "mixtral-8x7b", "--system", "dgx-h100", "--gpus", "64"]
    assert main([*argv, "--global-batch", "512", "--emit", fmt]) == 2
    err = capsys.readouterr().err
    assert "mixture-of-experts" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("as_json", [False, True], ids=["table", "json"])
def test_the_catalog_gives_the_active_parameters(
    capsys: pytest.CaptureFixture[str], as_json: bool
) -> None:
    """``catalog models --json`` lists both counts; ``catalog show`` prints them (its JSON is the
    bare spec, to start a model file from)."""
    if as_json:
        assert main(["catalog", "models", "--json"]) == 0
        models = {entry["name"]: entry for entry in json.loads(capsys.readouterr().out)}
        deepseek, llama = models["deepseek-v3"], models["llama3-70b"]
        assert deepseek["experts"] == 256 and deepseek["active_params"] < deepseek["params"] / 10
        assert llama["active_params"] == llama["params"]
    else:
        assert main(["catalog", "show", "deepseek-v3"]) == 0
        assert "active per token: 37.6B" in capsys.readouterr().out
