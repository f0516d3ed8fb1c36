"""Launch files that start as planned (issue 50, items 1-4): the model's architecture flags, the
environment the framework asserts at start-up, the attention backend of the kernel the stack
profile costs, and ``plan --emit FORMAT`` under the framework's own profile. The framework facts
checked here are quoted with their sources in planner/launch/architecture.py."""

from __future__ import annotations

import os

import pytest

from planner import launch
from planner.cli import main
from planner.launch import architecture
from planner.queries.evaluate import as_model, as_system, evaluate
from planner.specs import JobSpec, Strategy

OK = 0
SYSTEM = "dgx-h100"
LLAMA = ("--normalization RMSNorm", "--position-embedding-type rope", "--disable-bias-linear")
GPT_ONLY_DEFAULTS = ("--normalization", "--position-embedding-type", "--disable-bias-linear")


def _emit(fmt: str, model: str, strategy: Strategy, **job: object) -> launch.LaunchConfig:
    job_spec = JobSpec(global_batch=64, **({"stack": launch.format_module(fmt).STACK} | job))
    return launch.emit(fmt, as_model(model), as_system(SYSTEM), job_spec, strategy)


def _megatron_starts(text: str) -> bool:
    """Megatron-LM's validate_args check on CUDA_DEVICE_MAX_CONNECTIONS (d98e8a64dd
    megatron/training/arguments.py, quoted in planner/launch/architecture.py) on an A100/H100
    (arch < 10), against the environment the file exports."""
    exported = "export CUDA_DEVICE_MAX_CONNECTIONS=1" in text
    env = os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS") if not exported else "1"
    words = text.split()

    def size(flag: str) -> int:
        return int(words[words.index(flag) + 1]) if flag in words else 1

    fsdp = "--use-megatron-fsdp" in words
    if fsdp and env == "1":
        return False
    if (size("--tensor-model-parallel-size") > 1 or size("--context-parallel-size") > 1) and not (
        fsdp
    ):
        return env == "1"
    return True


TP = Strategy(tp=4, pp=2, dp=1, sequence_parallel=True)
CP = Strategy(tp=1, cp=2, pp=2, dp=2)
PURE_DP = Strategy(tp=1, pp=1, dp=8)


@pytest.mark.parametrize("strategy", [TP, CP, PURE_DP])
def test_megatron_file_passes_the_start_up_assertion(strategy: Strategy) -> None:
    """tp > 1 or cp > 1: the file exports CUDA_DEVICE_MAX_CONNECTIONS=1; pure DP: it does not."""
    text = _emit("megatron", "llama3-70b", strategy).text
    assert _megatron_starts(text)
    assert ("export CUDA_DEVICE_MAX_CONNECTIONS=1" in text) == (strategy.tp * strategy.cp > 1)


def test_megatron_fsdp_does_not_export_it() -> None:
    """Megatron-FSDP asserts CUDA_DEVICE_MAX_CONNECTIONS != 1: ZeRO-3 with tp > 1 writes none."""
    strategy = Strategy(tp=2, pp=1, dp=4, zero_stage=3, sequence_parallel=True)
    text = _emit("megatron", "llama3-8b", strategy).text
    assert "CUDA_DEVICE_MAX_CONNECTIONS" not in text
    assert _megatron_starts(text)


def test_axonn_always_exports_it() -> None:
    """Megatron-AxoNN raises without it whatever the grid (its async TP all-reduce is on)."""
    strategy = Strategy(tp=1, pp=2, dp=4, placement="tp-pp-dp", dp_overlap=False)
    text = _emit("axonn", "gpt3-1.3b", strategy).text
    assert "export CUDA_DEVICE_MAX_CONNECTIONS=1" in text


@pytest.mark.parametrize("fmt", ["megatron", "axonn"])
def test_llama_and_gpt_architecture_flags(fmt: str) -> None:
    """Llama 3: RMSNorm, RoPE (base 500,000 where the format has the flag), no biases, SwiGLU,
    untied, GQA; GPT-3: none of them (Megatron's defaults are GPT's)."""
    strategy = Strategy(tp=2, pp=1, dp=4, placement="tp-pp-dp", dp_overlap=False)
    llama = _emit(fmt, "llama3-8b", strategy).text
    for flag in (*LLAMA, "--swiglu", "--untie-embeddings-and-output-weights"):
        assert flag in llama
    assert "--group-query-attention" in llama and "--num-query-groups 8" in llama
    if fmt == "megatron":
        assert "--rotary-base 500000" in llama
    else:  # the fork has no --rotary-base: a note says so
        assert "    --rotary-base" not in llama and "no --rotary-base" in llama
    gpt = _emit(fmt, "gpt3-1.3b", strategy).text
    for flag in (*GPT_ONLY_DEFAULTS, "--swiglu", "--untie-embeddings-and-output-weights"):
        assert flag not in gpt


