"""What the controller observed that a cycle must see first: the jobs it requeues waiting as
they will be stored, the jobs replaced on their new nodes, and a drain whose deadline has
passed evicting the jobs still on its node. Pure, like ``decide``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from meshctl.controller.deciding.dispatch import placement_nodes
from meshctl.controller.deciding.step import NodeChange, Step, Transition
from meshctl.controller.deciding.world import JobView, World
from meshctl.state.records import JobState, NodeRecord, NodeState


def requeued(world: World, step: Step) -> list[JobView]:
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


def on_new_nodes(holding: Sequence[JobView], step: Step) -> list[JobView]:
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


def drain_deadlines(world: World, holding: Sequence[JobView], step: Step) -> None:
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
