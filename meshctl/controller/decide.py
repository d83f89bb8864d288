"""The controller's deciding half: what the world looks like -> what to do. Pure.

``decide(world, rules)`` first reconciles every job with what its pool reports (a Ray job that
started, finished, failed, was lost or must be stopped), then runs one scheduling cycle over
the nodes as observed minus what running jobs hold, and turns the plan into attempts to
dispatch, jobs to preempt or evict, and a decision per queued job. The loop (``loop.py``)
applies the step; a step applied twice does no harm, because every action is keyed by a
deterministic submission id or guarded by the record's version.

Job states: pending -> admitted -> dispatched -> running -> succeeded | failed | cancelled;
preempted | evicted -> requeued (-> admitted ...). Attempt states: submitting (recorded, maybe
not yet in Ray), then Ray's own lowercased (pending, running, succeeded, failed, stopped), or
lost (its pool no longer knows it).
"""

from __future__ import annotations

import datetime as dt
import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from meshctl.controller.dispatch import dispatch, pool_mtbf_s, submission
from meshctl.controller.dispatch import placement_nodes as _placement_nodes
from meshctl.controller.leaving import STOP_MARGIN_S, UNHEALTHY_GRACE_S, checkpoint_request
from meshctl.controller.leaving import dead_nodes as _dead_nodes
from meshctl.controller.leaving import hung as _hung
from meshctl.controller.leaving import reclaimed as _reclaimed
from meshctl.controller.leaving import taken_back as _taken_back
from meshctl.controller.leaving import unhealthy as _unhealthy
from meshctl.controller.nodes import expected_wait, mesh_facts, observed_nodes
from meshctl.controller.nodes import nodes as observed
from meshctl.controller.nodes import running as running_of
from meshctl.controller.step import (
    AttemptChange,
    CheckpointRequest,
    DecisionNote,
    Dispatch,
    Launch,
    NodeChange,
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
from meshctl.controller.world import JobView, World
from meshctl.model.mesh import AwsPool, GcpPool
from meshctl.policy.evaluate import bind
from meshctl.policy.facts import VictimFacts
from meshctl.pools.observed import INFRA_ERRORS, RAY_ACTIVE, ObservedJob
from meshctl.scheduler import (
    Evict,
    FromPolicyEngine,
    Pending,
    Place,
    PoolInfo,
    Preempt,
    Provision,
    Request,
    Snapshot,
    schedule,
)
from meshctl.scheduler.build import offers_of
from meshctl.scheduler.plan import Decision
from meshctl.state.records import AttemptRecord, JobState, NodeRecord

__all__ = [  # what a step is, and the helpers, are read from here by the loop and the CLI
    "ACTIVE_ATTEMPT",
    "FINISHED",
    "QUEUED",
    "STOP_MARGIN_S",
    "UNHEALTHY_GRACE_S",
    "AttemptChange",
    "CheckpointRequest",
    "DecisionNote",
    "Dispatch",
    "Launch",
    "NodeChange",
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
    "submission_id",
]

QUEUED = frozenset({JobState.PENDING, JobState.REQUEUED})
HOLDING = frozenset(
    {
        JobState.ADMITTED,
        JobState.DISPATCHED,
        JobState.RUNNING,
        JobState.PREEMPTED,
        JobState.EVICTED,
    }
)
FINISHED = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED})
ACTIVE_ATTEMPT = frozenset({"submitting", "pending", "running"})
KILLED = re.compile(  # SIGKILL, SIGTERM: not the job's own doing (the log tail is the job's)
    r"^Job entrypoint command failed with exit code (-9|-15|137|143)\b"
)


# --- deciding ---------------------------------------------------------------------------------


def decide(world: World, rules: Rules) -> Step:
    step = Step()
    holding: list[JobView] = []
    queued: list[JobView] = []
    for view in world.jobs:
        kept = _reconcile(view, world, rules, step)
        if kept == "holding":
            holding.append(view)
        elif kept == "queued":
            queued.append(view)
    _drain_deadlines(world, holding, step)
    _reclaimed(world, rules, holding, step)
    _unhealthy(world, rules, holding, step)
    _hung(world, holding, step)
    _dead_nodes(world, holding, step)
    if world.hold is None:
        _schedule(world, rules, holding, queued, step)
    else:  # nothing new starts, nothing is preempted for it: the running jobs may end
        held = {"status": "held", "reason": world.hold}
        step.decisions += [DecisionNote(v.record.id, "held", world.hold, held) for v in queued]
    _idle_pools(world, rules, holding, step)
    return step


