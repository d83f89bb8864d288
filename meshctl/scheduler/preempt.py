"""Preemption: free a node for a job that policy lets preempt, at the least cost.

On every node the job could use (healthy, usable, right GPU), victims are taken cheapest
first (lowest priority, then least work lost since their last checkpoint) until the job
fits. A victim must have strictly lower priority and be allowed by a preemption rule. Among
nodes, the victim set with the lowest (any job stopped for good, highest victim priority,
GPU-seconds lost, number of jobs) wins. A gang repeats this for each of its nodes, never
sharing victims.

An elastic job (``Running.elastic_min``) is asked first, and lends the node instead of being
preempted: it loses a worker, not its run (it checkpoints before it stops, and resumes on the
rest), so a set of loans only is cheaper than any with a job stopped for good. It lends one
node at a time, to any number of preemptors, down to its ``elastic_min`` nodes; one that has
lent this cycle is never also preempted in it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass

from meshctl.scheduler.filters import fit
from meshctl.scheduler.request import Request
from meshctl.scheduler.snapshot import Running
from meshctl.scheduler.working import NodeState

MayPreempt = Callable[[Running], tuple[bool, float, str | None]]  # allowed, grace_s, rule


@dataclass(frozen=True, slots=True)
class VictimSet:
    node: str
    victims: tuple[Running, ...]
    grace_s: tuple[float, ...]
    rules: tuple[str | None, ...]
    cost: tuple[int, int, float, int]
    lends: tuple[bool, ...] = ()  # per victim: it lends the node (Shrink), else it is preempted


def lost_work_s(job: Running, now_s: float) -> float:
    """GPU-seconds a victim loses: time since its last checkpoint (or start) times its GPUs."""
    checkpointed = job.checkpointed_at(now_s)
    since = checkpointed if checkpointed is not None else job.started_at_s
    return max(0.0, now_s - since) * job.gpus


def can_lend(victim: Running, lent: Mapping[str, int]) -> bool:
    """An elastic job with more nodes than its least, counting those it lends this cycle."""
    least = victim.elastic_min
    return least is not None and len(victim.allocations) - lent.get(victim.job_id, 0) > least


def _candidates(
    victims: Sequence[Running], priority: int, taken: set[str], lent: Mapping[str, int]
) -> list[Running]:
    """Who may give way: lower priority, not taken already; one that lent this cycle only
    while it can lend again."""
    return [
        v
        for v in victims
        if v.priority < priority
        and not v.leaving  # on its way out already (preempted, resizing): never again
        and v.job_id not in taken
        and (v.job_id not in lent or can_lend(v, lent))
    ]


def _on_node(
    node: NodeState,
    req: Request,
    victims: Sequence[Running],
    now_s: float,
    allowed: MayPreempt,
    taken: set[str],
    priority: int,
    lent: Mapping[str, int],
) -> VictimSet | None:
    victims = _candidates(victims, priority, taken, lent)
    if not victims:
        return None  # nothing here it could take: no copy, no policy question
    twin = node.copy()
    chosen: list[Running] = []
    graces: list[float] = []
    rules: list[str | None] = []
    lends: list[bool] = []

    def order(v: Running) -> tuple[bool, int, float, str]:
        return (not can_lend(v, lent), v.priority, lost_work_s(v, now_s), v.job_id)

    for victim in sorted(victims, key=order):
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
        lends.append(can_lend(victim, lent))
    if not chosen or fit.check(req, twin) is not None:
        return None
    stopped = [v for v, lends_it in zip(chosen, lends, strict=True) if not lends_it]
    cost = (
        1 if stopped else 0,
        max(v.priority for v in chosen),
        sum(lost_work_s(v, now_s) for v in stopped),
        len(chosen),
    )
    return VictimSet(node.name, tuple(chosen), tuple(graces), tuple(rules), cost, tuple(lends))


def _bound(
    victims: Sequence[Running],
    priority: int,
    taken: set[str],
    now_s: float,
    lent: Mapping[str, int],
) -> tuple[int, int, float, int] | None:
    """A lower bound of the cost of any victim set on a node: loans only if any victim can
    lend, its victims' lowest priority, least work lost (none, if loans), one job; None when
    the node has no possible victim. Cheap: no policy."""
    lowest, least, lender = None, None, False
    for v in _candidates(victims, priority, taken, lent):
        lost = lost_work_s(v, now_s)
        lender = lender or can_lend(v, lent)
        lowest = v.priority if lowest is None else min(lowest, v.priority)
        least = lost if least is None else min(least, lost)
    if lowest is None or least is None:
        return None
    return (0, lowest, 0.0, 1) if lender else (1, lowest, least, 1)


def plan_preemption(
    req: Request,
    nodes: Sequence[NodeState],
    running_on: Mapping[str, list[Running]],
    now_s: float,
    allowed: MayPreempt,
    priority: int,
    lent: MutableMapping[str, int] | None = None,
) -> list[VictimSet] | None:
    """Victim sets on ``req.nodes`` distinct nodes, cheapest first; None if it cannot be done.
    Only jobs of lower ``priority`` than the preemptor's are ever victims. ``lent``: nodes
    each elastic job lends this cycle so far, updated with the loans of the answer.

    Branch and bound: nodes are tried in order of a cheap lower bound of their cost, and the
    search stops once the next bound is above the best set found, so the policy (``allowed``)
    is asked about the victims of a few nodes, not of the whole pool. The answer is the
    cheapest set, as if every node had been tried."""
    taken: set[str] = set()
    picked: list[VictimSet] = []
    lending: dict[str, int] = dict(lent or {})
    for _ in range(req.nodes):
        used = {p.node for p in picked}
        bounded = []
        for node in nodes:
            if node.name in used:
                continue
            bound = _bound(running_on.get(node.name, []), priority, taken, now_s, lending)
            if bound is not None:
                bounded.append((bound, node.name, node))
        bounded.sort(key=lambda b: (b[0], b[1]))
        best: VictimSet | None = None
        for bound, name, node in bounded:
            if best is not None and (bound, name) > (best.cost, best.node):
                break
            victims = running_on.get(name, [])
            found = _on_node(node, req, victims, now_s, allowed, taken, priority, lending)
            if found is not None and (
                best is None or (found.cost, found.node) < (best.cost, best.node)
            ):
                best = found
        if best is None:
            return None
        picked.append(best)
        for victim, lends in zip(best.victims, best.lends, strict=True):
            if lends:
                lending[victim.job_id] = lending.get(victim.job_id, 0) + 1
            else:
                taken.add(victim.job_id)
    if lent is not None:
        lent.update(lending)
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
