"""Two replays of one history compared job by job: what ``meshctl policy diff`` reports.

A job *moved* when the head's replay gave it another outcome than the base's: another pool,
refused where it was placed (or the reverse), preempted where it was not (or the reverse),
started where it never did (or the reverse). A job whose wait or cost changed only because
others moved is not a move; the summaries count it. The fidelity of the base's replay is
measured against what the history recorded: the share of the jobs that ran whose replay ran
them in the pool they really ran in, and how far the replay's start times are from the real
ones. Pure: no I/O, no clock.

Money: the whole spend is the simulator's ledger (instances billed while they run, idle or
not), per month (30 days) of the window. A job's own cost, for the per-team figures, is the
GPU-hours it held in a cloud pool at that pool's cheapest on-demand price per GPU-hour.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from meshctl.model.job import Job
from meshctl.policy.compiled import PolicySet
from meshctl.policy.evaluate import bind
from meshctl.policy.facts import MeshSnapshot
from meshctl.sim.core.config import Result, SimMesh, Totals
from meshctl.sim.core.jobs import JobResult
from meshctl.sim.core.replay import History, RecordedJob
from meshctl.sim.core.report import percentile
from meshctl.sim.core.workload import SimJob

MONTH_S = 30 * 86_400.0
KNOCK_ON = "no rule of its own: capacity other jobs' moves took or freed"


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one replay did with one job."""

    pool: str | None  # where it last ran; None: it never started
    wait_s: float | None  # first start minus submission
    cost_usd: float
    preempted: int
    refused: str | None  # why the scheduler refused it for good

    @property
    def started(self) -> bool:
        return self.pool is not None


def outcome_of(result: JobResult, prices: Mapping[str, float]) -> Outcome:
    """``prices``: USD per GPU-hour of each cloud pool (an on-prem pool costs nothing here)."""
    start = result.first_start_s
    pool = result.last_pool
    cost = result.held_gpu_s / 3600.0 * prices.get(pool, 0.0) if pool is not None else 0.0
    return Outcome(
        pool=pool,
        wait_s=None if start is None else start - result.job.arrival_s,
        cost_usd=cost,
        preempted=result.preempted,
        refused=result.rejected,
    )


Slim = tuple[float, int, list[tuple[Any, ...]], dict[str, float], int]


def slim(result: Result) -> Slim:
    """What the comparison reads of a run, small enough to send from another process: per
    job (id, priority, first start, end, refused, failed, last pool, preempted, GPU-seconds
    held, priority class) and the totals it reads."""
    jobs = [
        (r.job.id, r.priority, r.first_start_s, r.end_s, r.rejected, r.failed_reason,
         r.last_pool, r.preempted, r.held_gpu_s, r.priority_class)
        for r in result.jobs
    ]  # fmt: skip
    totals = result.totals
    return result.end_s, result.onprem_gpus, jobs, dict(totals.spend_usd), totals.budget_crossings


def rebuilt(data: Slim, jobs: Mapping[str, SimJob]) -> Result:
    """A run from ``slim``, its jobs joined to ``jobs`` again (no samples, no actions)."""
    end_s, onprem_gpus, rows, spend, crossings = data
    results = []
    for job_id, priority, start, end, rejected, failed, pool, preempted, held, klass in rows:
        result = JobResult(jobs[job_id], priority, start, end, rejected, failed)
        result.pools, result.last_pool = ({pool} if pool else set()), pool
        result.preempted, result.held_gpu_s = preempted, held
        result.priority_class = klass
        results.append(result)
    totals = Totals(spend_usd=spend, budget_crossings=crossings)
    return Result(end_s, results, [], totals, onprem_gpus)


def moved(before: Outcome, after: Outcome) -> bool:
    return (
        before.pool != after.pool
        or (before.refused is None) != (after.refused is None)
        or (before.preempted > 0) != (after.preempted > 0)
    )


def prices_of(mesh: SimMesh) -> dict[str, float]:
    """Each cloud pool's cheapest on-demand price per GPU-hour."""
    out: dict[str, float] = {}
    for offer in mesh.offers:
        if offer.gpus > 0:
            each = offer.on_demand_usd_per_hour / offer.gpus
            out[offer.pool] = min(out.get(offer.pool, each), each)
    return out