def _reconcile(view: JobView, world: World, rules: Rules, step: Step) -> str | None:
    """Bring one job in line with its pool; say whether it holds resources or waits."""
    record, attempt = view.record, view.attempt
    state = record.state
    if state in QUEUED:
        return "queued"
    if attempt is None or attempt.state not in ACTIVE_ATTEMPT:
        if state in (JobState.ADMITTED, JobState.DISPATCHED, JobState.RUNNING):
            # admitted, then the controller died before recording an attempt
            step.transitions.append(Transition(record.id, JobState.REQUEUED, "no attempt"))
        elif state in (JobState.PREEMPTED, JobState.EVICTED):
            _requeue(view, "its attempt has ended", step)
        return None
    observation = world.pools.get(attempt.pool)
    if observation is not None and not observation.reachable:
        return "holding"  # nothing is known; keep its resources counted
    # No observation at all: the pool has no cluster any more (a cloud pool whose last
    # instance went, a local pool that is down): whatever ran there is gone.
    ray = observation.jobs.get(attempt.submission_id) if observation else None
    gone = observation is None
    now = world.now_s
    if state in FINISHED:  # cancelled (or finished) while its attempt may still run
        if ray is not None and ray.status in RAY_ACTIVE:
            step.stops.append(Stop(record.id, attempt.pool, attempt.submission_id, state.value))
            return "holding"
        step.attempts.append(_ended(attempt, ray, now))
        return None
    if state in (JobState.PREEMPTED, JobState.EVICTED):
        if ray is not None and ray.status in RAY_ACTIVE:
            stop_at = attempt.detail.get("stop_at_s")
            if stop_at is None or now >= float(stop_at):
                step.stops.append(Stop(record.id, attempt.pool, attempt.submission_id, state.value))
            return "holding"
        stopped = (
            ray is None
            or ray.status == "STOPPED"
            or ray.error_type in INFRA_ERRORS
            or (ray.status == "FAILED" and _taken_back(world, attempt) is not None)
        )  # a job that failed because its instance was taken back is requeued, not failed
        if not stopped:  # it finished on its own during its grace: that is its outcome
            return _follow(view, attempt, ray, now, step)  # type: ignore[arg-type]
        step.attempts.append(_ended(attempt, ray, now))
        _requeue(view, f"{state.value}; its attempt has stopped", step)
        return None
    # admitted, dispatched or running
    if ray is None:
        if attempt.state == "submitting" and not gone:
            sub = submission(view, rules, attempt)
            step.resubmits.append(Resubmit(record.id, attempt.id, attempt.pool, sub))
            return "holding"
        step.attempts.append(AttemptChange(attempt.id, "lost", "the pool no longer knows it"))
        taken = _taken_back(world, attempt)
        step.transitions.append(
            Transition(record.id, JobState.PREEMPTED, f"spot instance {taken} was taken back")
            if taken
            else Transition(record.id, JobState.EVICTED, f"pool {attempt.pool} lost the job")
        )
        _requeue(view, "its pool lost it", step)
        return None
    return _follow(view, attempt, ray, now, step)


def _follow(
    view: JobView, attempt: AttemptRecord, ray: ObservedJob, now: float, step: Step
) -> str | None:
    """A job its pool knows: move the job and the attempt to what Ray says."""
    record, status = view.record, ray.status.lower()
    if status != attempt.state:
        started = ray.start_s if status == "running" else None
        step.attempts.append(AttemptChange(attempt.id, status, ray.message, started, ray.end_s))
    if status == "pending":
        if record.state is not JobState.DISPATCHED:
            step.transitions.append(Transition(record.id, JobState.DISPATCHED, "submitted"))
        return "holding"
    if status == "running":
        if record.state is not JobState.RUNNING:
            step.transitions.append(Transition(record.id, JobState.RUNNING, "started"))
        return "holding"
    if status == "succeeded":
        step.transitions.append(Transition(record.id, JobState.SUCCEEDED, "exited 0"))
    elif status == "failed" and ray.error_type in INFRA_ERRORS:
        message = ray.message or ""
        why = "its node died" if "node has died" in message else _last_line(message)
        step.transitions.append(Transition(record.id, JobState.EVICTED, why))
        _requeue(view, ray.error_type or "infrastructure failure", step)
    elif status == "failed" and KILLED.search(ray.message or ""):
        said = (ray.message or "").splitlines()[0]  # Ray's own line, not the job's log tail
        why = f"its driver was killed: {said}"  # the OOM killer, a node
        step.transitions.append(Transition(record.id, JobState.EVICTED, why))
        _requeue(view, "its driver was killed", step)
    elif status == "failed":
        step.transitions.append(Transition(record.id, JobState.FAILED, _last_line(ray.message)))
    else:  # stopped by someone else
        step.transitions.append(
            Transition(record.id, JobState.CANCELLED, "stopped outside meshctl")
        )
    return None


