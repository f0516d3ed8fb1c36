"""Rich tables of the built-in catalogs (planner catalog): the systems, models and training
stacks, and one spec's fields with their sources. Apart from report, which renders the planning
queries' answers."""

from __future__ import annotations

from rich.console import Console
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from planner.cli.layout import print_table
from planner.cli.report import format_params
from planner.specs import (
    ModelSpec,
    PrecisionRecipe,
    ReliabilityProfile,
    StackProfile,
    SystemSpec,
)


def systems_table(systems: list[SystemSpec]) -> Table:
    table = Table(title="Systems", title_justify="left")
    table.add_column("name")
    for column in (
        "accelerator",
        "bf16 TFLOP/s",
        "HBM GiB",
        "HBM GB/s",
        "offload",
        "scale-up",
        "scale-out GB/s",
        "max GPUs",
    ):
        text = column in ("accelerator", "offload", "scale-up")
        table.add_column(
            column, justify="left" if column == "accelerator" else "right", no_wrap=not text
        )
    for s in systems:
        offload = (
            ", ".join(
                f"{t.capacity_gib:g} GiB @ {t.bandwidth_gbps:g} GB/s" for t in s.offload_tiers
            )
            or "-"
        )
        up = s.network_tiers[0]
        scale_up = f"{up.domain_gpus or 'all'} × {up.bandwidth_gbps:g} GB/s"
        table.add_row(
            s.name,
            s.accelerator.name,
            f"{s.accelerator.peak_tflops['bf16']:g}",
            f"{s.hbm.capacity_gib:g}",
            f"{s.hbm.bandwidth_gbps:g}",
            offload,
            scale_up,
            f"{s.network_tiers[-1].bandwidth_gbps:g}",
            str(s.max_gpus or "-"),
        )
    return table


def models_table(models: list[ModelSpec]) -> Table:
    table = Table(title="Models", title_justify="left")
    table.add_column("name")
    for column in ("params", "hidden", "layers", "heads", "kv", "ffn", "kind", "vocab", "seq"):
        table.add_column(column, justify="left" if column == "kind" else "right", no_wrap=True)
    for m in sorted(models, key=lambda m: m.params):
        table.add_row(
            m.name,
            format_params(m.params),
            str(m.hidden),
            str(m.layers),
            str(m.heads),
            str(m.kv_heads),
            str(m.ffn_hidden),
            m.ffn_kind,
            str(m.vocab),
            str(m.seq_len),
        )
    return table


def stacks_table(stacks: list[StackProfile]) -> Table:
    """The training-stack profiles: efficiencies relative to the raw kernels, overlaps."""
    table = Table(title="Training stacks", title_justify="left")
    table.add_column("name")
    for column in ("GEMM", "attention", "mem-bound", "layer µs", "overlaps", "grads"):
        text = column in ("attention", "overlaps")
        table.add_column(column, justify="left" if text else "right", no_wrap=not text)
    for s in stacks:
        overlaps = [k for k in ("dp", "tp", "pp", "ep") if getattr(s, f"{k}_overlap")]
        table.add_row(
            s.name,
            f"{s.gemm_efficiency:.3g}",
            f"{s.attention_kernel} × {s.attention_efficiency:.3g}",
            f"{s.memory_bound_efficiency:.3g}",
            f"{s.layer_overhead_us:.3g}",
            ", ".join(overlaps) or "-",
            s.grad_dtype,
        )
    return table


def precisions_table(recipes: list[PrecisionRecipe]) -> Table:
    """The precision recipes: GEMM format, bf16 edge blocks, cast traffic per element
    (input / output gradient / weight), cached weight copy bytes, what they need."""
    table = Table(title="Precision recipes", title_justify="left")
    table.add_column("name")
    for column in ("GEMMs", "bf16 first/last", "cast B/elem in/grad/w", "weight copy B", "needs"):
        table.add_column(column, justify="left" if column == "needs" else "right")
    for r in recipes:
        needs = "block scaling" if r.needs_block_scaling else "-"
        if r.aliases:
            needs += f" (alias {', '.join(r.aliases)})"
        table.add_row(
            r.name,
            r.gemm_format,
            f"{r.bf16_first_blocks}/{r.bf16_last_blocks}",
            f"{r.input_cast_bytes:g}/{r.grad_cast_bytes:g}/{r.weight_cast_bytes:g}",
            f"{r.weight_copy_bytes:g}",
            needs,
        )
    return table