def test_moe_and_latent_attention_architecture() -> None:
    """Mixtral: RoPE base 10⁶; DeepSeek-V3: RMSNorm ε 1e-6 and plain RoPE (not MLA's YaRN)."""
    strategy = Strategy(tp=2, pp=2, dp=2, ep=2, sequence_parallel=True)
    mixtral = _emit("megatron", "mixtral-8x7b", strategy).text
    assert "--rotary-base 1000000" in mixtral and "--disable-bias-linear" in mixtral
    deepseek = _emit("megatron", "deepseek-v3", strategy).text
    for flag in ("--norm-epsilon 1e-06", "--rope-type rope", "--rotary-base 10000"):
        assert flag in deepseek


def test_nemo_architecture_environment_and_backend() -> None:
    strategy = Strategy(tp=4, pp=2, dp=2, sequence_parallel=True)
    llama = _emit("nemo", "llama3-70b", strategy).text
    for key in (
        "normalization: RMSNorm",
        "add_bias_linear: false",
        "position_embedding_type: rope",
        "rotary_base: 500000",
        "attention_backend: fused",
        "CUDA_DEVICE_MAX_CONNECTIONS",
    ):
        assert key in llama
    gpt = _emit("nemo", "gpt3-175b", strategy).text
    for key in ("normalization: LayerNorm", "add_bias_linear: true", "learned_absolute"):
        assert key in gpt


@pytest.mark.parametrize(
    ("stack", "attention", "flags"),
    [
        ("megatron-core", "flash", ["--attention-backend fused"]),
        ("torchtitan", "flash", ["--attention-backend flash", "--flash-attention-version 2"]),
        ("hai-llm", "flash", ["--attention-backend flash", "--flash-attention-version 3"]),
        ("megatron-core", "materialized", ["--attention-backend unfused"]),
        ("calculon", "flash", ["--attention-backend unfused"]),
    ],
)
def test_megatron_attention_backend_is_the_costed_kernel(
    stack: str, attention: str, flags: list[str]
) -> None:
    """The stack profile's attention_kernel ↔ Megatron-Core's AttnBackend (enums.py: flash,
    fused = cuDNN, unfused, local, auto)."""
    text = _emit("megatron", "llama3-8b", TP, stack=stack, attention=attention).text
    for flag in flags:
        assert flag in text
    assert architecture.MEGATRON_BACKENDS["cudnn"] == "fused"


def test_triton_kernel_is_noted() -> None:
    config = _emit("megatron", "llama3-8b", TP, stack="llm-foundry")
    assert any("triton" in note for note in config.notes)


@pytest.mark.parametrize("fmt", ["megatron", "nemo"])
def test_round_trip_keeps_model_strategy_and_step_time(fmt: str) -> None:
    """The architecture flags read back as the catalog model (no note); strategy and step time
    are the plan's."""
    model, system = as_model("llama3-70b"), as_system(SYSTEM)
    job = JobSpec(global_batch=64)
    config = launch.emit(fmt, model, system, job, TP)
    back = launch.read(fmt, config.text, system, TP.gpus)
    assert back.model.name == "llama3-70b"
    assert not any(note.startswith("architecture") for note in back.notes), back.notes
    assert back.strategy == TP
    again = evaluate(back.model, system, job.model_copy(update=back.job), back.strategy)
    assert again.step_time_s == evaluate(model, system, job, TP).step_time_s


def test_reader_names_an_architecture_the_model_does_not_have() -> None:
    """A Llama-shaped Megatron file without the architecture flags trains a GPT: a note."""
    model, system = as_model("llama3-70b"), as_system(SYSTEM)
    text = launch.emit("megatron", model, system, JobSpec(global_batch=64), TP).text
    for flag in (*LLAMA, "--rotary-base 500000"):
        text = text.replace(f"    {flag} \\\n", "")
    back = launch.read("megatron", text, system, TP.gpus)
    note = next(note for note in back.notes if note.startswith("architecture"))
    for words in ("norm layernorm vs rmsnorm", "position_embedding learned vs rope"):
        assert words in note


def _plan(capsys: pytest.CaptureFixture[str], *extra: str) -> str:
    argv = ["plan", "--model", "llama3-8b", "--system", SYSTEM, "--gpus", "8"]
    code = main([*argv, "--global-batch", "64", "--emit", "torchtitan", *extra])
    assert code == OK
    return capsys.readouterr().out


def test_emit_torchtitan_plans_under_torchtitan(capsys: pytest.CaptureFixture[str]) -> None:
    """Without --stack the plan is torchtitan's; with another --stack a note names it."""
    assert "stack: torchtitan" in _plan(capsys)
    other = _plan(capsys, "--stack", "megatron-core")
    assert "stack: megatron-core" in other
    assert "# note: stack: estimated under the megatron-core profile" in other
