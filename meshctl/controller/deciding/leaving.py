"""Jobs that must leave their nodes, decided from what was observed: a spot instance given
notice (preempted, asked to checkpoint, stopped shortly before it goes), a node its probe
says is unhealthy (evicted after a grace to checkpoint), a train job that stopped reporting
(hung), a node that died or its instance taken back. What each does to a job (its stop time,
checkpoint or not) is the lifecycle's (``meshctl.lifecycle.effects``); ``leave`` writes it
into the step. Pure, like ``decide``."""

from __future__ import annotations

from collections.abc import Sequence

from meshctl.controller.deciding.dispatch import checkpoint_of, held_of, placement_nodes
from meshctl.controller.deciding.nodes import allocation_of
from meshctl.controller.deciding.step import (
    AttemptChange,
    CheckpointRequest,
    NodeChange,
    Replacement,
    Rules,
    Step,
    Transition,
)
from meshctl.controller.deciding.world import JobView, World
from meshctl.lifecycle import Leave, Left, Replace, effects
from meshctl.lifecycle.effects import STOP_MARGIN_S, UNHEALTHY_GRACE_S
from meshctl.lifecycle.replacing import Free
from meshctl.state.records import AttemptRecord, JobState, NodeState

__all__ = ["STOP_MARGIN_S", "UNHEALTHY_GRACE_S"]
ON_ITS_WAY = frozenset({JobState.ADMITTED, JobState.DISPATCHED, JobState.RUNNING})
STARTUP_ALLOWANCE_S = 600.0  # before its first report a run may be waiting for its workers
STATE_OF = {
    Left.PREEMPTED: JobState.PREEMPTED,
    Left.EVICTED: JobState.EVICTED,
    Left.RESIZED: JobState.PREEMPTED,  # it stops, and resumes at its new size
}


def reclaimed(world: World, rules: Rules, holding: Sequence[JobView], step: Step) -> None:
    """Jobs on a spot instance its provider has given notice to are preempted: asked to
    checkpoint now, stopped shortly before the instance goes (then requeued)."""
    if not world.reclaiming:
        return  # no notice given: no job to look at
    for view in holding:
        attempt = view.attempt
        if attempt is None or view.record.state not in ON_ITS_WAY:
            continue
        noticed = [
            (world.reclaiming[(attempt.pool, n)], n)
            for n in placement_nodes(attempt)
            if (attempt.pool, n) in world.reclaiming
        ]
        if not noticed:
            continue
        deadline, node = min(noticed)
        leave(view, rules, effects.noticed(view.record.id, node, deadline, world.now_s), step)


def unhealthy(world: World, rules: Rules, holding: Sequence[JobView], step: Step) -> None:
    """Nodes whose health probe says unhealthy leave service (and come back when it says
    healthy again); the jobs on them are asked to checkpoint, evicted and requeued."""
    for key, reason in sorted(world.health.items()):
        record = world.nodes.get(key)
        if record is not None and record.state != NodeState.UNHEALTHY:
            step.nodes.append(NodeChange(key, NodeState.UNHEALTHY, reason))
    for key, record in sorted(world.nodes.items()):
        if record.state == NodeState.UNHEALTHY and key not in world.health:
            again = "its health probe says healthy again"
            step.nodes.append(NodeChange(key, NodeState.READY, again))
    if not world.health:
        return  # no node is sick: no job to look at
    moved = {t.job_id for t in step.transitions}
    for view in holding:
        attempt = view.attempt
        if attempt is None or view.record.state not in ON_ITS_WAY or view.record.id in moved:
            continue
        sick = [n for n in placement_nodes(attempt) if f"{attempt.pool}/{n}" in world.health]
        if not sick or replaces_silent(world, attempt, sick):
            continue
        said = world.health[f"{attempt.pool}/{sick[0]}"]
        grace = rules.mesh.graces(attempt.pool).unhealthy_s
        leaving = effects.unhealthy(view.record.id, sick[0], said, world.now_s, grace)
        leave(view, rules, leaving, step)


