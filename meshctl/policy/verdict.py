"""What evaluating the policies for one job says, with the reasons (``explain`` renders it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from meshctl.model.policy import Weights
from meshctl.policy.tenancy import BudgetStanding, QuotaStanding

Outcome = Literal["matched", "not matched", "error", "skipped"]


@dataclass(frozen=True, slots=True)
class RuleTrace:
    """One evaluation of one expression of one rule (for one pool, where it selects pools)."""

    section: str
    rule: str
    origin: str
    part: str
    expression: str
    outcome: Outcome
    pool: str | None = None
    detail: str = ""


# (section, rule, part, expression, (outcome, detail), pool): as evaluation records it
TraceRow = tuple[str, Any, str, Any, tuple[Outcome, str], str | None]


def trace_of(row: TraceRow) -> RuleTrace:
    section, rule, part, expr, (outcome, detail), pool = row
    return RuleTrace(section, rule.name, str(rule.origin), part, expr.source, outcome, pool, detail)


@dataclass(frozen=True, slots=True)
class PoolVerdict:
    pool: str
    eligible: bool
    usable: bool  # eligible, and on-prem or a burst target now
    rule: str | None
    reason: str


@dataclass(frozen=True, slots=True)
class BurstTarget:
    pool: str
    spot: bool
    max_usd_per_hour: float | None
    rules: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class BurstVerdict:
    allowed: bool
    rules: tuple[str, ...]
    targets: tuple[BurstTarget, ...]
    blocked: tuple[tuple[str, str], ...]  # (pool, why) for targets a budget or rule removed

    def target(self, pool: str) -> BurstTarget | None:
        return next((t for t in self.targets if t.pool == pool), None)


@dataclass(frozen=True, slots=True)
class PreemptionRights:
    allowed: bool
    rules: tuple[str, ...]
    grace_s: float
    min_runtime_s: float


@dataclass(frozen=True, slots=True)
class VictimVerdict:
    allowed: bool
    rule: str | None
    grace_s: float
    reason: str


@dataclass(frozen=True, slots=True)
class Verdict:
    job: str
    policy_hash: str
    priority_class: str | None
    priority: int
    priority_problem: str | None
    pools: tuple[PoolVerdict, ...]
    burst: BurstVerdict
    preemption: PreemptionRights
    quota: QuotaStanding
    budgets: tuple[BudgetStanding, ...]
    weights: Weights
    packing: str
    pool_preference: tuple[str, ...]
    trace_rows: tuple[TraceRow, ...]

    @property
    def trace(self) -> tuple[RuleTrace, ...]:
        """Every rule evaluated for this job, in order, matched or not, and why."""
        return tuple(trace_of(row) for row in self.trace_rows)

    @property
    def eligible_pools(self) -> tuple[str, ...]:
        return tuple(p.pool for p in self.pools if p.eligible)

    @property
    def usable_pools(self) -> tuple[str, ...]:
        return tuple(p.pool for p in self.pools if p.usable)

    @property
    def errors(self) -> tuple[RuleTrace, ...]:
        return tuple(trace_of(row) for row in self.trace_rows if row[4][0] == "error")
