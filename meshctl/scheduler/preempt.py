"""Preemption: free a node for a job that policy lets preempt, at the least cost.

On every node the job could use (healthy, usable, right GPU), victims are taken cheapest
first (lowest priority, then least work lost since their last checkpoint) until the job
fits. A victim must have strictly lower priority and be allowed by a preemption rule. Among
nodes, the victim set with the lowest (highest victim priority, GPU-seconds lost, number of
jobs) wins. A gang repeats this for each of its nodes, never sharing victims.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from meshctl.scheduler.filters import fit
from meshctl.scheduler.request import Request
from meshctl.scheduler.snapshot import Running
from meshctl.scheduler.state import NodeState

MayPreempt = Callable[[Running], tuple[bool, float, str | None]]  # allowed, grace_s, rule


@dataclass(frozen=True, slots=True)
class VictimSet:
    node: str
    victims: tuple[Running, ...]
    grace_s: tuple[float, ...]
    rules: tuple[str | None, ...]
    cost: tuple[int, float, int]


def lost_work_s(job: Running, now_s: float) -> float:
    """GPU-seconds a victim loses: time since its last checkpoint (or start) times its GPUs."""
    checkpointed = job.checkpointed_at(now_s)
    since = checkpointed if checkpointed is not None else job.started_at_s
    return max(0.0, now_s - since) * job.gpus


def _on_node(
    node: NodeState,
    req: Request,
    victims: Sequence[Running],
    now_s: float,
    allowed: MayPreempt,
    taken: set[str],
    priority: int,
) -> VictimSet | None:
    victims = [v for v in victims if v.priority < priority and v.job_id not in taken]
    if not victims:
        return None  # nothing here it could take: no copy, no policy question
    twin = node.copy()
    chosen: list[Running] = []
    graces: list[float] = []
    rules: list[str | None] = []
    for victim in sorted(victims, key=lambda v: (v.priority, lost_work_s(v, now_s), v.job_id)):
        if fit.check(req, twin) is None:
            break
        ok, grace, rule = allowed(victim)
        if not ok:
            continue
        for alloc in victim.allocations:
            if alloc.node == node.name:
                twin.release(alloc)
        chosen.append(victim)
        graces.append(grace)
        rules.append(rule)
    if not chosen or fit.check(req, twin) is not None:
        return None
    cost = (
        max(v.priority for v in chosen),
        sum(lost_work_s(v, now_s) for v in chosen),
        len(chosen),
    )
    return VictimSet(node.name, tuple(chosen), tuple(graces), tuple(rules), cost)


def _bound(
    victims: Sequence[Running], priority: int, taken: set[str], now_s: float
) -> tuple[int, float, int] | None:
    """A lower bound of the cost of any victim set on a node: its victims' lowest priority,
    least work lost, one job; None when the node has no possible victim. Cheap: no policy."""
    lowest, least = None, None
    for v in victims:
        if v.priority < priority and v.job_id not in taken:
            lost = lost_work_s(v, now_s)
            lowest = v.priority if lowest is None else min(lowest, v.priority)
            least = lost if least is None else min(least, lost)
    return None if lowest is None or least is None else (lowest, least, 1)


def plan_preemption(
    req: Request,
    nodes: Sequence[NodeState],
    running_on: Mapping[str, list[Running]],
    now_s: float,
    allowed: MayPreempt,
    priority: int,
) -> list[VictimSet] | None:
    """Victim sets on ``req.nodes`` distinct nodes, cheapest first; None if it cannot be done.
    Only jobs of lower ``priority`` than the preemptor's are ever victims.

    Branch and bound: nodes are tried in order of a cheap lower bound of their cost, and the
    search stops once the next bound is above the best set found, so the policy (``allowed``)
    is asked about the victims of a few nodes, not of the whole pool. The answer is the
    cheapest set, as if every node had been tried."""
    taken: set[str] = set()
    picked: list[VictimSet] = []
    for _ in range(req.nodes):
        used = {p.node for p in picked}
        bounded = []
        for node in nodes:
            if node.name in used:
                continue
            bound = _bound(running_on.get(node.name, []), priority, taken, now_s)
            if bound is not None:
                bounded.append((bound, node.name, node))
        bounded.sort(key=lambda b: (b[0], b[1]))
        best: VictimSet | None = None
        for bound, name, node in bounded:
            if best is not None and (bound, name) > (best.cost, best.node):
                break
            found = _on_node(node, req, running_on.get(name, []), now_s, allowed, taken, priority)
            if found is not None and (
                best is None or (found.cost, found.node) < (best.cost, best.node)
            ):
                best = found
        if best is None:
            return None
        picked.append(best)
        taken |= {v.job_id for v in best.victims}
    return picked


def freed_enough(
    req: Request, nominated: Sequence[NodeState], running_on: Mapping[str, list[Running]]
) -> bool:
    """Whether the nodes being freed for a job hold it once the jobs leaving them stop: then
    it waits for them, and takes no more victims."""
    fit_after = 0
    for node in nominated:
        twin = node.copy()
        for job in running_on.get(node.name, ()):
            if job.leaving:
                for alloc in job.allocations:
                    if alloc.node == node.name:
                        twin.release(alloc)
        fit_after += fit.check(req, twin) is None
    return fit_after >= req.nodes