def _requeue(view: JobView, why: str, step: Step) -> None:
    limit = view.job.spec.limits.max_restarts
    tries = view.attempt.number if view.attempt else 0
    if tries > limit:
        step.transitions.append(
            Transition(
                view.record.id, JobState.FAILED, f"{why}; {tries} attempts, max_restarts {limit}"
            )
        )
    else:
        step.transitions.append(Transition(view.record.id, JobState.REQUEUED, why))


def _ended(attempt: AttemptRecord, ray: ObservedJob | None, now: float) -> AttemptChange:
    if ray is None:
        return AttemptChange(attempt.id, "lost", "the pool no longer knows it", ended_at_s=now)
    return AttemptChange(attempt.id, ray.status.lower(), ray.message, ended_at_s=ray.end_s or now)


def _last_line(text: str) -> str:
    """What a failure says last (Ray's message ends with the job's own last words)."""
    return text.strip().splitlines()[-1][:300] if text.strip() else "failed"


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
        nodes = {f"{view.attempt.pool}/{n}" for n in _placement_nodes(view.attempt)}
        if nodes & expired:
            node = sorted(nodes & expired)[0]
            evicted[node] += 1
            step.transitions.append(
                Transition(view.record.id, JobState.EVICTED, f"node {node} drained")
            )
    for key in sorted(k for k in expired if world.nodes[k].state == "draining"):
        jobs = f"{evicted[key]} job{'s' if evicted[key] != 1 else ''}"
        step.nodes.append(NodeChange(key, "drained", f"drain deadline passed; {jobs} evicted"))


def _drain_over(node: NodeRecord, now_s: float) -> bool:
    if node.state == "drained":
        return True
    deadline = node.detail.get("deadline_s")
    return node.state == "draining" and deadline is not None and now_s >= float(deadline)


# --- scheduling -------------------------------------------------------------------------------


def _schedule(
    world: World, rules: Rules, holding: list[JobView], queued: list[JobView], step: Step
) -> None:
    leaving = {t.job_id for t in step.transitions if t.to in (JobState.EVICTED, JobState.PREEMPTED)}
    running = [
        replace(running_of(v, world.now_s), leaving=True)
        if v.record.id in leaving
        else running_of(v, world.now_s)
        for v in holding
        if v.attempt is not None
    ]
    freed_for: dict[str, list[str]] = defaultdict(list)  # preemptor -> nodes being freed
    for v in holding:
        if v.attempt is not None and v.record.state is JobState.PREEMPTED:
            freed_for[str(v.attempt.detail.get("for_job", ""))] += _placement_nodes(v.attempt)
    nodes = observed(world, rules.mesh, running, rules.catalogs)
    pending = [
        Pending(
            v.record.id,
            v.record.team,
            v.record.priority,
            Request.of(v.job),
            v.record.submitted_at_s,
            v.job.spec.limits.max_runtime_s,
            nominated=tuple(freed_for.get(v.record.id, ())),
            provisioning=_launching(world, v),
        )
        for v in queued
    ]
    wait = expected_wait(world, queued)
    live: dict[str, int] = defaultdict(int)
    for instance in world.instances:
        live[instance.pool] += 1
    pools = [
        PoolInfo(
            p.name,
            p.provider in ("aws", "gcp"),
            wait if p.name in world.pools else 0.0,
            max_new_nodes=p.max_nodes - live[p.name] if isinstance(p, AwsPool | GcpPool) else None,
            unavailable=world.pool_unavailable.get(p.name),
        )
        for p in rules.mesh.spec.pools
    ]
    of_type: dict[tuple[str, str], int] = defaultdict(int)
    for instance in world.instances:
        of_type[(instance.pool, instance.instance_type)] += 1
    offers = [  # each type's cap less what already runs of it
        replace(
            o,
            max_nodes=max(0, o.max_nodes - of_type[(o.pool, o.node_type)]),
            max_nodes_configured=o.max_nodes,
        )
        for p in rules.mesh.spec.pools
        for o in offers_of(p, rules.catalogs)
        if (o.pool, o.node_type) not in world.unavailable
    ]
    snapshot = Snapshot(
        world.now_s, tuple(nodes), tuple(pools), tuple(running), tuple(pending), tuple(offers)
    )
    views = {v.record.id: v for v in (*holding, *queued)}
    policies = _policy_view(world, rules, snapshot, views)
    plan = schedule(snapshot, policies, rules.config)
    step.plan = plan
    for action in plan.actions:
        if isinstance(action, Place):
            step.dispatches.append(dispatch(views[action.job_id], action, rules, world))
        elif isinstance(action, Preempt) and action.victim_job_id not in leaving:
            step.transitions.append(
                Transition(
                    action.victim_job_id,
                    JobState.PREEMPTED,
                    f"for {action.for_job_id}" + (f" ({action.rule})" if action.rule else ""),
                )
            )
            victim = views[action.victim_job_id].attempt
            if victim is not None:
                stop_at = world.now_s + action.grace_s
                step.attempts.append(
                    AttemptChange(victim.id, None, stop_at_s=stop_at, for_job=action.for_job_id)
                )
                if action.grace_s > 0:
                    why = f"preempted for {action.for_job_id}"
                    request = checkpoint_request(
                        views[action.victim_job_id], rules, victim, why, stop_at
                    )
                    step.checkpoints.append(request)
        elif isinstance(action, Evict) and action.job_id not in leaving:
            step.transitions.append(Transition(action.job_id, JobState.EVICTED, action.reason))
        elif isinstance(action, Provision):
            tried = views[action.job_id].attempt
            number = (tried.number if tried else 0) + 1
            step.launches.append(
                Launch(
                    action.job_id,
                    action.pool,
                    action.node_type,
                    action.count,
                    action.spot,
                    launch_request_id(action.job_id, number),
                )
            )
    step.decisions += [_note(decision) for decision in plan.decisions.values()]
    step.rule_errors += _rule_errors(policies, queued)