def rules_that_differ(
    base: PolicySet,
    head: PolicySet,
    configured: MeshSnapshot,
    model: Job,
    when: dt.datetime,
) -> list[str]:
    """The rules that decide differently for this job under the two sets, named as
    ``explain`` names them (``section/rule``): first those that match it under one set only
    (at its submission, on the mesh as configured); else those whose text differs between
    the sets (their outcome may turn on the mesh's state then, which the replay had); [] when
    no rule evaluated for it differs (a quota, a budget, or others' moves)."""
    sides = []
    for policies in (base, head):
        verdict = bind(policies, configured, when).evaluate(model)
        rows = {
            (section, rule.name, part, getattr(expr, "source", str(expr)), outcome == "matched")
            for section, rule, part, expr, (outcome, _), _pool, _scope in verdict.trace_rows
        }
        sides.append((verdict.priority_class, rows))
    (base_class, base_rows), (head_class, head_rows) = sides
    out = []
    if base_class != head_class:
        out.append(f"priority class {base_class or '-'} -> {head_class or '-'}")
    both = (("base", base_rows), ("head", head_rows))
    matched = {side: {r[:4] for r in rows if r[4]} for side, rows in both}
    texts = {side: {r[:4] for r in rows} for side, rows in both}
    named = _named(matched["base"] - texts["head"] | (matched["base"] - matched["head"]),
                   matched["head"] - matched["base"], "matches under {} only")  # fmt: skip
    if not named:
        named = _named(texts["base"] - texts["head"], texts["head"] - texts["base"], "{}")
    return out + named


def _named(
    base_only: set[tuple[str, str, str, str]], head_only: set[tuple[str, str, str, str]], how: str
) -> list[str]:
    """Rule names with the side they stand on: ``burst/spill (matches under base only)``;
    with ``how`` of ``{}``, rules added (head), removed (base) or changed (both)."""
    sides: dict[str, set[str]] = defaultdict(set)
    for side, rows in (("base", base_only), ("head", head_only)):
        for section, rule, _part, _expr in rows:
            sides[f"{section}/{rule}"].add(side)
    out = []
    for name in sorted(sides):
        both = len(sides[name]) == 2
        side = next(iter(sides[name]))
        if how == "{}":
            out.append(
                f"{name} ({'changed' if both else {'base': 'removed', 'head': 'added'}[side]})"
            )
        else:
            out.append(name if both else f"{name} ({how.format(side)})")
    return out


@dataclass(frozen=True, slots=True)
class Change:
    job_id: str
    team: str
    priority_class: str
    before: Outcome
    after: Outcome
    rules: tuple[str, ...]


def compare(
    history: History,
    base: Result,
    head: Result,
    mesh: SimMesh,
    rules_of: Callable[[str], Sequence[str]],
) -> dict[str, Any]:
    """The report (docs/JSON.md, ``PolicyDiff``): ``rules_of(job_id)``: the rules that
    decide differently for the job (``rules_that_differ``), asked of moved jobs only."""
    prices = prices_of(mesh)
    recorded = {j.id: j for j in history.jobs}
    before = {r.job.id: (r, outcome_of(r, prices)) for r in base.jobs if r.job.id in recorded}
    after = {r.job.id: (r, outcome_of(r, prices)) for r in head.jobs if r.job.id in recorded}
    changes = []
    for job_id in sorted(set(before) & set(after)):
        (result, b), (_, a) = before[job_id], after[job_id]
        if moved(b, a):
            rules = tuple(rules_of(job_id)) or (KNOCK_ON,)
            changes.append(Change(job_id, result.job.team, _class(result), b, a, rules))
    window_s = max(history.end_s - history.start_s, 1.0)
    groups = _groups(before, after, changes, window_s)
    spend = (_spend(base, window_s), _spend(head, window_s))
    return {
        "window": {
            "start_s": history.start_s,
            "end_s": history.end_s,
            "days": round(window_s / 86_400.0, 3),
        },
        "jobs_compared": len(set(before) & set(after)),
        "left_out": [{"reason": r, "jobs": n} for r, n in sorted(history.left_out.items())],
        "moved": len(changes),
        "spend_usd_per_month": {"base": round(spend[0], 2), "head": round(spend[1], 2)},
        "spend_delta_usd_per_month": round(spend[1] - spend[0], 2),
        "budget_crossings": {
            "base": base.totals.budget_crossings,
            "head": head.totals.budget_crossings,
        },
        "fidelity": fidelity(history.jobs, {k: v[1] for k, v in before.items()}, history),
        "groups": groups,
        "changes": [_change(c) for c in changes],
    }


