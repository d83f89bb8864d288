"""What evaluating the policies for one job says, with the reasons (``explain`` renders it)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Final, Literal

from meshctl.model.policy import Weights
from meshctl.policy.explain import Scope, why_not
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


# (section, rule, part, expression, (outcome, detail), pool, scope): as evaluation records
# it; the scope (the variables the job's evaluation saw) lets `explain` say later which operand
# decided, without the evaluation paying for it
TraceRow = tuple[str, Any, str, Any, tuple[Outcome, str], str | None, Scope | None]


def trace_of(row: TraceRow) -> RuleTrace:
    section, rule, part, expr, (outcome, detail), pool, scope = row
    if outcome in ("not matched", "error") and scope is not None:
        parts = getattr(expr, "parts", (expr,))
        detail = why_not(parts, outcome, detail, scope.variables(pool))
    elif outcome == "not matched" and not detail:
        detail = f"false: {expr.source}"
    return RuleTrace(section, rule.name, str(rule.origin), part, expr.source, outcome, pool, detail)


# What failing closed does, by section and part: an error never widens what a job may use.
_CLOSED: Final = {
    ("pools", "deny", "when"): "the deny applies to the pools it picks",
    ("pools", "allow", "when"): "the allow applies: only the pools it picks are eligible",
    ("pools", "deny", "deny"): "the pool is denied",
    ("pools", "allow", "allow"): "the rule does not pick the pool",
    ("burst", "", "when"): "no burst by this rule",
    ("burst", "", "to"): "the pool is no burst target of this rule",
    ("preemption", "", "when"): "no preemption right from this rule",
    ("preemption", "", "victims"): "the victim is not taken",
}


@dataclass(frozen=True, slots=True)
class RuleError:
    """A rule part that could not be evaluated for a job (a missing key, a type only known at
    run time): the engine failed closed, and this says where and why.

    One per rule and part; ``pools`` are those a selector failed for (none for ``when``)."""

    section: str  # pools, burst or preemption
    rule: str
    path: str
    line: int
    part: str  # when, allow, deny, to or victims
    pools: tuple[str, ...]
    message: str
    effect: str  # what failing closed did

    @property
    def origin(self) -> str:
        return f"{self.path}:{self.line}"

    def __str__(self) -> str:
        pools = f" for {', '.join(self.pools)}" if self.pools else ""
        return (
            f"{self.origin}: {self.section} rule {self.rule}: {self.part}{pools} could not be"
            f" evaluated: {self.message}; failing closed: {self.effect}"
        )


def errors_of(rows: tuple[TraceRow, ...]) -> tuple[RuleError, ...]:
    grouped: dict[tuple[str, str, str], RuleError] = {}
    for row in rows:
        section, rule, part, _, (outcome, _), pool, _ = row
        if outcome != "error":
            continue
        key = (section, rule.name, part)
        found = grouped.get(key)
        if found is None:
            # the operand that failed, in source order: it re-runs CEL, so once per rule part
            detail = trace_of(row).detail
            line = rule.lines.get(part, rule.origin.line)
            effect = _CLOSED[(section, getattr(rule, "effect", ""), part)]
            pools = (pool,) if pool else ()
            grouped[key] = RuleError(
                section, rule.name, rule.origin.path, line, part, pools, detail, effect
            )
        elif pool and pool not in found.pools:
            grouped[key] = replace(found, pools=(*found.pools, pool))
    return tuple(grouped.values())


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
    errors: tuple[RuleError, ...] = ()  # victims expressions that could not be evaluated


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
    # ``errors``, worked out on first read (it re-runs the failing CEL, and most verdicts
    # never fail): a cache, not part of the value
    _errors: tuple[RuleError, ...] | None = field(
        default=None, init=False, repr=False, compare=False
    )

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
    def errors(self) -> tuple[RuleError, ...]:
        """The rule parts that could not be evaluated for this job, one per rule and part
        (the controller raises an event for each; it reads them every cycle)."""
        found = self._errors
        if found is None:
            found = errors_of(self.trace_rows)
            object.__setattr__(self, "_errors", found)  # frozen: the one write, the cache
        return found
