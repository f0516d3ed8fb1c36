"""What every minimum-hardware query (planner.queries.min_hardware) shares: its answer
(``Minimum``, ``Unreachable``), and ``HardwareQuery``, the question with the plans it makes to
answer it — plan with the query's goal, pins and limits inside one shared budget, an answer
from a plan, and the diagnosis at the top of the searched domain when nothing in it works.
Each quantity's search is a subclass (planner.queries.gpu_count, capacity, bandwidth).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from pydantic import BaseModel

from constraints.target import PerformanceTarget
from planner.cost.context import CostContext
from planner.cost.estimate import Estimate
from planner.cost.goodput import SECONDS_PER_DAY
from planner.cost.goodput_bounds import goodput_upper_bound
from planner.errors import InputError
from planner.queries.diagnosis import Diagnosis
from planner.queries.evaluate import evaluate
from planner.queries.plan import Plan, plan
from planner.queries.solving import Budget
from planner.space.search_space import SearchSpace, build_search_space
from planner.specs import JobSpec, ModelSpec, Strategy, SystemSpec
from planner.specs import limits as lim
from planner.specs.quantities import QUANTITIES


class Minimum(BaseModel):
    quantity: str
    value: int | float
    """A count (GPUs) is an int, in JSON too; capacities, bandwidths and dollars are floats."""
    unit: str
    proven: bool
    """CP-SAT proved no smaller value in the domain admits a strategy."""
    strategy: Strategy
    estimate: Estimate
    below_value: int | float | None
    """One grid step below the minimum (None when the minimum is the domain's smallest)."""
    below_status: str | None
    below_diagnosis: Diagnosis | None
    evidence: str | None = None
    """How every smaller value was ruled out, in words (fewest GPUs: Refutations.describe)."""
    unrefuted: list[int] = []
    """Smaller GPU counts whose plan ran out of budget: neither found nor refuted, so the
    minimum is not proven."""


class Unreachable(BaseModel):
    """The goal rules every strategy out even at the top of the searched domain: what the best
    plan there (the fastest, hence the highest MFU) reaches without it."""

    goal: str
    at: str
    """The hardware the best plan was found on: the top of the searched domain."""
    best_step_time_s: float
    best_mfu: float
    strategy: Strategy


@dataclass
class HardwareQuery:
    """One minimum-hardware question and the plans it makes to answer it: what every
    quantity's query (a subclass, ``run`` and ``domain``) shares."""

    model: ModelSpec
    system: SystemSpec
    job: JobSpec
    quantity: str
    gpus: int | None
    target: PerformanceTarget
    pins: dict[str, int]
    limits: dict[str, int | None]
    budget: Budget
    """What the query's solves may still spend, shared by all of them."""
    max_gpus: int | None
    bandwidth_range: tuple[float, float] | None
    max_days: float | None = None
    """Train the job's token budget within this many days, failures counted (target_at)."""
    min_goodput: float | None = None
    """The goodput to keep (the least checkpoint bandwidth's goal)."""
    unreachable: Unreachable | None = None
    """Set by ``infeasible`` when the goal is what no hardware in the domain meets."""

    def __post_init__(self) -> None:
        model, system, quantity, gpus = self.model, self.system, self.quantity, self.gpus
        self.ctx = CostContext(model, system, self.job)
        if quantity not in ("gpus", "cost") and gpus is None:
            raise InputError(f"--minimize {quantity} needs --gpus (the GPU count to size for)")
        if quantity in ("offload-capacity", "offload-bandwidth") and not system.offload_tiers:
            raise InputError(
                f"--minimize {quantity}: system {system.name!r} has no offload "
                "tier (use one that has, e.g. h100-offload-512g)"
            )
        if quantity == "cost" and system.gpu_hour_usd is None:
            raise InputError(f"--minimize cost: system {system.name!r} has no gpu_hour_usd")

    def run(self) -> tuple:
        """(status, minimum, diagnosis): the search for the query's quantity (a subclass's)."""
        raise NotImplementedError

    def domain(self) -> str:
        """The hardware values searched, in words (a subclass's)."""
        raise NotImplementedError

    def gpu_bound(self) -> int:
        """The largest GPU count searched: --max-gpus, else the system's, else the most any
        strategy can use (scale-up domain × layers × batch), at most limits.MAX_GPUS."""
        system = self.system
        return min(
            self.max_gpus
            or system.max_gpus
            or system.scale_up_gpus * self.model.layers * self.job.global_batch,
            lim.MAX_GPUS,
        )

    def deadline_step_s(self) -> float | None:
        """The failure-free step-time bound of ``max_days``: D · 86,400 · B · s / tokens."""
        if self.max_days is None or not self.job.train_tokens:
            return None
        tokens_per_step = self.job.global_batch * self.ctx.seq_len
        return self.max_days * SECONDS_PER_DAY * tokens_per_step / self.job.train_tokens

    def target_at(self, gpus: int | None) -> PerformanceTarget | None:
        """The goal on ``gpus`` GPUs: the user's step and MFU bounds and, with ``max_days``,
        step ≤ deadline step · g⁺(N) (goodput_upper_bound: no strategy at N has a higher
        goodput, so a count this bound refutes is refuted for every strategy's own goodput;
        the plan found is checked with its own, ``meets_deadline``). None: the bound is below
        the shortest step the limits allow (no strategy can meet it)."""
        deadline = self.deadline_step_s()
        if deadline is None or gpus is None:
            return self.target
        bound = deadline * goodput_upper_bound(self.ctx, gpus)
        if bound < lim.MIN_STEP_TIME_S:
            return None
        step = self.target.max_step_s
        return replace(self.target, max_step_s=min(step, bound) if step else bound)

    def loosest_target(self) -> PerformanceTarget:
        """The goal with the deadline's failure-free step bound (goodput ≤ 1): no count or
        strategy meets the goal unless it meets this, so floors and free-count models may use
        it (their answers are checked with ``meets_deadline``)."""
        deadline = self.deadline_step_s()
        if deadline is None:
            return self.target
        step = self.target.max_step_s
        return replace(self.target, max_step_s=min(step, deadline) if step else deadline)

    def meets_deadline(self, result: Plan) -> bool:
        """Whether ``result``'s strategy trains the budget within ``max_days`` at its own
        goodput (always, without a deadline)."""
        if self.deadline_step_s() is None or result.estimate is None:
            return True
        training = result.estimate.training
        days = training.effective_days if training is not None else None
        return days is not None and days <= self.max_days

    def goal(self) -> str:
        """The goal in words."""
        parts = []
        if self.target.max_step_s is not None or self.target.min_mfu is not None:
            parts.append(self.target.describe())
        if self.deadline_step_s() is not None:
            bound = f"step ≤ {self.deadline_step_s():.4g} s"
            if self.job.failures:
                counted = f"with failures (profile {self.ctx.reliability.name}; {bound} × goodput)"
            else:
                counted = f"without failures ({bound})"
            parts.append(
                f"{self.job.train_tokens:.3g} tokens within {self.max_days:g} days {counted}"
            )
        if self.min_goodput is not None:
            parts.append(f"goodput ≥ {self.min_goodput:.1%}")
        return "; ".join(parts) or "fits"

    def plan_at(
        self,
        system: SystemSpec | None = None,
        gpus: int | None = None,
        diagnose: bool | str = False,
        cap_units: float | None = None,
    ) -> Plan:
        """plan with the query's goal, pins and limits, within what is left of its budget
        and at most ``cap_units`` work units (status unknown, without solving, when nothing
        is left), charged to it."""
        if self.budget.exhausted():
            return Plan(status="unknown", strategy=None, estimate=None, solver=None)
        target = self.target_at(gpus or self.gpus)
        if target is None:  # the deadline leaves no step time at this count
            return Plan(status="infeasible", strategy=None, estimate=None, solver=None)
        work_limit = self.budget.units_left()
        if cap_units is not None:
            work_limit = cap_units if work_limit is None else min(work_limit, cap_units)
        result = plan(
            self.model,
            system or self.system,
            self.job,
            gpus or self.gpus,
            pins=self.pins,
            target=target,
            time_limit_s=self.budget.seconds_left(),
            work_limit=work_limit,
            diagnose=diagnose,
            **self.limits,
        )
        self.budget.charge(result.solver.work_units if result.solver else 0.0)
        return result

    # -- answers -----------------------------------------------------------------------------
    def answer(
        self,
        value: float,
        proven: bool,
        result: Plan,
        below_value: float | None,
        below: Plan | None,
    ) -> tuple:
        if result.strategy is None:
            return ("unknown", None, result.diagnosis)
        proven = proven and self.meets_deadline(result)  # at its own goodput (target_at)
        minimum = Minimum(
            quantity=self.quantity,
            value=value,
            unit=QUANTITIES[self.quantity],
            proven=proven,
            strategy=result.strategy,
            estimate=result.estimate,
            below_value=below_value,
            below_status=below.status if below is not None else None,
            below_diagnosis=below.diagnosis if below is not None else None,
        )
        return ("optimal" if proven else "feasible", minimum, None)

    def infeasible(self, top: str, diagnose: bool | str = True, **changes) -> tuple:
        """No value in the domain works: the diagnosis of the problem at the domain's top
        (``top``, in words; ``diagnose`` as plan's), and what the goal's best plan there
        reaches when the goal is among the conflicting constraints."""
        system = changes.get("system", self.system)
        result = self.plan_at(
            system=system,
            gpus=changes.get("gpus", self.gpus or self.system.max_gpus or 1),
            diagnose=diagnose,
        )
        self.unreachable = self.best_without_goal(result.diagnosis, system, top)
        return ("infeasible", None, result.diagnosis)

    def best_without_goal(
        self, diagnosis: Diagnosis | None, system: SystemSpec, top: str
    ) -> Unreachable | None:
        """The diagnosis's best plan without the goal, when the goal is one of its conflicts."""
        conflicts = diagnosis.conflicts if diagnosis is not None else []
        best = next((c.strategy for c in conflicts if c.family == "target" and c.strategy), None)
        if best is None:
            return None
        estimate = evaluate(self.model, system, self.job, best)
        return Unreachable(
            goal=self.target.describe(),
            at=f"{top} (the top of the searched domain)",
            best_step_time_s=estimate.step_time_s,
            best_mfu=estimate.mfu,
            strategy=best,
        )

    def free_space(self, top: int) -> SearchSpace:
        """The knob domains with the GPU count free, up to ``top``: every fixed count's tp,
        cp, micro-batch and ep domains are inside these (build_search_space)."""
        return build_search_space(
            self.model,
            self.system,
            self.job,
            None,
            self.pins,
            max_gpus=top,
            gpu_multiple=self.system.gpus_per_node,
            **self.limits,
        )
