"""Capture the CLI's help and the README examples' output, to compare two versions of the code.

    python tests/cli_snapshot.py OUT_DIR            # one file per command under OUT_DIR
    diff -r BEFORE_DIR AFTER_DIR                    # byte-identical apart from timings

Written for issue 36 (the package re-layout must not change ``planner --help`` or any command's
output): run it before and after a refactor and diff the two folders. Wall-clock timings
(``solve_s``, "solved in 0.35 s", ...) differ from run to run, so they are masked; everything else
is kept byte for byte. The commands are the README's examples plus every command's ``--help``.
Run from the repository root (``tests/fixtures`` paths are relative to it).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

SUBCOMMANDS = (
    "catalog",
    "evaluate",
    "plan",
    "min-hardware",
    "sweep",
    "plot",
    "validate",
    "calibrate",
)
GPT3_EVAL = (
    "evaluate --model gpt3-175b --system dgx-a100-80g --gpus 1024 --global-batch 1536 "
    "--tp 8 --pp 16 --micro-batch 1 --interleave 2 --recompute selective --sequence-parallel"
)
EXAMPLES = {
    "catalog-systems": "catalog systems",
    "catalog-models": "catalog models",
    "catalog-stacks": "catalog stacks",
    "catalog-show": "catalog show dgx-h100",
    "plan-1t-64": "plan --model megatron-1t --system dgx-h100 --gpus 64 --global-batch 64",
    "plan-1t-4096": (
        "plan --model megatron-1t --system dgx-h100 --gpus 4096 --global-batch 3072 --top 5"
    ),
    "plan-hw": (
        "plan --model megatron-1t --system dgx-h100 --gpus 4096 --global-batch 3072 "
        "--hbm-gib 120 --offload-gib 512 --offload-gbps 64"
    ),
    "plan-nemo": (
        "plan --model gpt3-175b --system dgx-a100-80g --gpus 1024 --global-batch 1536 "
        "--pin tp_overlap=false --pin pp=2 --emit nemo"
    ),
    "plan-torchtitan": (
        "plan --model llama3-70b --system dgx-h100 --gpus 512 --global-batch 1024 "
        "--pin tp_overlap=false --emit torchtitan"
    ),
    "plan-405b-128k": (
        "plan --model llama3-405b --system dgx-h100 --gpus 16384 --global-batch 128 "
        "--seq-len 131072"
    ),
    "evaluate-gpt3": GPT3_EVAL,
    "evaluate-gpt3-tokens": GPT3_EVAL + " --train-tokens 300e9",
    "evaluate-from-megatron": (
        "evaluate --from megatron tests/fixtures/launch/pretrain_gpt3_175B.args "
        "--system dgx-a100-80g --gpus 1024 --attention materialized --compare"
    ),
    "min-hardware-gpus": (
        "min-hardware --model gpt3-175b --system dgx-h100 --global-batch 1536 "
        "--minimize gpus --max-step-time 10"
    ),
    "validate": "validate",
}
# Wall-clock readings: JSON keys, and "<number> s" after words that introduce a timing.
TIMING_KEYS = re.compile(
    r"(solve|wall|elapsed|seconds_taken|time_taken|_time_s$|^time_s$|search_s)"
)
TIMING_TEXT = re.compile(
    r"((?:in|took|after|solved|solve|time|minimal,|optimal,)\s*:?\s*)\d+(?:\.\d+)?\s*(ms|s)\b"
)


def _mask_json(value: object, key: str = "") -> object:
    if isinstance(value, dict):
        return {k: _mask_json(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [_mask_json(v, key) for v in value]
    if isinstance(value, (int, float)) and not isinstance(value, bool) and TIMING_KEYS.search(key):
        return "<timing>"
    return value


def _run(args: str) -> str:
    env = {**os.environ, "COLUMNS": "120", "NO_COLOR": "1", "TERM": "dumb"}
    done = subprocess.run(
        [sys.executable, "-m", "planner", *args.split()],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    return f"exit {done.returncode}\n--- stdout\n{done.stdout}--- stderr\n{done.stderr}"


def _masked_json_output(args: str) -> str:
    text = _run(args + " --json")
    head, _, rest = text.partition("--- stdout\n")
    stdout, _, stderr = rest.partition("--- stderr\n")
    with contextlib.suppress(json.JSONDecodeError):
        stdout = json.dumps(_mask_json(json.loads(stdout)), indent=1, sort_keys=False) + "\n"
    return f"{head}--- stdout\n{stdout}--- stderr\n{stderr}"


def main(out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "help.txt").write_text(_run("--help"))
    for command in SUBCOMMANDS:
        (out_dir / f"help-{command}.txt").write_text(_run(f"{command} --help"))
    for name, args in EXAMPLES.items():
        (out_dir / f"{name}.txt").write_text(TIMING_TEXT.sub(r"\1<t>", _run(args)))
        (out_dir / f"{name}.json").write_text(_masked_json_output(args))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
