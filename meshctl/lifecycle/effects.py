"""What a plan and the world's events do to jobs: one set of rules for the controller and the
simulator.

- A placement starts the job; a launch asks for cloud capacity.
- A preemption gives the victim its grace: it is asked to checkpoint now when the grace is
  more than nothing, and stopped when the grace ends.
- An elastic job that lends nodes (``Shrink``) leaves the same way, resized: every node it
  lends in one plan in one ``Leave``; one that grows (``Grow``) is asked to checkpoint and
  stopped after its pool's grow grace (``graces.grow_s`` in mesh.yaml), the free nodes held
  for it meanwhile. Either resumes from that checkpoint at its new size; a resize is never a
  failure.
- A spot notice preempts the jobs on the instance: asked to checkpoint (however short the
  notice), stopped ``STOP_MARGIN_S`` before the provider takes the instance back (at once
  when the notice is shorter than that).
- A node found unhealthy evicts its jobs after its pool's unhealthy grace to checkpoint
  (``graces.unhealthy_s``); a node that died, an instance taken back, or the scheduler's
  eviction stops them at once. A train job whose node died goes on inside its attempt on a
  free node instead, where its pool and the free nodes allow (``lost_nodes``,
  ``meshctl.lifecycle.replacing``).
- When a job's attempt has ended early it is requeued, or failed once its failures (evictions;
  preemptions are not the job's failure) pass its ``max_restarts``.
- A job that has not started by its ``limits.deadline`` fails: it cannot start before it
  (one that started once met it, whatever happens to it later).
- A running job past its ``limits.max_runtime_s`` is stopped and fails.

Pure: time is an argument.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

from meshctl.lifecycle.actions import Action, Fail, Launch, Leave, Left, Replace, Requeue, Start
from meshctl.lifecycle.replacing import Free, stand_ins
from meshctl.model.mesh import Graces
from meshctl.scheduler import Allocation, Evict, Grow, Place, Plan, Preempt, Provision, Shrink

STOP_MARGIN_S = 15.0  # a job on a spot instance given notice is stopped this long before it goes
# a pool's graces unless its mesh.yaml entry sets them
UNHEALTHY_GRACE_S = Graces().unhealthy_s  # a job on a node found unhealthy: checkpoint, then go
GROW_GRACE_S = Graces().grow_s  # an elastic job growing back checkpoints this long, then stops


def of_plan(
    plan: Plan, leaving: Iterable[str] = (), grow_grace_s: Mapping[str, float] | None = None
) -> list[Start | Leave | Launch]:
    """The plan's actions as the lifecycle carries them out, in the plan's order; a victim or
    an evicted job already on its way out (``leaving``) is left alone. ``grow_grace_s``: each
    pool's grow grace (``GROW_GRACE_S`` for a pool it does not name)."""
    graces = grow_grace_s or {}
    now, gone = plan.now_s, set(leaving)
    out: list[Start | Leave | Launch] = []
    loans: dict[str, list[Shrink]] = defaultdict(list)
    for action in plan.actions:
        if isinstance(action, Shrink) and action.victim_job_id not in gone:
            loans[action.victim_job_id].append(action)
    for action in plan.actions:
        if isinstance(action, Place):
            out.append(Start(action.job_id, action.pool, action.allocations, action.backfill))
        elif isinstance(action, Preempt) and action.victim_job_id not in gone:
            gone.add(action.victim_job_id)
            out.append(preempted(action, now))
        elif isinstance(action, Shrink) and action.victim_job_id in loans:
            out.append(lends(loans.pop(action.victim_job_id), now))
            gone.add(action.victim_job_id)
        elif isinstance(action, Grow) and action.job_id not in gone:
            gone.add(action.job_id)
            out.append(grows(action, now, graces.get(action.pool, GROW_GRACE_S)))
        elif isinstance(action, Evict) and action.job_id not in gone:
            gone.add(action.job_id)
            out.append(Leave(action.job_id, Left.EVICTED, action.reason, now, False))
        elif isinstance(action, Provision):
            out.append(
                Launch(
                    action.job_id,
                    action.pool,
                    action.node_type,
                    action.count,
                    action.spot,
                    action.usd_per_hour,
                )
            )
    return out


def preempted(action: Preempt, now_s: float) -> Leave:
    rule = f" ({action.rule})" if action.rule else ""
    return Leave(
        action.victim_job_id,
        Left.PREEMPTED,
        f"for {action.for_job_id}{rule}",
        now_s + action.grace_s,
        action.grace_s > 0,
        action.for_job_id,
    )


