"""Rich tables for the terminal of the planning queries' answers: a strategy, its step-time
breakdown and its memory per tier (evaluate), a plan and its alternatives, a diagnosis, the least
hardware and its Pareto front, and the launch configurations read or emitted. The catalog's
tables are in catalog_report, the accuracy commands' in accuracy_report."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from planner.cli.layout import print_table
from planner.specs import ModelSpec, Strategy, SystemSpec

if TYPE_CHECKING:
    from planner.cost.axonn_comm import TensorParallelReport
    from planner.cost.estimate import Estimate
    from planner.cost.goodput import GoodputEstimate
    from planner.launch import LaunchConfig

BREAKDOWN_LABELS = {
    "forward": "forward compute",
    "backward": "backward compute",
    "recompute": "recompute",
    "tp_comm": "TP communication (exposed)",
    "cp_comm": "CP K/V exchange (exposed)",
    "ep_comm": "expert all-to-all (exposed)",
    "pp_comm": "PP communication",
    "offload": "offload (exposed)",
    "bubble": "pipeline bubble",
    "dp_comm": "DP communication (exposed)",
    "optimizer": "optimizer step",
}


def format_params(params: float) -> str:
    for scale, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M")):
        if params >= scale:
            return f"{params / scale:.3g}{suffix}"
    return f"{params:.0f}"


def strategy_table(strategy: Strategy) -> Table:
    table = Table(title="Strategy", title_justify="left")
    table.add_column("knob")
    table.add_column("value", justify="right", no_wrap=True)
    for name, value in strategy.model_dump().items():
        if name in ("tp_column", "tp_depth") and not strategy.axonn_grid:
            continue  # Megatron's form: the tensor-parallel table (if any) shows the grid
        table.add_row(name, str(value))
    return table


TP_FORMS = {"axonn-3d": "AxoNN 3D grid", "megatron-1d": "Megatron 1D (AxoNN grid 1×tp×1)"}


def tensor_parallel_table(report: TensorParallelReport) -> Table:
    """The TP form, the grid and the unhidden collectives per dimension per step."""
    table = Table(title=f"Tensor parallelism: {TP_FORMS[report.form]}", title_justify="left")
    for column in ("dimension", "ranks", "group spans GPUs", "tier", "collectives s/step"):
        table.add_column(column, justify="left" if column in ("dimension", "tier") else "right")
    rows = (("X column", report.column), ("Y row", report.row), ("Z depth", report.depth))
    for name, group in rows:
        table.add_row(
            name,
            str(group.ranks),
            str(group.span_gpus),
            group.tier,
            f"{group.collectives_s_per_step:.4g}",
        )
    return table


def breakdown_table(estimate: Estimate) -> Table:
    table = Table(title="Step time", title_justify="left")
    table.add_column("term")
    table.add_column("seconds", justify="right", no_wrap=True)
    table.add_column("share", justify="right", no_wrap=True)
    step = estimate.step_time_s
    for name, seconds in estimate.breakdown_s.items():
        table.add_row(BREAKDOWN_LABELS[name], f"{seconds:.4g}", f"{seconds / step:.1%}")
    table.add_row("[bold]step", f"[bold]{step:.4g}", "100.0%")
    return table


def memory_table(estimate: Estimate, system: SystemSpec, pp: int) -> Table:
    """Memory per GPU per tier; each tier's column names the pipeline stage it lists (first
    or last), except with one stage (``pp`` = 1), where there is none to name."""
    tiers = list(estimate.memory_gib)
    names = {"hbm": system.hbm.name}
    names.update({f"offload_{i}": t.name for i, t in enumerate(system.offload_tiers, start=1)})
    table = Table(
        title="Memory per GPU, GiB",
        title_justify="left",
    )
    table.add_column("item")
    for tier in tiers:
        stage = estimate.memory_stage[tier]
        header = names.get(tier, tier) + (f"\n{stage} stage" if pp > 1 else "")
        table.add_column(header, justify="right", no_wrap=True)
    rows = [
        "weights",
        "gradients",
        "optimizer",
        "activations",
        "logits",
        "reserve",
        "total",
        "usable",
        "headroom",
    ]
    for row in rows:
        cells = [
            f"{estimate.memory_gib[tier][row]:.2f}" if row in estimate.memory_gib[tier] else ""
            for tier in tiers
        ]
        style = "[bold]" if row in ("total", "headroom") else ""
        table.add_row(style + row, *(style + c for c in cells))
    return table


def summary_table(estimate: Estimate, gpus: int) -> Table:
    table = Table(title="Throughput", title_justify="left", show_header=False)
    table.add_column("metric")
    table.add_column("value", justify="right", no_wrap=True)
    table.add_row("GPUs", str(gpus))
    table.add_row("micro-batches per step", str(estimate.micro_batches))
    table.add_row("step time", f"{estimate.step_time_s:.4g} s")
    if estimate.step_range is not None:
        r = estimate.step_range
        table.add_row("step time range", f"{r.low_s:.3g}-{r.high_s:.3g} s")
    table.add_row("MFU", f"{estimate.mfu:.1%}")
    table.add_row("HFU", f"{estimate.hfu:.1%}")
    table.add_row("tokens/s", f"{estimate.tokens_per_s:,.0f}")
    if estimate.training:
        t = estimate.training
        table.add_row("tokens to train", f"{t.tokens:.3g}")
        failures = t.goodput is not None
        ideal = " (no failures)" if failures else ""
        table.add_row("time to train" + ideal, f"{t.days:,.1f} days")
        table.add_row("GPU-hours" + ideal, f"{t.gpu_hours:,.0f}")
        if t.cost_usd is not None:
            table.add_row("cost" + ideal, f"${t.cost_usd:,.0f}")
        if failures:
            days = f"{t.effective_days:,.1f} days" if t.effective_days is not None else "never"
            table.add_row(f"time to train at {t.goodput:.1%} goodput", days)
            if t.effective_gpu_hours is not None:
                table.add_row("GPU-hours with failures", f"{t.effective_gpu_hours:,.0f}")
            if t.effective_cost_usd is not None:
                table.add_row("cost with failures", f"${t.effective_cost_usd:,.0f}")
    return table


def goodput_table(goodput: GoodputEstimate) -> Table:
    """Failures, checkpoints, restarts and goodput of one plan (planner/cost/goodput.py)."""
    g = goodput
    name = g.profile.removesuffix(" (no failures)")
    table = Table(
        title=f"Failures & checkpoints (profile {g.profile}; `planner catalog show {name}`)",
        title_justify="left",
        show_header=False,
    )
    table.add_column("metric")
    table.add_column("value", justify="right")
    kinds = ", ".join(f"{kind} {rate:.2f}" for kind, rate in g.failures_per_day_by_kind.items())
    table.add_row("failures per day", f"{g.failures_per_day:.2f} ({kinds})")
    table.add_row("planned interruptions per day", f"{g.planned_interruptions_per_day:.2f}")
    mtbf = "never fails" if g.job_mtbf_h is None else f"{g.job_mtbf_h:.2f} h"
    table.add_row(f"job MTBF ({g.gpus:,} GPUs, {g.nodes:,} nodes)", mtbf)
    table.add_row(
        f"checkpoint ({g.checkpoint_mode})",
        f"{g.checkpoint_gib_total:,.0f} GiB total, {g.checkpoint_gib_per_gpu:.2f} GiB per GPU",
    )
    table.add_row(
        "checkpoint write / stall", f"{g.checkpoint_write_s:.3g} s / {g.checkpoint_stall_s:.3g} s"
    )
    if g.interval_s is None:
        table.add_row(f"interval ({g.interval_formula})", "none (no failures)")
    else:
        table.add_row(
            f"interval ({g.interval_formula})", f"{g.interval_s:,.0f} s ({g.interval_steps} steps)"
        )
    table.add_row("restart (of which read)", f"{g.restart_s:.0f} s ({g.checkpoint_read_s:.3g} s)")
    waste = ", ".join(f"{name.replace('_', ' ')} {share:.2%}" for name, share in g.waste.items())
    table.add_row("waste", waste)
    table.add_row(
        "goodput (Daly's exponential model)", f"{g.goodput:.1%} ({g.goodput_exponential:.1%})"
    )
    if g.ideal_days is not None:
        effective = "never" if g.effective_days is None else f"{g.effective_days:,.1f}"
        table.add_row("days: ideal → with failures", f"{g.ideal_days:,.1f} → {effective}")
    if g.expected_failures is not None:
        table.add_row("failures expected over the run", f"{g.expected_failures:,.0f}")
    return table


def print_estimate(
    console: Console, estimate: Estimate, strategy: Strategy, system: SystemSpec
) -> None:
    console.print(f"[bold]strategy:[/] {strategy.describe()}  [bold]stack:[/] {estimate.stack}")
    print_table(console, strategy_table(strategy))
    print_table(console, breakdown_table(estimate))
    if estimate.tensor_parallel is not None:
        print_table(console, tensor_parallel_table(estimate.tensor_parallel))
    print_table(console, memory_table(estimate, system, strategy.pp))
    print_table(console, summary_table(estimate, strategy.gpus))
    if estimate.goodput is not None:
        print_table(console, goodput_table(estimate.goodput))
    for warning in estimate.warnings:
        console.print(f"[yellow]warning:[/] {warning}")
    for overflow in estimate.overflows:
        console.print(f"[red]does not fit:[/] {overflow}")


def print_tp_forms(console: Console, forms, step_s: float) -> None:
    """Which TP form won under an AxoNN stack, and by which step-time terms."""
    if forms.winner == "megatron-1d":
        console.print(
            "TP form: [bold]Megatron 1D[/] (AxoNN grid 1×tp×1) wins; the search covered every "
            "AxoNN grid (tp_column, tp_depth)"
        )
        return
    if forms.megatron_step_time_s is None:
        console.print("TP form: [bold]AxoNN 3D grid[/] wins; no plan of Megatron's form fits")
        return
    reasons = ", ".join(
        f"{BREAKDOWN_LABELS.get(term, term)} +{seconds:.3g} s"
        for term, seconds in forms.slower_by_s.items()
        if seconds > 1e-9 * step_s
    )
    console.print(
        f"TP form: [bold]AxoNN 3D grid[/] wins; Megatron's form at best "
        f"{forms.megatron_step_time_s:.4g} s ({forms.megatron_strategy.describe()}), "
        f"{forms.megatron_step_time_s / step_s - 1:+.1%}: {reasons}"
    )


def limit_text(stopped_by: str | None, solver=None) -> str:
    """The limit that stopped a search, with the value that was set where ``solver`` (a plan's
    SolverReport) says it: 'the work limit (60 units)', 'the time limit (60 s)'."""
    stopped_by = stopped_by or "work limit"
    if solver is not None and stopped_by == "time limit" and solver.time_limit_s is not None:
        return f"the time limit ({solver.time_limit_s:g} s)"
    if solver is not None and stopped_by == "work limit" and solver.work_limit is not None:
        plural = "" if solver.work_limit == 1 else "s"
        return f"the work limit ({solver.work_limit:g} unit{plural})"
    return f"the {stopped_by}"


def _limit_flag(solver) -> str:
    """The flag that raises the limit that stopped a search."""
    return "--time-limit" if solver.stopped_by == "time limit" else "--work-limit"


def print_plan(
    console: Console, result, model: ModelSpec, system: SystemSpec, job, gpus: int
) -> None:
    """A plan: status line, the strategy and its tables, alternatives; or the conflict."""
    solver = result.solver
    console.print(
        f"[bold]{model.name}[/] ({format_params(model.params)}) on {gpus} GPUs of "
        f"[bold]{system.name}[/], global batch {job.global_batch}, sequence "
        f"{job.seq_len_for(model)}"
    )
    limit = limit_text(solver.stopped_by, solver) if solver is not None else ""
    if result.status == "unknown":
        console.print(
            f"[yellow]No answer within {limit}[/]: no strategy found in "
            f"{solver.wall_time_s:.2f} s ({solver.work_units:.2f} work units), and none proven "
            f"impossible; raise {_limit_flag(solver)}."
        )
        return
    if result.strategy is None:
        print_diagnosis(console, result)
        return
    proof = (
        "[green]proven optimal[/]"
        if result.status == "optimal"
        else f"[yellow]best found, gap {solver.gap:.2%}[/] (stopped by {limit})"
    )
    models = ""
    if solver.parts > 1:
        solved = (
            f"{solver.models} of {solver.parts}" if solver.models < solver.parts else solver.parts
        )
        models = f"{solved} models, one per expert-parallel size: "
    console.print(
        f"{proof} in {solver.wall_time_s:.2f} s ({solver.work_units:.2f} work units) over a "
        f"space of {solver.search_space:,} "
        f"knob combinations (CP-SAT: {models}{solver.variables} variables, "
        f"{solver.constraints} constraints, {solver.table_entries} table entries)"
    )
    if solver.caps:
        console.print("[dim]searched within: " + "; ".join(solver.caps) + "[/]")
    print_estimate(console, result.estimate, result.strategy, system)
    if result.tp_forms is not None:
        print_tp_forms(console, result.tp_forms, result.estimate.step_time_s)
    if result.alternatives:
        table = Table(title="Best strategies", title_justify="left")
        columns = ("rank", "strategy", "step s", "vs best", "MFU", "differs in", "tied variants")
        numeric = ("rank", "step s", "vs best", "MFU")
        for column in columns:
            table.add_column(
                column,
                justify="right" if column in numeric else "left",
                no_wrap=column in numeric,
            )
        best = result.alternatives[0].step_time_s
        for alt in result.alternatives:
            variants = "; ".join(", ".join(v.differs_in) for v in alt.variants)
            if alt.tied > len(alt.variants):
                variants += f"; +{alt.tied - len(alt.variants)} more"
            table.add_row(
                str(alt.rank),
                alt.strategy.describe(),
                f"{alt.step_time_s:.4g}",
                f"{alt.step_time_s / best - 1:+.2%}",
                f"{alt.mfu:.1%}",
                ", ".join(alt.differs_in) or "-",
                variants or "-",
            )
        print_table(console, table)
    if solver is not None and solver.ranks_stopped_by is not None:
        console.print(
            f"[yellow]{len(result.alternatives)} ranks:[/] "
            f"{limit_text(solver.ranks_stopped_by, solver)} ran out before the rest."
        )


def print_diagnosis(console: Console, result) -> None:
    """No feasible strategy: the conflicting constraints with their numbers, then the fixes."""
    diagnosis = result.diagnosis
    if diagnosis is None:
        console.print(f"[red]No feasible strategy[/] (solver status {result.status}).")
        return
    count = len(diagnosis.conflicts)
    console.print(
        f"[red bold]No feasible strategy:[/] {count} constraint"
        f"{'s conflict' if count != 1 else ' rules every strategy out'}."
    )
    for conflict in diagnosis.conflicts:  # label, then its numbers indented (reads at 80 columns)
        console.print(Padding(Text(conflict.label, style="bold"), (0, 0, 0, 2), expand=False))
        console.print(Padding(Text(conflict.detail), (0, 0, 0, 4), expand=False))
    if diagnosis.relaxations:
        console.print("What would make it feasible (each alone):")
        for fix in diagnosis.relaxations:
            if fix.verified and fix.strategy is not None:
                outcome = f"[green]verified[/]: {fix.strategy.describe()}, {fix.step_time_s:.4g} s"
            else:
                outcome = "[yellow]not verified[/]"
            console.print(f"  - {fix.change}  ({outcome})")
    elif diagnosis.fixes_searched:
        console.print(
            "No single change among GPUs, HBM, offload capacity, global batch or pins "
            "was found to make it feasible."
        )
    else:
        console.print("[dim]Changes that would make it feasible were not searched for.[/]")
    console.print(f"[dim]diagnosis took {diagnosis.wall_time_s:.1f} s[/]")
    if diagnosis.stopped_by is not None:
        limit = limit_text(diagnosis.stopped_by, getattr(result, "solver", None))
        flag = "--time-limit" if diagnosis.stopped_by == "time limit" else "--work-limit"
        console.print(
            f"[yellow]{limit[0].upper() + limit[1:]} ran out during the diagnosis:[/] the "
            "conflict may not be minimal, and some fixes were not searched for, not proven "
            f"least or not verified; raise {flag} for the rest."
        )
    elif not diagnosis.complete:
        console.print(
            "[yellow]The diagnosis searched a smaller space than the plan's[/] (a model too "
            "large to build whole): the conflict may not be minimal."
        )


def print_min_hardware(console: Console, result, model: ModelSpec, system: SystemSpec, job) -> None:
    console.print(
        f"[bold]{model.name}[/] ({format_params(model.params)}) on [bold]{system.name}"
        f"[/], global batch {job.global_batch}; goal: {result.goal}"
    )
    minimum = result.minimum
    if minimum is None and result.status == "unknown":
        limit = result.stopped_by or "the plan budget"
        console.print(
            f"[yellow]No answer within {limit}[/] ({result.wall_time_s:.2f} s, "
            f"{result.work_units:.2f} work units): no hardware found yet, and none proven "
            f"impossible; raise --work-limit (or --time-limit). Searched: {result.domain}."
        )
        return
    if minimum is None:
        console.print(
            f"[red]No hardware in the searched domain meets the goal[/] "
            f"(status {result.status}, {result.wall_time_s:.1f} s); searched: {result.domain}."
        )
        if result.unreachable is not None:
            print_unreachable(console, result.unreachable)
        if result.diagnosis is not None:
            print_diagnosis(console, result)
        return
    proof = "[green]proven minimal[/]" if minimum.proven else "[yellow]best found[/]"
    console.print(
        f"least {minimum.quantity}: [bold]{format_quantity(minimum.value)} {minimum.unit}[/] "
        f"({proof}, {result.wall_time_s:.1f} s)"
    )
    if minimum.below_value is not None:
        below = format_quantity(minimum.below_value)
        line = f"one step below, {below} {minimum.unit}: {minimum.below_status}"
        if minimum.below_diagnosis is not None:
            labels = "; ".join(c.label for c in minimum.below_diagnosis.conflicts)
            line += f" (conflict: {labels})"
        console.print(line)
    if minimum.evidence is not None:
        console.print(f"evidence: {minimum.evidence}")
    print_estimate(console, minimum.estimate, minimum.strategy, system)


def print_unreachable(console: Console, unreachable) -> None:
    """The goal no hardware in the domain meets, and the best the domain's top reaches."""
    console.print(
        f"[red]{unreachable.goal} is unreachable:[/] the best plan at {unreachable.at} reaches "
        f"MFU {unreachable.best_mfu:.1%}, {unreachable.best_step_time_s:.4g} s per step "
        f"({unreachable.strategy.describe()})."
    )