def leave(view: JobView, rules: Rules, leaving: Leave, step: Step) -> None:
    """The job leaves (preempted or evicted): stopped at its stop time, asked to checkpoint
    now when the lifecycle says so."""
    attempt = view.attempt
    step.transitions.append(Transition(view.record.id, STATE_OF[leaving.left], leaving.reason))
    if attempt is None:
        return
    stop_at = leaving.stop_at_s
    step.attempts.append(
        AttemptChange(
            attempt.id,
            None,
            stop_at_s=stop_at,
            for_job=leaving.for_job,
            lent=leaving.lent,
            grows_onto=leaving.grows_onto,
        )
    )
    if leaving.checkpoint:
        resized = leaving.left is Left.RESIZED
        preempted = leaving.for_job and not resized
        why = f"preempted for {leaving.for_job}" if preempted else leaving.reason
        step.checkpoints.append(checkpoint_request(view, rules, attempt, why, stop_at))


def hung(world: World, rules: Rules, holding: Sequence[JobView], step: Step) -> None:
    """A train job with a hang timeout that reported no progress for that long is stopped
    and requeued: its next attempt resumes from its latest checkpoint."""
    moved = {t.job_id for t in step.transitions}
    for view in holding:
        attempt, train = view.attempt, view.job.spec.train
        if attempt is None or train is None or train.hang_timeout is None:
            continue
        if view.record.id in moved or not attempt.detail.checkpoint_uri:
            continue  # no checkpoint storage: no progress is recorded to judge by
        if view.record.state is not JobState.RUNNING or attempt.started_at_s is None:
            continue
        seen = world.progress.get(view.record.id)
        last, limit = attempt.started_at_s, max(train.hang_timeout, STARTUP_ALLOWANCE_S)
        if seen is not None and seen.attempt == attempt.number and seen.last_report_s:
            last, limit = max(last, seen.last_report_s), train.hang_timeout
            if seen.restarting_since is not None:  # Ray Train is bringing the workers back
                last, limit = max(last, seen.restarting_since), limit + STARTUP_ALLOWANCE_S
            elif seen.loop_ended_s is not None and seen.loop_ended_s >= seen.last_report_s:
                # the loop returned: no more reports while Ray Train winds the workers down
                last, limit = max(last, seen.loop_ended_s), limit + STARTUP_ALLOWANCE_S
        if world.now_s - last <= limit:
            continue
        quiet = world.now_s - last
        why = f"no progress report for {quiet:.0f} s (hang timeout {limit:g} s)"
        leave(view, rules, Leave(view.record.id, Left.EVICTED, why, world.now_s, False), step)


def checkpoint_request(
    view: JobView, rules: Rules, attempt: AttemptRecord, reason: str, deadline_s: float
) -> CheckpointRequest:
    target = checkpoint_of(attempt, rules, view)
    uri, endpoint = target if target else (None, None)
    return CheckpointRequest(view.record.id, attempt.number, uri, endpoint, reason, deadline_s)


def dead_nodes(
    world: World,
    rules: Rules,
    holding: Sequence[JobView],
    step: Step,
    serving: Sequence[JobView] = (),
) -> None:
    """Jobs on a node its (reachable) pool reports dead or no longer lists go on inside their
    attempt on a free node of the pool where the lifecycle says so (``effects.lost_nodes``),
    else are evicted. What an evicted job holds on its other nodes stays held until its Ray
    job has stopped: the scheduler never sees dead nodes, so it cannot hand those GPUs out
    while the job still runs."""
    leaving = {t.job_id for t in step.transitions if t.to in (JobState.EVICTED, JobState.PREEMPTED)}
    # nodes held (as the scheduler sees them), and given: worked out when a job first needs a
    # stand-in (most cycles none does)
    taken: set[tuple[str, str]] | None = None
    for view in holding:
        attempt = view.attempt
        if attempt is None or view.record.id in leaving:
            continue
        if view.record.state not in ON_ITS_WAY:
            continue  # leaving already (preempted, evicted) or ended (failed past its
            # max_runtime_s, cancelled) while its attempt is being stopped: nothing to evict
        seen = world.pools.get(attempt.pool)
        if seen is None or not seen.reachable:
            continue
        nodes, live = placement_nodes(attempt), world.live_nodes(attempt.pool)
        dead = [n for n in nodes if n not in live]
        silent = [n for n in nodes if n in live and silent_node(world, attempt, n)]
        taken_by = taken_back(world, attempt)
        if taken_by:  # a spot interruption: preempted (stopped now, then requeued)
            leave(view, rules, effects.taken_back(view.record.id, taken_by, world.now_s), step)
        elif dead or (silent and replaces_silent(world, attempt, silent)):
            taken = _held(holding, serving) if taken is None else taken
            free = free_nodes(world, attempt.pool, taken)
            allocations = [allocation_of(h) for h in attempt.detail.allocations]
            found = effects.lost_nodes(
                view.record.id, attempt.pool, allocations, [*dead, *silent],
                attempt.detail.replaceable, free, world.now_s,
            )  # fmt: skip
            if isinstance(found, Replace):
                taken.update((attempt.pool, a.node) for a in found.allocations)
                replaced(world, rules, view, found, step)
            elif dead:
                leave(view, rules, effects.node_died(view.record.id, dead[0], world.now_s), step)
            else:  # silent, no stand-in: as any unhealthy node, a grace to checkpoint first
                said = world.health[f"{attempt.pool}/{silent[0]}"]
                grace = rules.mesh.graces(attempt.pool).unhealthy_s
                sick = effects.unhealthy(view.record.id, silent[0], said, world.now_s, grace)
                leave(view, rules, sick, step)