def lends(shrinks: Sequence[Shrink], now_s: float) -> Leave:
    """An elastic job lends these nodes: it leaves once, after the shortest grace of them
    (asked to checkpoint when that is more than nothing), and resumes on the rest."""
    first = shrinks[0]
    grace = min(s.grace_s for s in shrinks)
    lent = tuple((s.node, s.for_job_id) for s in shrinks)
    borrowers = ", ".join(sorted({s.for_job_id for s in shrinks}))
    rule = f" ({first.rule})" if first.rule else ""
    why = f"lending {len(lent)} node(s) to {borrowers}{rule}"
    return Leave(
        first.victim_job_id, Left.RESIZED, why, now_s + grace, grace > 0, first.for_job_id, lent
    )


def grows(action: Grow, now_s: float, grace_s: float = GROW_GRACE_S) -> Leave:
    nodes = tuple(a.node for a in action.allocations)
    why = f"growing onto {', '.join(nodes)}"
    return Leave(action.job_id, Left.RESIZED, why, now_s + grace_s, True, grows_onto=nodes)


def noticed(job_id: str, node: str, taken_at_s: float, now_s: float) -> Leave:
    """A job on a spot instance given notice: the instance goes at ``taken_at_s``. It is
    asked to checkpoint however short the notice: the node goes anyway, the request costs
    nothing, and what it manages to write before it stops is saved."""
    stop_at = max(now_s, taken_at_s - STOP_MARGIN_S)
    why = f"spot instance {node} is being taken back"
    return Leave(job_id, Left.PREEMPTED, why, stop_at, True)


def unhealthy(
    job_id: str, node: str, why: str, now_s: float, grace_s: float = UNHEALTHY_GRACE_S
) -> Leave:
    reason = f"node {node} is unhealthy: {why}"
    return Leave(job_id, Left.EVICTED, reason, now_s + grace_s, True)


def node_died(job_id: str, node: str, now_s: float) -> Leave:
    return Leave(job_id, Left.EVICTED, f"node {node} is dead", now_s, False)


def lost_nodes(
    job_id: str,
    pool: str,
    allocations: Sequence[Allocation],
    dead: Sequence[str],
    replaceable: bool,
    free: Sequence[Free],
    now_s: float,
) -> Replace | Leave:
    """A job whose nodes ``dead`` died: replaced inside its attempt when it is ``replaceable``
    (a train job whose driver lives apart, with checkpoint storage) and each dead node has a
    stand-in among ``free``; else evicted at once."""
    moved = stand_ins(allocations, dead, free) if replaceable else None
    if moved is None:
        return node_died(job_id, dead[0], now_s)
    by = [a.node for a, b in zip(moved, allocations, strict=True) if a.node != b.node]
    why = f"node {', '.join(dead)} is dead; {', '.join(by)} replaces it inside the attempt"
    return Replace(job_id, pool, tuple(dead), moved, why)


def taken_back(job_id: str, node: str, now_s: float) -> Leave:
    return Leave(job_id, Left.PREEMPTED, f"spot instance {node} was taken back", now_s, False)


def requeue_or_fail(
    job_id: str, left: Left, why: str, failures_before: int, max_restarts: int
) -> tuple[Requeue | Fail, int]:
    """After an attempt that ended early: a failure (an eviction) counts; a job whose failures
    pass ``max_restarts`` fails, any other waits again. Also: its failures now."""
    failures = failures_before + (1 if left is Left.EVICTED else 0)
    if failures > max_restarts:
        reason = f"{why}; {failures} failures, max_restarts {max_restarts}"
        return Fail(job_id, reason, "max_restarts"), failures
    return Requeue(job_id, why, failures), failures


def past_deadline(
    job_id: str, deadline_s: float | None, now_s: float, said: str = ""
) -> Fail | None:
    """A waiting job whose deadline has come: it can no longer start before it. ``said``: the
    deadline as the job's file gives it, for the reason."""
    if deadline_s is None or now_s < deadline_s:
        return None
    return Fail(job_id, f"did not start before its deadline {said}".rstrip(), "deadline")


def overran(
    job_id: str, started_at_s: float | None, max_runtime_s: float | None, now_s: float
) -> Fail | None:
    """A running job past its declared maximum runtime: stopped, and failed."""
    if started_at_s is None or max_runtime_s is None or now_s < started_at_s + max_runtime_s:
        return None
    reason = f"ran past its max_runtime_s of {max_runtime_s:g} s"
    return Fail(job_id, reason, "max_runtime", stop=True)


def leaving_jobs(actions: Sequence[Action]) -> set[str]:
    """The jobs these actions make leave (or stop): not to be chosen again this cycle."""
    return {a.job_id for a in actions if isinstance(a, Leave) or (isinstance(a, Fail) and a.stop)}
