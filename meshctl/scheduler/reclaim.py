"""Reclaim within a cohort: a team below its nominal quota takes back the GPUs it lent.

Borrowing (``meshctl.policy.tenancy``) lets a team run beyond its nominal quota on what the
other teams of its cohort leave idle. When one of those teams comes back, its jobs would wait
until the borrower's end by themselves; with reclaim they take the GPUs back at once, as
Kueue's ``reclaimWithinCohort`` does:

- who may reclaim: a job whose team has a quota in a cohort and ``reclaim`` other than
  ``never``, and that fits within its team's nominal quota with what the team holds and
  keeps (its jobs on their way out not counted). Beyond that the GPUs are not the team's own.
- who gives way: a running job of another team of the cohort while that team is still
  borrowing (holding more than its nominal quota, counting neither its jobs on their way out
  nor those this cycle took already), whatever its priority (``reclaim: any``) or only of
  lower priority than the reclaimer's (``lower-priority``); one that has run at least
  ``spec.reclaim.min_runtime_s`` since it (re)started. So a borrower never loses more than
  it borrowed but for its last job, which may hold some of its own quota too.
- in which order: jobs with a checkpoint (recorded or planned) before those with none, then
  the least work lost since the last checkpoint (GPU-seconds), until the job fits; among
  nodes, the set losing least (jobs without a checkpoint, then GPU-seconds lost, then jobs
  stopped) wins. A gang does this for each of its nodes, never sharing victims.

The victims are preempted as any other (``Preempt``, with ``spec.reclaim.grace_s`` to
checkpoint), and the job waits for its nodes as a preemptor does. Pure.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from meshctl.model.policy import Reclaim, TeamQuota
from meshctl.policy.tenancy import EPS
from meshctl.scheduler.filters import fit
from meshctl.scheduler.preempt import lost_work_s
from meshctl.scheduler.request import Request
from meshctl.scheduler.snapshot import Pending, Running
from meshctl.scheduler.working import NodeState


@dataclass(frozen=True, slots=True)
class Taken:
    """The jobs one node gives up for the reclaimer, and what that costs."""

    node: str
    victims: tuple[Running, ...]
    cost: tuple[int, float, int]  # jobs without a checkpoint, GPU-seconds lost, jobs


@dataclass(frozen=True, slots=True)
class Reclaimed:
    """What a reclaim takes, node by node, and the team's standing that allows it."""

    taken: tuple[Taken, ...]
    team: str
    holds_gpus: float  # what the team holds and keeps, before this job
    nominal_gpus: float

    @property
    def reason(self) -> str:
        """The rule a victim's reason names: ``reclaimed for team vision, below its quota:
        2 of 4 GPUs``."""
        return (
            f"reclaimed for team {self.team}, below its quota: "
            f"{self.holds_gpus:g} of {self.nominal_gpus:g} GPUs"
        )


def no_checkpoint(job: Running, now_s: float) -> bool:
    """A job that has saved no checkpoint and has none planned: all its work is lost."""
    return job.checkpointed_at(now_s) is None and job.checkpoints is None


def borrowing(
    team: str, quotas: Mapping[str, TeamQuota], holds: Callable[[str], float]
) -> dict[str, float]:
    """The other teams of ``team``'s cohort that run beyond their nominal quota now, with
    how far beyond (GPUs)."""
    cohort = quotas[team].cohort
    over: dict[str, float] = {}
    for other, quota in quotas.items():
        if other != team and quota.cohort == cohort:
            beyond = holds(other) - quota.gpus
            if beyond > EPS:
                over[other] = beyond
    return over


def take_back(
    job: Pending,
    req: Request,
    nodes: Sequence[NodeState],
    running_on: Mapping[str, Sequence[Running]],
    quotas: Mapping[str, TeamQuota],
    settings: Reclaim,
    holds: Callable[[str], float],
    taken: set[str],
    now_s: float,
) -> Reclaimed | None:
    """What ``job`` takes back from the borrowers of its cohort to fit on ``req.nodes`` of
    ``nodes``; None when its team may not reclaim, is owed nothing, or no set of victims
    frees enough. ``holds``: the GPUs a team holds and keeps this cycle; ``taken``: the jobs
    already stopped this cycle (never victims again)."""
    quota = quotas.get(job.team)
    if quota is None or quota.cohort is None or quota.reclaim == "never":
        return None
    own = holds(job.team)
    if own + req.total_gpus > quota.gpus + EPS:
        return None  # beyond its nominal quota: those GPUs are not its own to take back
    room = borrowing(job.team, quotas, holds)
    if not room:
        return None

    def may_give(victim: Running) -> bool:
        return (
            victim.team in room
            and not victim.leaving
            and victim.job_id not in taken
            and now_s - victim.started_at_s >= settings.min_runtime_s
            and (quota.reclaim == "any" or victim.priority < job.priority)
        )

    picked: list[Taken] = []
    gone = set(taken)
    for _ in range(req.nodes):
        used = {t.node for t in picked}
        best: Taken | None = None
        for node in nodes:
            if node.name in used:
                continue
            here = [
                v for v in running_on.get(node.name, ()) if v.job_id not in gone and may_give(v)
            ]
            found = _on_node(node, req, here, room, now_s) if here else None
            if found is not None and (best is None or _cheaper(found, best)):
                best = found
        if best is None:
            return None
        picked.append(best)
        for victim in best.victims:
            gone.add(victim.job_id)
            room[victim.team] -= victim.gpus
    return Reclaimed(tuple(picked), job.team, own, quota.gpus)


def _cheaper(found: Taken, best: Taken) -> bool:
    return (found.cost, found.node) < (best.cost, best.node)


def _on_node(
    node: NodeState,
    req: Request,
    victims: Sequence[Running],
    room: Mapping[str, float],
    now_s: float,
) -> Taken | None:
    """The victims on ``node`` that free it for ``req``, cheapest first, each of a team still
    borrowing after the ones before; None when they cannot free it."""
    twin = node.copy()
    left = dict(room)
    chosen: list[Running] = []

    def order(v: Running) -> tuple[bool, float, str]:
        return (no_checkpoint(v, now_s), lost_work_s(v, now_s), v.job_id)

    for victim in sorted(victims, key=order):
        if fit.check(req, twin) is None:
            break
        if left[victim.team] <= EPS:
            continue  # its team no longer borrows: the rest of what it holds is its own
        for alloc in victim.allocations:
            if alloc.node == node.name:
                twin.release(alloc)
        left[victim.team] -= victim.gpus
        chosen.append(victim)
    if not chosen or fit.check(req, twin) is not None:
        return None
    cost = (
        sum(no_checkpoint(v, now_s) for v in chosen),
        sum(lost_work_s(v, now_s) for v in chosen),
        len(chosen),
    )
    return Taken(node.name, tuple(chosen), cost)