def reliability_table(profiles: list[ReliabilityProfile]) -> Table:
    """The reliability profiles: failure rates per 1,000 device-hours, what 16,384 GPUs see
    of them, checkpoint storage and restart costs."""
    from planner.specs.reliability import job_mtbf_h

    table = Table(title="Reliability profiles", title_justify="left")
    table.add_column("name")
    for column in (
        "GPU /1k h",
        "node /1k h",
        "link /1k h",
        "software /1k h",
        "planned /day",
        "MTBF at 16,384 GPUs",
        "storage write GB/s",
        "restart s",
        "mode",
    ):
        text = column in ("storage write GB/s", "restart s", "mode")  # wrap at spaces only
        table.add_column(column, justify="left" if column == "mode" else "right", no_wrap=not text)
    for p in profiles:
        rates, storage = p.failures, p.storage
        write = f"{storage.write_gbps_per_node:g}/node"
        if storage.aggregate_write_gbps is not None:
            write += f", {storage.aggregate_write_gbps:g} total"
        table.add_row(
            p.name,
            f"{rates.gpu_per_1k_hours:.4g}",
            f"{rates.node_per_1k_hours:.4g}",
            f"{rates.link_per_1k_hours:.4g}",
            f"{rates.software_per_1k_gpu_hours:.4g}",
            f"{rates.planned_per_day:.3g}",
            f"{job_mtbf_h(rates, 16384, 8):.2f} h",
            write,
            f"{p.restart.fixed_s:g} + read",
            p.checkpoint_mode,
        )
    return table


def spec_table(title: str, data: dict, sources: dict[str, str]) -> tuple[Table, list[str]]:
    """Every field of a spec, flattened, with a reference to the source that covers it; and
    the sources so referenced, in order ([1] is the first). A source's text, often a paragraph,
    is printed once below the table (print_spec), not on every row it covers."""
    table = Table(title=title, title_justify="left", show_lines=False)
    table.add_column("field", overflow="fold")
    table.add_column("value", justify="right", no_wrap=True)
    table.add_column("src", no_wrap=True)
    cited: list[str] = []
    for path, value in flatten(data):
        source = source_for(path, sources)
        if source and source not in cited:
            cited.append(source)
        table.add_row(
            path,
            str(value),
            f"[{cited.index(source) + 1}]" if source else "",
        )
    return table, cited


def print_spec(console: Console, title: str, data: dict, sources: dict[str, str]) -> None:
    """spec_table, then its sources, one numbered paragraph each (wrapped at the console's
    width, on one line each when piped)."""
    table, cited = spec_table(title, data, sources)
    print_table(console, table)
    if not cited:
        return
    console.print("sources:", markup=False, highlight=False)
    for number, text in enumerate(cited, start=1):  # one grid each: no padding to the widest
        note = Table.grid(padding=(0, 1))
        note.add_column(justify="right", no_wrap=True, min_width=len(f"[{len(cited)}]"))
        note.add_column(overflow="fold")
        note.add_row(f"[{number}]", Text(" ".join(text.split())))
        console.print(Padding(note, (0, 0, 0, 2), expand=False))


def flatten(data: object, prefix: str = "") -> list[tuple[str, object]]:
    """(dotted path, leaf value) pairs; list items as ``name[i]``."""
    if isinstance(data, dict):
        rows: list[tuple[str, object]] = []
        for key, value in data.items():
            if key in ("sources", "aliases", "description", "name") and not prefix:
                continue
            rows += flatten(value, f"{prefix}.{key}" if prefix else str(key))
        return rows
    if isinstance(data, list | tuple) and data and isinstance(data[0], dict):
        rows = []
        for index, item in enumerate(data):
            rows += flatten(item, f"{prefix}[{index}]")
        return rows
    return [(prefix, data)]


def source_for(path: str, sources: dict[str, str]) -> str:
    """The source whose key (a comma-separated list of paths) names ``path`` or a prefix of it."""
    for keys, text in sources.items():
        for key in (k.strip() for k in keys.split(",")):
            if path == key or path.startswith(key + ".") or path.startswith(key + "["):
                return text
    return ""
