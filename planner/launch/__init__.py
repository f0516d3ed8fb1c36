"""From plan to launch and back: emit a strategy as a Megatron-LM, NeMo, torchtitan or
Megatron-AxoNN configuration, and read such a configuration into a model, job fields, strategy
and GPU count.

Each format module (``megatron``, ``nemo``, ``torchtitan``, ``axonn``) holds one knob ↔ flag/key
table with the version of the framework it was taken from (DESIGN.md §9); emitting then reading
gives back the same strategy for every knob the framework can express (tests/test_launch.py),
and the ``notes`` name each knob it cannot. ``plan --emit`` searches only what the framework can run
(each module's ``restriction``, planner.launch.restrict.plan_for): its configuration reads back
as the plan's strategy and step time (tests/test_launch.py).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from types import ModuleType

from hardware_catalog import load_stack, read_bounded_text
from planner.errors import InputError
from planner.launch import axonn, megatron, nemo, torchtitan
from planner.launch.common import LaunchConfig, Parsed
from planner.launch.settle import settle
from planner.specs import JobSpec, ModelSpec, Strategy, SystemSpec

__all__ = [
    "FORMATS",
    "LaunchConfig",
    "emit",
    "format_module",
    "read",
    "read_source",
    "stack_for",
]

FORMATS: dict[str, ModuleType] = {
    "megatron": megatron,
    "nemo": nemo,
    "torchtitan": torchtitan,
    "axonn": axonn,
}
"""The launch formats by name: each module has ``FORMAT``, ``VERSION``, ``STACK`` (the stack
profile its framework runs as, what ``plan --emit`` plans under by default), ``emit``, ``read``,
``restriction`` (what it can run, for plan --emit) and ``MISSING_HINT`` (where the
configuration gives each model dimension)."""


def format_module(name: str) -> ModuleType:
    """The module of launch format ``name``; an InputError naming the allowed ones."""
    if name not in FORMATS:
        raise InputError(f"launch format {name!r} is unknown; allowed: {', '.join(FORMATS)}")
    return FORMATS[name]


def emit(
    fmt: str, model: ModelSpec, system: SystemSpec, job: JobSpec, strategy: Strategy
) -> LaunchConfig:
    """``strategy`` for ``model`` on ``system`` as the configuration text of ``fmt``. A job
    that leaves its gradient dtype to the stack is emitted with the stack's. Where the text
    reads back (``evaluate --from``) to another step time, a last note says so (never for a
    plan --emit answer: planner.launch.restrict)."""
    if job.grad_dtype is None:
        job = job.model_copy(update={"grad_dtype": load_stack(job.stack).grad_dtype})
    config = format_module(fmt).emit(model, system, job, strategy)
    for note in (_stack_note(fmt, job), _read_back_note(fmt, config, model, system, job, strategy)):
        if note is not None:
            config = _with_note(config, note)
    return config


def stack_for(fmt: str, job: JobSpec, stated: bool) -> JobSpec:
    """The job ``plan --emit fmt`` plans: under the format's own stack profile (``STACK``)
    unless the user named one (``stated``), whose profile then stands (emit notes it)."""
    if stated:
        return job
    return job.model_copy(update={"stack": format_module(fmt).STACK})


def _stack_note(fmt: str, job: JobSpec) -> str | None:
    """Which profile the estimate used where it is not the format's own."""
    own = format_module(fmt).STACK
    used = load_stack(job.stack).name
    if used == own:
        return None
    return (
        f"stack: estimated under the {used} profile (the job's --stack), not {own}, the profile "
        f"of {fmt}'s framework: its step time assumes {used}'s kernels and efficiencies"
    )


def _with_note(config: LaunchConfig, note: str) -> LaunchConfig:
    """``config`` with ``note`` last among its header's notes and in ``notes``."""
    lines = config.text.split("\n")
    header = next(i for i, line in enumerate(lines) if not line.startswith("#"))
    lines.insert(header, f"# note: {note}")
    return config.model_copy(update={"text": "\n".join(lines), "notes": [*config.notes, note]})


def _read_back_note(
    fmt: str,
    config: LaunchConfig,
    model: ModelSpec,
    system: SystemSpec,
    job: JobSpec,
    strategy: Strategy,
) -> str | None:
    """What ``config`` reads back as where its step time differs from ``strategy``'s, else
    None (also for a strategy that breaks a rule: nothing to compare): the same cost model
    evaluates both (planner.queries.evaluate.evaluate), under the job's stack (a reader that
    states its framework's stack, torchtitan's, is overridden by ``--stack``; _stack_note
    says where the two differ)."""
    from planner.queries.evaluate import evaluate

    try:
        ours = evaluate(model, system, job, strategy).step_time_s
    except InputError:
        return None
    try:
        back = read(fmt, config.text, system, strategy.gpus, model)
        assert back.strategy is not None  # read gives a strategy or raises
        stated = {name: value for name, value in back.job.items() if name != "stack"}
        theirs = evaluate(model, system, job.model_copy(update=stated), back.strategy)
    except InputError as error:
        return f"read back: evaluate --from {fmt} refuses it ({error})"
    if theirs.step_time_s == ours:
        return None
    read_stack = back.job.get("stack", job.stack)
    command = f"evaluate --from {fmt}" + (
        f" --stack {job.stack}" if read_stack != job.stack else ""
    )
    return (
        f"read back: {command} gives {back.strategy.describe()} at "
        f"{theirs.step_time_s:.4g} s, not {ours:.4g} s (the notes above say why)"
    )


def read(
    fmt: str,
    text: str,
    system: SystemSpec,
    gpus: int | None = None,
    model: ModelSpec | None = None,
) -> LaunchConfig:
    """Read a configuration of ``fmt``. ``gpus`` must agree with the configuration's count where
    it states one; ``model`` replaces the configuration's shape (a note says where they differ)."""
    module = format_module(fmt)
    reader: Callable[[str, SystemSpec], Parsed] = module.read
    return settle(reader(text, system), system, gpus, model, module.MISSING_HINT)


def read_source(path: str) -> str:
    """The text of ``path`` (``-``: standard input), at most MAX_SPEC_FILE_BYTES, UTF-8."""
    if path == "-":
        return read_bounded_text(lambda: nullcontext(sys.stdin.buffer), "--from standard input")
    return read_bounded_text(lambda: Path(path).open("rb"), f"--from file {path!r}")