def fidelity(
    jobs: Iterable[RecordedJob], replayed: Mapping[str, Outcome], history: History
) -> dict[str, Any]:
    """How close the base's replay is to what really happened: of the jobs that really ran
    (and that the replay ran), the share it ran in the pool they ran in; the error in their
    first start times (p50, p95, the most)."""
    ran = [j for j in jobs if j.pool is not None and j.id in replayed]
    same = sum(1 for j in ran if replayed[j.id].pool == j.pool)
    errors = sorted(
        abs((j.submitted_s + (replayed[j.id].wait_s or 0.0)) - j.started_s)
        for j in ran
        if j.started_s is not None and replayed[j.id].wait_s is not None
    )
    return {
        "jobs_that_ran": len(ran),
        "same_pool": same,
        "same_pool_share": round(same / len(ran), 4) if ran else 1.0,
        "start_error_p50_s": round(percentile(errors, 50), 1),
        "start_error_p95_s": round(percentile(errors, 95), 1),
        "start_error_max_s": round(errors[-1], 1) if errors else 0.0,
    }


def _class(result: JobResult) -> str:
    """Its priority class, as the policies gave it (its file's, else its kind's default);
    with none, its priority."""
    return result.priority_class or result.job.priority_class or f"priority {result.priority}"


def _spend(result: Result, window_s: float) -> float:
    return sum(result.totals.spend_usd.values()) * MONTH_S / window_s


def _groups(
    before: Mapping[str, tuple[JobResult, Outcome]],
    after: Mapping[str, tuple[JobResult, Outcome]],
    changes: Sequence[Change],
    window_s: float,
) -> list[dict[str, Any]]:
    """Per team and priority class: jobs, moved, GPU-hours in each cloud pool, spend, waits
    and preemptions, before and after."""
    keyed: dict[tuple[str, str], list[str]] = defaultdict(list)
    for job_id, (result, _) in before.items():
        if job_id in after:
            keyed[(result.job.team, _class(result))].append(job_id)
    moves: dict[tuple[str, str], int] = defaultdict(int)
    for c in changes:
        moves[(c.team, c.priority_class)] += 1
    out = []
    for (team, klass), ids in sorted(keyed.items()):
        sides = {}
        for name, side in (("base", before), ("head", after)):
            outcomes = [side[i][1] for i in ids]
            cloud: dict[str, float] = defaultdict(float)
            for i in ids:
                result, outcome = side[i]
                if outcome.pool is not None and outcome.cost_usd > 0:
                    cloud[outcome.pool] += result.held_gpu_s / 3600.0
            waits = sorted(o.wait_s for o in outcomes if o.wait_s is not None)
            sides[name] = {
                "cloud_gpu_hours": [
                    {"pool": p, "gpu_hours": round(h, 2)} for p, h in sorted(cloud.items())
                ],
                "spend_usd_per_month": round(
                    sum(o.cost_usd for o in outcomes) * MONTH_S / window_s, 2
                ),
                "wait_p50_s": round(percentile(waits, 50), 1),
                "wait_p95_s": round(percentile(waits, 95), 1),
                "preemptions": sum(o.preempted for o in outcomes),
                "refused": sum(1 for o in outcomes if o.refused is not None),
            }
        out.append(
            {
                "team": team,
                "priority_class": klass,
                "jobs": len(ids),
                "moved": moves[(team, klass)],
                "base": sides["base"],
                "head": sides["head"],
            }
        )
    return out


def _change(c: Change) -> dict[str, Any]:
    def side(o: Outcome) -> dict[str, Any]:
        return {
            "pool": o.pool,
            "wait_s": None if o.wait_s is None else round(o.wait_s, 1),
            "cost_usd": round(o.cost_usd, 2),
            "preempted": o.preempted > 0,
            "refused": o.refused,
        }

    return {
        "job_id": c.job_id,
        "team": c.team,
        "priority_class": c.priority_class,
        "base": side(c.before),
        "head": side(c.after),
        "rules": list(c.rules),
    }