def format_quantity(value: int | float) -> str:
    """A hardware quantity as a plain number: an int as it is (1048576 GPUs, not 1.04858e+06), a
    float to 6 significant digits (2926.9 GiB), or to the unit from a million up (12345679 USD,
    not 1.23457e+07)."""
    if isinstance(value, int):
        return str(value)
    return f"{value:.6g}" if abs(value) < 1e6 else f"{value:.0f}"


def print_pareto(console: Console, front, first: str, second: str) -> None:
    """The Pareto front of two quantities (each header with its unit), with each point's step
    time, MFU and strategy."""
    from planner.specs.quantities import QUANTITIES

    units = {**QUANTITIES, "step-time": "s"}
    table = Table(title=f"Pareto front: {first} vs {second}", title_justify="left")
    headers = [q if units.get(q) in (None, "GPUs") else f"{q} {units[q]}" for q in (first, second)]
    headers = ["GPUs" if q == "gpus" else h for q, h in zip((first, second), headers, strict=True)]
    for column in (*headers, "step s", "MFU"):
        table.add_column(column, justify="right", no_wrap=True)
    table.add_column("strategy", justify="left", overflow="fold")
    for point in front:
        table.add_row(
            format_quantity(point.first),
            format_quantity(point.second),
            f"{point.step_time_s:.4g}",
            f"{point.mfu:.1%}",
            point.strategy.describe(),
        )
    print_table(console, table)


def print_config_read(console: Console, config: LaunchConfig, path: str) -> None:
    """What evaluate --from read: the strategy, its notes and the flags or keys not read."""
    strategy = config.strategy.describe() if config.strategy else "-"
    console.print(
        f"read {config.format} configuration {path}: {strategy} on {config.gpus} GPUs",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
    for note in config.notes:
        console.print(f"  note: {note}", markup=False, highlight=False, soft_wrap=True)
    if config.unsupported:
        console.print(
            f"  not read ({len(config.unsupported)}): {', '.join(config.unsupported)}",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )


def print_launch(console: Console, config: LaunchConfig) -> None:
    """An emitted launch configuration under a heading, verbatim (its notes are comments)."""
    console.print(f"\n[bold]launch configuration ({config.format}):[/]")
    console.print(config.text.rstrip("\n"), markup=False, highlight=False, soft_wrap=True)