def _rule_errors(policies: Any, queued: Sequence[JobView]) -> list[RuleError]:
    """The rules that failed for each queued job (its verdict was computed this cycle)."""
    found = []
    for view in queued:
        verdict = policies.verdict(view.record.id)
        for error in verdict.errors if verdict is not None else ():
            pools = ", ".join(error.pools) or None  # those a selector failed for
            rule, origin, part, said = error.rule, error.origin, error.part, error.message
            found.append(RuleError(view.record.id, rule, origin, part, pools, said))
    return found


def _policy_view(
    world: World, rules: Rules, snapshot: Snapshot, views: Mapping[str, JobView]
) -> Any:
    from meshctl.scheduler import Permissive

    if rules.policies is None:
        return Permissive()
    facts = mesh_facts(rules.mesh, snapshot, world.spend_usd, world.team_spend_usd)
    bound = bind(rules.policies, facts, dt.datetime.fromtimestamp(world.now_s, dt.UTC))
    jobs = {job_id: v.job for job_id, v in views.items()}
    victims = {
        r.job_id: VictimFacts(
            views[r.job_id].job,
            r.priority,
            r.pool,
            max(0.0, world.now_s - r.started_at_s),
            max(0.0, world.now_s - (r.last_checkpoint_at_s or r.started_at_s)),
        )
        for r in snapshot.running
    }
    return FromPolicyEngine(bound, jobs, victims)


def _launching(world: World, view: JobView) -> bool:
    """A launch for the job's next attempt is under way (its instances are joining)."""
    number = (view.attempt.number if view.attempt else 0) + 1
    request = launch_request_id(view.record.id, number)
    return any(
        (i.request_id == request or i.request_id.startswith(request + ".")) and i.state == "joining"
        for i in world.instances
    )


def _idle_pools(world: World, rules: Rules, holding: Sequence[JobView], step: Step) -> None:
    """A cloud pool with no work on it, idle for its ``idle_minutes``, is torn down: workers
    first, the head (its first instance) last."""
    # Busy: a job holds it, this cycle places or launches there, or an instance is joining.
    # Queued jobs the plan does not send there do not keep it: one that can never run would
    # keep an idle pool billing forever.
    busy = {v.attempt.pool for v in holding if v.attempt is not None}
    busy |= {launch.pool for launch in step.launches}
    busy |= {d.attempt.pool for d in step.dispatches}
    busy |= {i.pool for i in world.instances if i.state == "joining"}
    for pool in rules.mesh.spec.pools:
        if not isinstance(pool, AwsPool | GcpPool) or pool.name in busy:
            continue
        mine = sorted(
            (i for i in world.instances if i.pool == pool.name),
            key=lambda i: (i.launched_at_s or 0.0, i.id),
        )
        if not mine:
            continue
        since = max(
            [world.pool_busy_s.get(pool.name, 0.0)] + [i.launched_at_s or 0.0 for i in mine]
        )
        if world.now_s - since >= pool.idle_minutes * 60:
            ids = tuple(i.id for i in reversed(mine))
            why = f"idle for {pool.idle_minutes:g} min"
            step.teardowns.append(Teardown(pool.name, ids, why))


def _note(decision: Decision) -> DecisionNote:
    return DecisionNote(
        decision.job_id, decision.status, decision.summary(), decision.explanation()
    )