def _held(holding: Sequence[JobView], serving: Sequence[JobView]) -> set[tuple[str, str]]:
    """(pool, node) of every node a job or a service's replica holds."""
    return {
        (view.attempt.pool, n)
        for view in (*holding, *serving)
        if view.attempt is not None
        for n in placement_nodes(view.attempt)
    }


def silent_node(world: World, attempt: AttemptRecord, node: str) -> bool:
    """The node's agent has been silent past its ``dead_after_s``: dead to meshctl, whatever
    Ray says of it yet."""
    return bool(world.silent) and f"{attempt.pool}/{node}" in world.silent


def replaces_silent(world: World, attempt: AttemptRecord, sick: Sequence[str]) -> bool:
    """A replaceable attempt whose only sick nodes are silent ones: they count as dead
    (``dead_nodes``: a stand-in inside the attempt), not as unhealthy (a grace to checkpoint,
    then a new attempt). A silent node cannot be asked to checkpoint; the run resumes from its
    latest checkpoint either way, inside its attempt it does so sooner."""
    return attempt.detail.replaceable and all(silent_node(world, attempt, n) for n in sick)


def free_nodes(world: World, pool: str, taken: set[tuple[str, str]]) -> list[Free]:
    """The pool's nodes that could stand in for a dead one: up (Ray lists them alive), in
    service (ready, no health signal, no spot notice) and holding nothing."""
    seen = world.pools.get(pool)
    out = []
    for node in seen.nodes if seen is not None else ():
        key = f"{pool}/{node.name}"
        record = world.nodes.get(key)
        if not node.alive or node.head or (pool, node.name) in taken:
            continue
        if record is not None and record.state != NodeState.READY:
            continue
        if key in world.health or (pool, node.name) in world.reclaiming:
            continue
        out.append(Free(node.name, node.gpus, node.cpus, node.memory_gib))
    return out


def replaced(world: World, rules: Rules, view: JobView, found: Replace, step: Step) -> None:
    """The attempt goes on on its new nodes: recorded, and its run told its new pins."""
    attempt = view.attempt
    assert attempt is not None
    target = checkpoint_of(attempt, rules, view)
    assert target is not None  # a replaceable attempt has its checkpoint storage
    ids = {n.name: n.ray_node_id for n in world.pools[attempt.pool].nodes if n.alive}
    pins = tuple(ids[a.node] for a in found.allocations)  # kept or stand-in: all alive
    step.replacements.append(
        Replacement(
            view.record.id,
            attempt.id,
            attempt.number,
            attempt.pool,
            tuple(held_of(a) for a in found.allocations),
            pins,
            target[0],
            target[1],
            found.reason,
        )
    )


def taken_back(world: World, attempt: AttemptRecord) -> str | None:
    """The first of the attempt's nodes whose cloud instance the provider took back."""
    if not world.interrupted:
        return None
    nodes = placement_nodes(attempt)
    return next((n for n in nodes if (attempt.pool, n) in world.interrupted), None)
