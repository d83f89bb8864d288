"""Team quotas with cohorts (Kueue-style borrowing and lending) and budgets: pure arithmetic.

Quota: a team may use its nominal GPUs; beyond that it may borrow what the other teams of its
cohort leave unused and are willing to lend (each at most its ``lending_limit_gpus``), up to
its own ``borrowing_limit_gpus``. Budgets: spend this month against the limit; ``warn`` from
``soft_pct``, ``exceeded`` at 100% (a hard stop for bursting).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from meshctl.model.policy import Budget, TeamQuota
from meshctl.policy.facts import MeshSnapshot, TeamUsage

EPS = 1e-9  # GPU counts add fractions (0.1 + 0.2): compare with room for rounding
QuotaState = Literal["no-quota", "within", "borrowing", "over"]
BudgetState = Literal["ok", "warn", "exceeded"]


class TeamUsages(Protocol):
    def team(self, name: str) -> TeamUsage: ...


@dataclass(frozen=True, slots=True)
class QuotaStanding:
    team: str
    state: QuotaState
    nominal_gpus: float | None
    used_gpus: float
    requested_gpus: float
    borrowable_gpus: float
    cohort: str | None
    reason: str

    @property
    def admissible(self) -> bool:
        return self.state != "over"


@dataclass(frozen=True, slots=True)
class BudgetStanding:
    name: str
    scope: str
    spent_usd: float
    limit_usd: float
    state: BudgetState

    @property
    def share(self) -> float:
        return self.spent_usd / self.limit_usd


def lendable_gpus(quota: TeamQuota, gpus_in_use: float) -> float:
    """What a team lends its cohort: its unused nominal quota, within its lending limit."""
    unused = max(0.0, quota.gpus - gpus_in_use)
    return unused if quota.lending_limit_gpus is None else min(unused, quota.lending_limit_gpus)


def borrowable_gpus(team: str, quotas: Mapping[str, TeamQuota], mesh: TeamUsages) -> float:
    quota = quotas[team]
    if quota.cohort is None:
        return 0.0
    pool = sum(
        lendable_gpus(q, mesh.team(q.team).gpus_in_use)
        for q in quotas.values()
        if q.cohort == quota.cohort and q.team != team
    )
    limit = math.inf if quota.borrowing_limit_gpus is None else quota.borrowing_limit_gpus
    return min(pool, limit)


def quota_ceiling(team: str, quotas: Mapping[str, TeamQuota]) -> float:
    """The most GPUs ``team`` could ever hold: its quota plus the most its cohort could lend
    (every other member idle), within its borrowing limit; infinite without a quota."""
    quota = quotas.get(team)
    if quota is None:
        return math.inf
    lendable = sum(
        q.gpus if q.lending_limit_gpus is None else min(q.gpus, q.lending_limit_gpus)
        for q in quotas.values()
        if quota.cohort and q.cohort == quota.cohort and q.team != team
    )
    limit = math.inf if quota.borrowing_limit_gpus is None else quota.borrowing_limit_gpus
    return quota.gpus + min(lendable, limit)


def quota_standing(
    team: str,
    gpus: float,
    gpu_memory_gib: float,
    quotas: Mapping[str, TeamQuota],
    mesh: MeshSnapshot,
) -> QuotaStanding:
    """Where a request of ``gpus`` (and GPU memory) leaves ``team`` against its quota."""
    usage = mesh.team(team)
    quota = quotas.get(team)
    if quota is None:
        return QuotaStanding(
            team,
            "no-quota",
            None,
            usage.gpus_in_use,
            gpus,
            0.0,
            None,
            "the team has no quota: not limited",
        )
    borrowable = borrowable_gpus(team, quotas, mesh)
    need = usage.gpus_in_use + gpus

    def standing(state: QuotaState, reason: str) -> QuotaStanding:
        return QuotaStanding(
            team, state, quota.gpus, usage.gpus_in_use, gpus, borrowable, quota.cohort, reason
        )

    if quota.gpu_memory_gib is not None:
        memory = usage.gpu_memory_gib_in_use + gpu_memory_gib
        if memory > quota.gpu_memory_gib + EPS:
            return standing("over", f"GPU memory {memory:g} GiB > quota {quota.gpu_memory_gib:g}")
    if need <= quota.gpus + EPS:
        return standing("within", f"{need:g} of {quota.gpus:g} GPUs")
    if need - quota.gpus <= borrowable + EPS:
        return standing(
            "borrowing",
            f"borrows {need - quota.gpus:g} GPUs from cohort "
            f"{quota.cohort} ({borrowable:g} borrowable)",
        )
    return standing("over", f"{need:g} GPUs > quota {quota.gpus:g} + {borrowable:g} borrowable")


def spent(budget: Budget, mesh: MeshSnapshot) -> float:
    scope = budget.scope
    if scope.team is not None:
        return mesh.team(scope.team).spend_usd_month
    return sum(
        p.spend_usd_month
        for p in mesh.pools
        if p.name == scope.pool or p.provider == scope.provider
    )


def budget_standings(budgets: Sequence[Budget], mesh: MeshSnapshot) -> tuple[BudgetStanding, ...]:
    out = []
    for budget in budgets:
        used = spent(budget, mesh)
        state: BudgetState = "ok"
        if used >= budget.usd_per_month:
            state = "exceeded"
        elif used >= budget.usd_per_month * budget.soft_pct / 100:
            state = "warn"
        out.append(BudgetStanding(budget.name, budget.scope.key, used, budget.usd_per_month, state))
    return tuple(out)


def hours_left_in_month(now: dt.datetime) -> float:
    """Hours from ``now`` to the start of the next calendar month (UTC)."""
    start = now.astimezone(dt.UTC)
    nxt = dt.datetime(start.year + start.month // 12, start.month % 12 + 1, 1, tzinfo=dt.UTC)
    return max((nxt - start).total_seconds() / 3600, 1 / 60)


def hourly_headroom(
    standings: Sequence[BudgetStanding], pool: str, provider: str, hours_left: float
) -> float | None:
    """USD per hour a pool may still spend so that its pool and provider budgets last the
    month; None when no budget covers it."""
    scopes = (f"pool:{pool}", f"provider:{provider}")
    left = [b.limit_usd - b.spent_usd for b in standings if b.scope in scopes]
    return max(0.0, min(left)) / hours_left if left else None
