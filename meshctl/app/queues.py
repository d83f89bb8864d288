"""``meshctl queues``, for the CLI and the API server alike: the teams' quotas grouped by
cohort, with what each team holds now, borrows from its cohort and lends to it, and what its
jobs wait for. From the policies the controller runs with (``AppContext.policy_set``) and the
store: the active attempts' allocations (as ``meshctl_team_resource_usage`` counts them) and
the jobs pending or requeued.

What a team lends is not recorded anywhere: a cohort's borrowing is of its members' idle quota
as a whole (``meshctl.policy.tenancy``). Each lender's part is shown in proportion to the idle
quota it lends (its unused nominal quota, within its lending limit)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from meshctl.app.context import AppContext
    from meshctl.app.shapes.queues import CohortQueue, Queues, TeamQueue
    from meshctl.model.policy import TeamQuota
    from meshctl.state import Store


def queues(context: AppContext) -> Queues:
    """The document ``meshctl queues`` prints (``shapes.Queues``)."""
    quotas = context.policy_set().quotas
    if not context.has_store():
        return tree(quotas, {}, {})
    with context.store() as store:
        used, waiting = held_and_waiting(store)
    return tree(quotas, used, waiting)


def held_and_waiting(
    store: Store,
) -> tuple[dict[str, float], dict[str, tuple[int, float]]]:
    """Per team: the GPUs its jobs' active attempts hold; its jobs pending or requeued, and
    the GPUs they ask."""
    from meshctl.state import AttemptRecord, JobRecord
    from meshctl.state.records import ACTIVE_ATTEMPT, FINISHED, QUEUED, JobState, latest_attempts

    jobs = store.list(JobRecord, state=[s.value for s in JobState if s not in FINISHED])
    used: dict[str, float] = defaultdict(float)
    waiting: dict[str, tuple[int, float]] = {}
    attempts = latest_attempts(store.list(AttemptRecord, job_id=[j.id for j in jobs]))
    for job in jobs:
        if job.state in QUEUED:
            count, gpus = waiting.get(job.team, (0, 0.0))
            waiting[job.team] = (count + 1, gpus + asked_gpus(job.spec))
            continue
        attempt = attempts.get(job.id)
        if attempt is not None and attempt.state in ACTIVE_ATTEMPT:
            used[job.team] += sum(held.gpus() for held in attempt.detail.allocations)
    return used, waiting


def asked_gpus(document: Mapping[str, Any]) -> float:
    """What a stored job asks: its GPUs per node times its nodes."""
    resources = document.get("spec", {}).get("resources", {})
    return float(resources.get("gpus") or 0) * int(resources.get("nodes") or 1)


def tree(
    quotas: Mapping[str, TeamQuota],
    used: Mapping[str, float],
    waiting: Mapping[str, tuple[int, float]],
) -> Queues:
    """The teams by cohort (``shapes.Queues``), each cohort's and team's figures."""
    teams = sorted(set(quotas) | set(used) | set(waiting))
    rows = {t: _team(t, quotas.get(t), used.get(t, 0.0), waiting.get(t, (0, 0.0))) for t in teams}
    by_cohort: dict[str, list[TeamQueue]] = defaultdict(list)
    for row in rows.values():
        if row["cohort"] is not None:
            by_cohort[row["cohort"]].append(row)
    cohorts = [_cohort(name, members, quotas) for name, members in sorted(by_cohort.items())]
    return {"cohorts": cohorts, "teams": [r for r in rows.values() if r["cohort"] is None]}


def _team(team: str, quota: TeamQuota | None, used: float, waiting: tuple[int, float]) -> TeamQueue:
    nominal = quota.gpus if quota is not None else None
    return {
        "team": team,
        "cohort": quota.cohort if quota is not None else None,
        "nominal_gpus": nominal,
        "borrowing_limit_gpus": quota.borrowing_limit_gpus if quota is not None else None,
        "lending_limit_gpus": quota.lending_limit_gpus if quota is not None else None,
        "reclaim": quota.reclaim if quota is not None else None,
        "used_gpus": _gpus(used),
        "borrowed_gpus": _gpus(max(0.0, used - nominal)) if nominal is not None else 0.0,
        "lent_gpus": 0.0,  # the cohort's share-out (``_cohort``)
        "waiting_jobs": waiting[0],
        "waiting_gpus": _gpus(waiting[1]),
    }


def _cohort(name: str, members: list[TeamQueue], quotas: Mapping[str, TeamQuota]) -> CohortQueue:
    from meshctl.policy.tenancy import lendable_gpus

    borrowed = sum(m["borrowed_gpus"] for m in members)
    idle = {m["team"]: lendable_gpus(quotas[m["team"]], m["used_gpus"]) for m in members}
    offered = sum(idle.values())
    for member in members:
        share = idle[member["team"]] / offered if offered > 0 else 0.0
        member["lent_gpus"] = _gpus(borrowed * share)
    return {
        "cohort": name,
        "nominal_gpus": _gpus(sum(quotas[m["team"]].gpus for m in members)),
        "used_gpus": _gpus(sum(m["used_gpus"] for m in members)),
        "borrowed_gpus": _gpus(borrowed),
        "waiting_jobs": sum(m["waiting_jobs"] for m in members),
        "waiting_gpus": _gpus(sum(m["waiting_gpus"] for m in members)),
        "teams": members,
    }


def _gpus(value: float) -> float:
    return round(value, 2)
