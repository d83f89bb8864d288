"""The controller's deciding half: what the world looks like -> what to do. Pure.

``decide(world, rules)`` first brings every job in line with what its pool reports
(``states.py``: a Ray job that started, finished, failed, was lost or must be stopped), then
the jobs that must leave their nodes (``leaving.py``: drained, noticed spot instances,
unhealthy or dead nodes, hangs) and the limits of the lifecycle (a deadline that came, a
maximum runtime run past), then one scheduling cycle through the one lifecycle
(``scheduling.py``), and last the idle cloud instances. The loop (``loop.py``) applies the
step; a step applied twice does no harm, because every action is keyed by a deterministic
submission id or guarded by the record's version.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import replace

from meshctl.controller.deciding.dispatch import placement_nodes, pool_mtbf_s, submission
from meshctl.controller.deciding.idle import idle_pools
from meshctl.controller.deciding.leaving import (
    STOP_MARGIN_S,
    UNHEALTHY_GRACE_S,
    dead_nodes,
    hung,
    reclaimed,
    unhealthy,
)
from meshctl.controller.deciding.nodes import observed_nodes
from meshctl.controller.deciding.scheduling import scheduling
from meshctl.controller.deciding.states import FINISHED, HOLDING, QUEUED, reconcile
from meshctl.controller.deciding.step import (
    AttemptChange,
    CheckpointRequest,
    DecisionNote,
    Dispatch,
    Launch,
    NodeChange,
    Replacement,
    Resubmit,
    RuleError,
    Rules,
    Step,
    Stop,
    Teardown,
    Transition,
    launch_request_id,
    submission_id,
)
from meshctl.controller.deciding.world import JobView, World
from meshctl.lifecycle import effects
from meshctl.state.records import JobState, NodeRecord, NodeState

__all__ = [  # what a step is, and the helpers, are read from here by the loop and the CLI
    "FINISHED",
    "HOLDING",
    "QUEUED",
    "STOP_MARGIN_S",
    "UNHEALTHY_GRACE_S",
    "AttemptChange",
    "CheckpointRequest",
    "DecisionNote",
    "Dispatch",
    "Launch",
    "NodeChange",
    "Replacement",
    "Resubmit",
    "RuleError",
    "Rules",
    "Step",
    "Stop",
    "Teardown",
    "Transition",
    "decide",
    "launch_request_id",
    "observed_nodes",
    "pool_mtbf_s",
    "submission",
    "submission_id",
]


def decide(world: World, rules: Rules) -> Step:
    step = Step()
    holding: list[JobView] = []
    queued: list[JobView] = []
    serving: list[JobView] = []
    for view in world.jobs:
        kept = reconcile(view, world, rules, step)
        if kept == "holding":
            holding.append(view)
        elif kept == "queued":
            queued.append(view)
        elif kept == "service":
            serving.append(view)
    queued += _requeued(world, step)  # they wait from now on: this cycle decides them too
    _drain_deadlines(world, holding, step)
    reclaimed(world, rules, holding, step)
    unhealthy(world, rules, holding, step)
    hung(world, rules, holding, step)
    dead_nodes(world, rules, holding, step, serving)
    holding = _replaced(holding, step)  # the cycle sees replaced nodes held already
    _overran(world, holding, step)
    queued = _past_deadline(world, queued, step)
    estimator = world.estimator.plus(step.successes)  # what ended this cycle counts already
    if world.hold is None:
        scheduling(world, rules, holding, queued, step, estimator, serving)
    else:  # nothing new starts, nothing is preempted for it: the running jobs may end
        held = {"status": "held", "reason": world.hold}
        step.decisions += [DecisionNote(v.record.id, "held", world.hold, held) for v in queued]
    idle_pools(world, rules, [*holding, *serving], step)
    return step


def _requeued(world: World, step: Step) -> list[JobView]:
    """The jobs this step requeues, as they will be stored: waiting, their attempt knowing
    the failures counted so far (what their next attempt starts from)."""
    again = {t.job_id for t in step.transitions if t.to is JobState.REQUEUED}
    failures = {c.attempt_id: c.failures for c in step.attempts if c.failures is not None}
    views = []
    for view in world.jobs:
        if view.record.id not in again:
            continue
        record = replace(view.record, state=JobState.REQUEUED)
        attempt = view.attempt
        if attempt is not None and attempt.id in failures:
            attempt = replace(
                attempt, detail=replace(attempt.detail, failures=failures[attempt.id])
            )
        views.append(replace(view, record=record, attempt=attempt))
    return views


def _replaced(holding: Sequence[JobView], step: Step) -> list[JobView]:
    """The jobs that hold nodes, those this step replaced on their new nodes."""
    moved = {r.attempt_id: r for r in step.replacements}
    out = []
    for view in holding:
        attempt = view.attempt
        found = moved.get(attempt.id) if attempt is not None else None
        if attempt is not None and found is not None:
            view = replace(view, attempt=found.onto(attempt))
        out.append(view)
    return out


def _overran(world: World, holding: Sequence[JobView], step: Step) -> None:
    """A running job past its declared maximum runtime fails (the lifecycle's rule); its Ray
    job is stopped from the next cycle on, like any finished job's that still runs."""
    moved = {t.job_id for t in step.transitions}
    for view in holding:
        attempt = view.attempt
        if view.record.state is not JobState.RUNNING or attempt is None or view.record.id in moved:
            continue
        limit = view.job.spec.limits.max_runtime_s
        over = effects.overran(view.record.id, attempt.started_at_s, limit, world.now_s)
        if over is not None:
            step.transitions.append(Transition(view.record.id, JobState.FAILED, over.reason))
            step.attempts.append(AttemptChange(attempt.id, None, stop_at_s=world.now_s))


def _past_deadline(world: World, queued: Sequence[JobView], step: Step) -> list[JobView]:
    """Jobs that have never started and whose deadline has come fail; the others wait on (a
    job that has started once met its deadline, whatever happens to it later)."""
    waiting = []
    for view in queued:
        deadline = view.job.spec.limits.deadline if view.attempt is None else None
        at = deadline.timestamp() if deadline is not None else None
        said = deadline.astimezone(dt.UTC).isoformat() if deadline is not None else ""
        failed = effects.past_deadline(view.record.id, at, world.now_s, said)
        if failed is None:
            waiting.append(view)
        else:
            step.transitions.append(Transition(view.record.id, JobState.FAILED, failed.reason))
    return waiting


def _drain_deadlines(world: World, holding: Sequence[JobView], step: Step) -> None:
    """A draining node whose deadline has passed is drained: the jobs still on it are evicted
    (then requeued) and the node becomes ``drained``, which takes no new work either, until
    it is uncordoned. A job found on a drained node later (placed as the drain began) is
    evicted too."""
    expired = {key for key, node in world.nodes.items() if _drain_over(node, world.now_s)}
    if not expired:
        return
    evicted: dict[str, int] = dict.fromkeys(expired, 0)
    for view in holding:
        if view.record.state in (JobState.PREEMPTED, JobState.EVICTED) or view.attempt is None:
            continue
        nodes = {f"{view.attempt.pool}/{n}" for n in placement_nodes(view.attempt)}
        if nodes & expired:
            node = sorted(nodes & expired)[0]
            evicted[node] += 1
            step.transitions.append(
                Transition(view.record.id, JobState.EVICTED, f"node {node} drained")
            )
    for key in sorted(k for k in expired if world.nodes[k].state == NodeState.DRAINING):
        jobs = f"{evicted[key]} job{'s' if evicted[key] != 1 else ''}"
        why = f"drain deadline passed; {jobs} evicted"
        step.nodes.append(NodeChange(key, NodeState.DRAINED, why))


def _drain_over(node: NodeRecord, now_s: float) -> bool:
    if node.state == NodeState.DRAINED:
        return True
    deadline = node.detail.deadline_s
    return node.state == NodeState.DRAINING and deadline is not None and now_s >= deadline
