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
import json
import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from meshctl.controller.world import JobView, World
from meshctl.model.catalog import Catalog
from meshctl.model.mesh import Accelerator, AwsPool, GcpPool, Mesh, NodeGroup, Pool
from meshctl.policy.compiled import PolicySet
from meshctl.policy.evaluate import bind
from meshctl.policy.facts import MeshSnapshot, VictimFacts
from meshctl.pools.observed import (
    INFRA_ERRORS,
    NODE_LABEL,
    NODE_TYPE_LABEL,
    RAY_ACTIVE,
    ObservedJob,
    ObservedNode,
    PoolObservation,
    Submission,
)
from meshctl.scheduler import (
    Allocation,
    Evict,
    FromPolicyEngine,
    Node,
    Pending,
    Place,
    Plan,
    PoolInfo,
    Preempt,
    Provision,
    Request,
    Running,
    SchedulerConfig,
    Snapshot,
    schedule,
)
from meshctl.scheduler.build import offers_of
from meshctl.scheduler.plan import Decision
from meshctl.state.records import AttemptRecord, JobState

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
ON_ITS_WAY = frozenset({JobState.ADMITTED, JobState.DISPATCHED, JobState.RUNNING})
STOP_MARGIN_S = 15.0  # a job on a reclaimed instance is stopped this long before it goes
STARTUP_ALLOWANCE_S = 600.0  # before its first report a run may be waiting for its workers
UNHEALTHY_GRACE_S = 30.0  # a job on a node found unhealthy may checkpoint this long first
ACTIVE_ATTEMPT = frozenset({"submitting", "pending", "running"})
KILLED = re.compile(  # SIGKILL, SIGTERM: not the job's own doing (the log tail is the job's)
    r"^Job entrypoint command failed with exit code (-9|-15|137|143)\b"
)
TRAIN_ENTRYPOINT = "python -m meshctl.train.run"  # builds the TorchTrainer from MESHCTL_TRAIN


# --- what a step does ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Transition:
    job_id: str
    to: JobState
    reason: str
    pool: str | None = None


@dataclass(frozen=True, slots=True)
class AttemptChange:
    attempt_id: str
    state: str | None  # None: unchanged
    reason: str = ""
    started_at_s: float | None = None
    ended_at_s: float | None = None
    stop_at_s: float | None = None
    for_job: str | None = None  # the preemptor its GPUs are freed for


@dataclass(frozen=True, slots=True)
class Dispatch:
    """Record the attempt (state submitting), admit the job, submit, mark it dispatched."""

    job_id: str
    attempt: AttemptRecord
    submission: Submission
    reason: str


@dataclass(frozen=True, slots=True)
class Resubmit:
    """An attempt recorded as submitting that its pool does not know: submit it (again)."""

    job_id: str
    attempt_id: str
    pool: str
    submission: Submission


@dataclass(frozen=True, slots=True)
class Stop:
    job_id: str
    pool: str
    submission_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class CheckpointRequest:
    """Ask a running job to checkpoint now: it will be stopped at ``deadline_s`` (its spot
    instance was given notice, or it was preempted and has its grace). Written where the job
    keeps its checkpoints (``meshctl.workload``); a job with no checkpoint storage
    (``uri`` None) cannot be asked, and the event says so."""

    job_id: str
    attempt: int
    uri: str | None
    endpoint_url: str | None
    reason: str
    deadline_s: float


@dataclass(frozen=True, slots=True)
class NodeChange:
    """A node's health changed: ``unhealthy`` (out of service) or ``ready`` (healthy again)."""

    node: str  # "pool/node"
    state: str
    reason: str


@dataclass(frozen=True, slots=True)
class Launch:
    """Launch cloud capacity for a queued job (idempotent: the request id is the job's)."""

    job_id: str
    pool: str
    node_type: str
    count: int
    spot: bool
    request_id: str


@dataclass(frozen=True, slots=True)
class Teardown:
    """Terminate an idle cloud pool's instances, workers first and its head last."""

    pool: str
    instance_ids: tuple[str, ...]
    reason: str


@dataclass(frozen=True, slots=True)
class RuleError:
    """A policy rule that failed at run time for a job (it fails closed: the verdict is the
    narrower one); the loop raises a ``policy.error`` event once per job and failure."""

    job_id: str
    rule: str
    origin: str  # file:line
    part: str  # when, to, victims ...
    pool: str | None
    message: str


@dataclass(frozen=True, slots=True)
class DecisionNote:
    job_id: str
    outcome: str
    summary: str
    explanation: Mapping[str, Any]


@dataclass
class Step:
    transitions: list[Transition] = field(default_factory=list)
    attempts: list[AttemptChange] = field(default_factory=list)
    dispatches: list[Dispatch] = field(default_factory=list)
    resubmits: list[Resubmit] = field(default_factory=list)
    stops: list[Stop] = field(default_factory=list)
    checkpoints: list[CheckpointRequest] = field(default_factory=list)
    nodes: list[NodeChange] = field(default_factory=list)
    launches: list[Launch] = field(default_factory=list)
    teardowns: list[Teardown] = field(default_factory=list)
    decisions: list[DecisionNote] = field(default_factory=list)
    rule_errors: list[RuleError] = field(default_factory=list)
    plan: Plan | None = None


@dataclass(frozen=True, slots=True)
class Rules:
    """What decide needs besides the world: the mesh, its catalogs and its policies."""

    mesh: Mesh
    catalogs: Mapping[str, Catalog]
    policies: PolicySet | None
    config: SchedulerConfig = field(default_factory=SchedulerConfig)


def submission_id(job_id: str, number: int) -> str:
    return f"meshctl-{job_id}-{number}"


def launch_request_id(job_id: str, number: int) -> str:
    """The cloud request of a job's attempt: asking again launches nothing more."""
    return f"burst-{job_id}-{number}"


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
    _schedule(world, rules, holding, queued, step)
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
            sub = _submission(view, rules, attempt)
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
    """Jobs still on a draining node when its deadline passes are evicted."""
    expired = {
        key
        for key, node in world.nodes.items()
        if node.state == "draining"
        and node.detail.get("deadline_s") is not None
        and world.now_s >= float(node.detail["deadline_s"])
    }
    if not expired:
        return
    for view in holding:
        if view.record.state in (JobState.PREEMPTED, JobState.EVICTED) or view.attempt is None:
            continue
        nodes = {f"{view.attempt.pool}/{n}" for n in _placement_nodes(view.attempt)}
        if nodes & expired:
            node = sorted(nodes & expired)[0]
            step.transitions.append(
                Transition(view.record.id, JobState.EVICTED, f"node {node} drained")
            )


def _reclaimed(world: World, rules: Rules, holding: Sequence[JobView], step: Step) -> None:
    """Jobs on a spot instance its provider has given notice to are preempted: asked to
    checkpoint now, stopped shortly before the instance goes (then requeued)."""
    for view in holding:
        attempt = view.attempt
        if attempt is None or view.record.state not in ON_ITS_WAY:
            continue
        noticed = [
            (world.reclaiming[(attempt.pool, n)], n)
            for n in _placement_nodes(attempt)
            if (attempt.pool, n) in world.reclaiming
        ]
        if not noticed:
            continue
        deadline, node = min(noticed)
        why = f"spot instance {node} is being taken back"
        stop_at = max(world.now_s, deadline - STOP_MARGIN_S)
        _leave(view, rules, attempt, JobState.PREEMPTED, why, stop_at, step)


def _unhealthy(world: World, rules: Rules, holding: Sequence[JobView], step: Step) -> None:
    """Nodes whose health probe says unhealthy leave service (and come back when it says
    healthy again); the jobs on them are asked to checkpoint, evicted and requeued."""
    for key, reason in sorted(world.health.items()):
        record = world.nodes.get(key)
        if record is not None and record.state != "unhealthy":
            step.nodes.append(NodeChange(key, "unhealthy", reason))
    for key, record in sorted(world.nodes.items()):
        if record.state == "unhealthy" and key not in world.health:
            step.nodes.append(NodeChange(key, "ready", "its health probe says healthy again"))
    moved = {t.job_id for t in step.transitions}
    for view in holding:
        attempt = view.attempt
        if attempt is None or view.record.state not in ON_ITS_WAY or view.record.id in moved:
            continue
        sick = [n for n in _placement_nodes(attempt) if f"{attempt.pool}/{n}" in world.health]
        if not sick:
            continue
        why = f"node {sick[0]} is unhealthy: {world.health[f'{attempt.pool}/{sick[0]}']}"
        stop_at = world.now_s + UNHEALTHY_GRACE_S
        _leave(view, rules, attempt, JobState.EVICTED, why, stop_at, step)


def _leave(
    view: JobView,
    rules: Rules,
    attempt: AttemptRecord,
    state: JobState,
    why: str,
    stop_at: float,
    step: Step,
) -> None:
    """The job leaves (preempted or evicted), asked to checkpoint now, stopped at ``stop_at``."""
    step.transitions.append(Transition(view.record.id, state, why))
    step.attempts.append(AttemptChange(attempt.id, None, stop_at_s=stop_at))
    step.checkpoints.append(_checkpoint_request(view, rules, attempt, why, stop_at))


def _hung(world: World, holding: Sequence[JobView], step: Step) -> None:
    """A train job with a hang timeout that reported no progress for that long is stopped
    and requeued: its next attempt resumes from its latest checkpoint."""
    moved = {t.job_id for t in step.transitions}
    for view in holding:
        attempt, train = view.attempt, view.job.spec.train
        if attempt is None or train is None or train.hang_timeout is None:
            continue
        if view.record.id in moved or not attempt.detail.get("checkpoint_uri"):
            continue  # no checkpoint storage: no progress is recorded to judge by
        if view.record.state is not JobState.RUNNING or attempt.started_at_s is None:
            continue
        seen = world.progress.get(view.record.id)
        last, limit = attempt.started_at_s, max(train.hang_timeout, STARTUP_ALLOWANCE_S)
        if seen is not None and seen.attempt == attempt.number and seen.last_report_s:
            last, limit = max(last, seen.last_report_s), train.hang_timeout
            if seen.restarting_since is not None:  # Ray Train is bringing the workers back
                last, limit = max(last, seen.restarting_since), limit + STARTUP_ALLOWANCE_S
        if world.now_s - last <= limit:
            continue
        quiet = world.now_s - last
        why = f"no progress report for {quiet:.0f} s (hang timeout {limit:g} s)"
        step.transitions.append(Transition(view.record.id, JobState.EVICTED, why))
        step.attempts.append(AttemptChange(attempt.id, None, stop_at_s=world.now_s))


def pool_mtbf_s(world: World) -> dict[str, float]:
    """Mean time between failures per pool, from what the controller has seen: the hours its
    nodes were watched over the failures (lost, unhealthy) they had; pools with none omitted."""
    watched: dict[str, float] = defaultdict(float)
    failures: dict[str, int] = defaultdict(int)
    for record in world.nodes.values():
        first = record.detail.get("first_seen_s")
        if first is not None:  # a dead node was watched until it died
            until = world.now_s if record.resources.get("alive", True) else record.updated_at_s
            watched[record.pool] += max(0.0, until - float(first))
        failures[record.pool] += int(record.detail.get("failures", 0))
    return {pool: watched[pool] / n for pool, n in failures.items() if n}


def _checkpoint_request(
    view: JobView, rules: Rules, attempt: AttemptRecord, reason: str, deadline_s: float
) -> CheckpointRequest:
    target = _checkpoint_of(attempt, rules, view)
    uri, endpoint = target if target else (None, None)
    return CheckpointRequest(view.record.id, attempt.number, uri, endpoint, reason, deadline_s)


def _dead_nodes(world: World, holding: Sequence[JobView], step: Step) -> None:
    """Jobs on a node its (reachable) pool reports dead or no longer lists are evicted. What
    they hold on their other nodes stays held until their Ray job has stopped: the scheduler
    never sees dead nodes, so it cannot hand those GPUs out while the job still runs."""
    live = {
        (name, n.name)
        for name, seen in world.pools.items()
        if seen.reachable
        for n in seen.nodes
        if n.alive
    }
    leaving = {t.job_id for t in step.transitions if t.to in (JobState.EVICTED, JobState.PREEMPTED)}
    for view in holding:
        attempt = view.attempt
        if attempt is None or view.record.id in leaving:
            continue
        if view.record.state in (JobState.PREEMPTED, JobState.EVICTED):
            continue
        seen = world.pools.get(attempt.pool)
        if seen is None or not seen.reachable:
            continue
        dead = [n for n in _placement_nodes(attempt) if (attempt.pool, n) not in live]
        taken = _taken_back(world, attempt)
        if taken:  # a spot interruption: preempted (stopped now, then requeued)
            step.transitions.append(
                Transition(
                    view.record.id, JobState.PREEMPTED, f"spot instance {taken} was taken back"
                )
            )
        elif dead:
            step.transitions.append(
                Transition(view.record.id, JobState.EVICTED, f"node {dead[0]} is dead")
            )


def _taken_back(world: World, attempt: AttemptRecord) -> str | None:
    """The first of the attempt's nodes whose cloud instance the provider took back."""
    nodes = _placement_nodes(attempt)
    return next((n for n in nodes if (attempt.pool, n) in world.interrupted), None)


# --- scheduling -------------------------------------------------------------------------------


def _schedule(
    world: World, rules: Rules, holding: list[JobView], queued: list[JobView], step: Step
) -> None:
    leaving = {t.job_id for t in step.transitions if t.to in (JobState.EVICTED, JobState.PREEMPTED)}
    running = [
        replace(_running(v, world.now_s), leaving=True)
        if v.record.id in leaving
        else _running(v, world.now_s)
        for v in holding
        if v.attempt is not None
    ]
    freed_for: dict[str, list[str]] = defaultdict(list)  # preemptor -> nodes being freed
    for v in holding:
        if v.attempt is not None and v.record.state is JobState.PREEMPTED:
            freed_for[str(v.attempt.detail.get("for_job", ""))] += _placement_nodes(v.attempt)
    nodes = _nodes(world, rules.mesh, running, rules.catalogs)
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
    wait = _expected_wait(world, queued)
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
            step.dispatches.append(_dispatch(views[action.job_id], action, rules, world))
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
                    request = _checkpoint_request(
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
            # the message: ``message`` on the engine's typed errors, ``detail`` on a trace row
            said = getattr(error, "message", None) or getattr(error, "detail", "")
            found.append(
                RuleError(
                    view.record.id,
                    error.rule,
                    str(error.origin),
                    error.part,
                    error.pool,
                    str(said),
                )
            )
    return found


def _policy_view(
    world: World, rules: Rules, snapshot: Snapshot, views: Mapping[str, JobView]
) -> Any:
    from meshctl.scheduler import Permissive

    if rules.policies is None:
        return Permissive()
    facts = _mesh_facts(rules.mesh, snapshot, world.spend_usd, world.team_spend_usd)
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


def _mesh_facts(
    mesh: Mesh, snapshot: Snapshot, spend: Mapping[str, float], teams: Mapping[str, float]
) -> MeshSnapshot:
    from meshctl.policy.facts import mesh_snapshot, observed

    free: dict[str, float] = defaultdict(float)
    total: dict[str, int] = defaultdict(int)
    for node in snapshot.nodes:
        if node.health == "ready":
            free[node.pool] += sum(node.gpu_free)
        total[node.pool] += node.gpus
    waits = {p.name: p.expected_wait_s for p in snapshot.pools}
    return observed(
        mesh_snapshot(mesh, {}), free, total, len(snapshot.pending), waits, spend, teams
    )


def _expected_wait(world: World, queued: Sequence[JobView]) -> float:
    """How long work waits now: the longest wait among the queued jobs (0 with none)."""
    return max((world.now_s - v.record.submitted_at_s for v in queued), default=0.0)


def _nodes(
    world: World, mesh: Mesh, running: Sequence[Running], catalogs: Mapping[str, Catalog]
) -> list[Node]:
    """The driven pools' live nodes, less what running jobs hold; cordoned and draining nodes
    marked so. Dead nodes are left out (their jobs are evicted by ``_dead_nodes``)."""
    held: dict[str, list[Allocation]] = defaultdict(list)
    for job in running:
        for alloc in job.allocations:
            held[f"{job.pool}/{alloc.node}"].append(alloc)
    out = []
    for name, observation in world.pools.items():
        pool = mesh.pool(name)
        if pool is None or not observation.reachable:
            continue
        groups = _groups(pool, observation, catalogs)
        usd = pool.cost.usd_per_gpu_hour or 0.0
        for seen in observation.nodes:
            if seen.head or not seen.alive or (seen.gpus == 0 and seen.cpus == 0):
                continue
            record = world.nodes.get(f"{name}/{seen.name}")
            health = record.state if record else "ready"
            if health not in ("ready", "cordoned", "draining", "unhealthy"):
                health = "ready"
            if (name, seen.name) in world.reclaiming:
                health = "cordoned"  # its instance is being taken back: nothing new goes there
            if f"{name}/{seen.name}" in world.health:
                health = "unhealthy"  # its probe says so (the record follows this cycle)
            out.append(
                _node(name, seen, groups.get(seen.name), usd, health, held[f"{name}/{seen.name}"])
            )
    return out


def observed_nodes(pool: Pool, observation: PoolObservation) -> list[Node]:
    """A pool's live nodes as the scheduler sees them, all free (for checks at submit)."""
    groups, usd = _groups(pool, observation, {}), pool.cost.usd_per_gpu_hour or 0.0
    return [
        _node(pool.name, seen, groups.get(seen.name), usd, "ready", ())
        for seen in observation.nodes
        if seen.alive and not seen.head and (seen.gpus or seen.cpus)
    ]


def _groups(
    pool: Pool, observation: PoolObservation, catalogs: Mapping[str, Catalog]
) -> dict[str, NodeGroup]:
    """What mesh.yaml says of each node (on-prem), or the catalog of its instance type (a
    cloud node, labelled meshctl.io/node-type): GPU memory, vendor, NIC."""
    groups = getattr(pool, "nodes", None) or []
    found = {name: g for g in groups for name in g.node_names()}
    catalog = catalogs.get(pool.provider)
    for seen in observation.nodes if catalog else ():
        kind = catalog.instance_type(seen.labels.get(NODE_TYPE_LABEL, "")) if catalog else None
        if kind is not None and seen.name not in found:
            acc = kind.accelerator
            found[seen.name] = NodeGroup(
                name=seen.name,
                gpus=acc.count,
                accelerator=Accelerator(
                    vendor=acc.vendor, model=acc.model, memory_gib=acc.memory_gib
                ),
                cpus=seen.cpus or 1,
                memory_gib=seen.memory_gib or 1,
                nic_gbps=kind.nic_gbps,
            )
    return found


def _node(
    pool: str,
    seen: ObservedNode,
    group: NodeGroup | None,
    usd: float,
    health: str,
    held: Sequence[Allocation],
) -> Node:
    gpu_free = [1.0] * seen.gpus
    cpus, memory, nic = seen.cpus, seen.memory_gib, group.nic_gbps if group else 0.0
    for alloc in held:
        for i in alloc.gpu_indices:
            if i < len(gpu_free):
                gpu_free[i] = max(0.0, gpu_free[i] - alloc.gpu_share)
        cpus, memory, nic = cpus - alloc.cpus, memory - alloc.memory_gib, nic - alloc.nic_gbps
    accelerator = group.accelerator if group else None
    labels = {k: v for k, v in seen.labels.items() if not k.startswith("ray.io/")}
    return Node(
        name=seen.name,
        pool=pool,
        gpu_free=tuple(gpu_free),
        gpu_memory_gib=accelerator.memory_gib if accelerator else 0.0,
        accelerator=seen.accelerator or (accelerator.model if accelerator else None),
        vendor=accelerator.vendor if accelerator else ("nvidia" if seen.gpus else None),
        cpus=seen.cpus,
        cpus_free=max(0.0, cpus),
        memory_gib=seen.memory_gib,
        memory_gib_free=max(0.0, memory),
        nic_gbps=group.nic_gbps if group else 0.0,
        nic_gbps_free=max(0.0, nic),
        labels=labels,
        health=health,  # type: ignore[arg-type]
        usd_per_gpu_hour=usd,
    )


def _running(view: JobView, now: float) -> Running:
    attempt = view.attempt
    assert attempt is not None
    allocations = tuple(  # stored as JSON: the GPU indices come back as a list
        Allocation(**{**a, "gpu_indices": tuple(a["gpu_indices"])})
        for a in attempt.detail.get("allocations", [])
    )
    started = attempt.started_at_s or view.record.updated_at_s
    return Running(
        view.record.id,
        view.record.team,
        view.record.priority,
        attempt.pool,
        allocations,
        Request.of(view.job),
        started,
        leaving=view.record.state in (JobState.PREEMPTED, JobState.EVICTED),
    )


def _placement_nodes(attempt: AttemptRecord) -> list[str]:
    return [str(a["node"]) for a in attempt.detail.get("allocations", [])]


# --- dispatching ------------------------------------------------------------------------------


def _dispatch(view: JobView, place: Place, rules: Rules, world: World) -> Dispatch:
    number = (view.attempt.number if view.attempt else 0) + 1
    detail: dict[str, Any] = {"allocations": [asdict(a) for a in place.allocations]}
    # The job's checkpoints stay where its first attempt put them, whichever pool runs it
    # next: a run resumes only from storage it can read.
    before = view.attempt.detail if view.attempt else {}
    target = (
        (str(before["checkpoint_uri"]), before.get("checkpoint_endpoint"))
        if before.get("checkpoint_uri")
        else _checkpoint_target(rules.mesh.pool(place.pool), view)
    )
    if target is not None:
        detail["checkpoint_uri"], detail["checkpoint_endpoint"] = target
    mtbf = pool_mtbf_s(world).get(place.pool) if view.job.spec.train is not None else None
    if mtbf:  # for checkpoint interval auto: the job fails when any of its nodes does
        detail["pool_mtbf_s"] = mtbf / max(1, len(place.allocations))
    attempt = AttemptRecord(
        id=f"{view.record.id}-{number}",
        job_id=view.record.id,
        number=number,
        pool=place.pool,
        submission_id=submission_id(view.record.id, number),
        state="submitting",
        started_at_s=None,
        ended_at_s=None,
        detail=detail,
    )
    nodes = ", ".join(a.node for a in place.allocations)
    return Dispatch(
        view.record.id, attempt, _submission(view, rules, attempt), f"placed on {nodes}"
    )


def _submission(view: JobView, rules: Rules, attempt: AttemptRecord) -> Submission:
    """The Ray Jobs submission of one attempt: the same for the same attempt, always."""
    job, record = view.job, view.record
    spec, res = job.spec, job.spec.resources
    nodes = _placement_nodes(attempt)
    env = {
        **spec.runtime_env.env_vars,
        "MESHCTL_JOB_ID": record.id,
        "MESHCTL_JOB_NAME": record.name,
        "MESHCTL_ATTEMPT": str(attempt.number),
        "MESHCTL_POOL": attempt.pool,
        "MESHCTL_NODES": ",".join(nodes),
        "MESHCTL_NODE_LABEL": NODE_LABEL,
        "MESHCTL_GPUS_PER_NODE": f"{res.gpus:g}",
        "MESHCTL_CPUS_PER_NODE": f"{res.cpus:g}",
        **_checkpoint_env(_checkpoint_of(attempt, rules, view)),
    }
    if spec.train is not None:
        env["MESHCTL_TRAIN"] = json.dumps(_train_spec(view, attempt, nodes), sort_keys=True)
        # Ray Train's controller collects each worker's report when it polls (every 2 s by
        # default) and a report waits for that: a loop reporting every step would crawl.
        env.setdefault("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "0.1")
        if attempt.detail.get("pool_mtbf_s"):
            env["MESHCTL_POOL_MTBF_S"] = f"{float(attempt.detail['pool_mtbf_s']):.0f}"
    runtime_env = spec.runtime_env.model_dump(exclude_none=True, exclude_defaults=True)
    runtime_env["env_vars"] = env
    if spec.working_dir:
        runtime_env["working_dir"] = spec.working_dir
    entrypoint_holds = spec.reserves_for == "entrypoint"
    return Submission(
        submission_id=attempt.submission_id,
        entrypoint=spec.entrypoint or TRAIN_ENTRYPOINT,
        runtime_env=runtime_env,
        metadata={"meshctl_job_id": record.id, "meshctl_attempt": str(attempt.number)},
        label_selector={NODE_LABEL: nodes[0]} if nodes else {},
        num_cpus=res.cpus if entrypoint_holds else None,
        num_gpus=res.gpus if entrypoint_holds and res.gpus else None,
        memory_bytes=int(res.memory_gib * 1024**3) if entrypoint_holds else None,
    )


def _checkpoint_target(pool: Pool | None, view: JobView) -> tuple[str, str | None] | None:
    """Where the job keeps checkpoints (its own storage, else its pool's), one folder per job
    for all its attempts, and the S3 endpoint to reach it by (None: the default)."""
    checkpoint = view.job.spec.checkpoint
    if checkpoint is not None and checkpoint.storage:
        base, endpoint = checkpoint.storage, None
    elif pool is not None and pool.checkpoint_storage is not None:
        base, endpoint = pool.checkpoint_storage.uri, pool.checkpoint_storage.endpoint_url
    else:
        return None
    return f"{base.rstrip('/')}/{view.record.id}", endpoint


def _checkpoint_of(
    attempt: AttemptRecord, rules: Rules, view: JobView
) -> tuple[str, str | None] | None:
    """The attempt's checkpoint storage (recorded at dispatch; computed for older records)."""
    if attempt.detail.get("checkpoint_uri"):
        endpoint = attempt.detail.get("checkpoint_endpoint")
        return str(attempt.detail["checkpoint_uri"]), str(endpoint) if endpoint else None
    return _checkpoint_target(rules.mesh.pool(attempt.pool), view)


def _train_spec(view: JobView, attempt: AttemptRecord, nodes: Sequence[str]) -> dict[str, Any]:
    """What ``meshctl.train.run`` builds the TorchTrainer from (see there)."""
    spec = view.job.spec
    train, res = spec.train, spec.resources
    assert train is not None
    per_node = train.workers_per_node
    target = attempt.detail.get("checkpoint_uri")
    storage = str(target).rsplit("/", 1)[0] if target else None  # the run is named by job id
    checkpoint = spec.checkpoint
    return {
        "loop": train.loop,
        "workers": spec.workers,
        "min_workers": train.min_workers,
        "workers_per_node": per_node,
        "nodes": list(nodes),
        "per_worker": {
            "CPU": res.cpus / per_node,
            "GPU": res.gpus / per_node,
            "memory": int(res.memory_gib * 1024**3 / per_node),
        },
        "max_failures": train.max_failures,
        "keep": checkpoint.keep if checkpoint else 3,
        "interval": checkpoint.interval if checkpoint else "auto",
        "config": train.config,
        "run_name": view.record.id,
        "storage": storage,
        "endpoint_url": attempt.detail.get("checkpoint_endpoint"),
    }


def _checkpoint_env(target: tuple[str, str | None] | None) -> dict[str, str]:
    if target is None:
        return {}
    uri, endpoint = target
    env = {"MESHCTL_CHECKPOINT_URI": uri}
    if uri.startswith("file://"):
        env["MESHCTL_CHECKPOINT_DIR"] = uri.removeprefix("file://")
    if endpoint:
        env["MESHCTL_CHECKPOINT_ENDPOINT_URL"] = endpoint
    return env


def _note(decision: Decision) -> DecisionNote:
    explanation = {
        "status": decision.status,
        "reason": decision.reason,
        "nodes_considered": decision.nodes_considered,
        "filtered": dict(decision.filtered),
        "exhausted": decision.exhausted,
        "candidates": [
            {"nodes": list(c.nodes), "total": c.total, "scores": dict(c.scores)}
            for c in decision.candidates
        ],
        "notes": list(decision.notes),
    }
    return DecisionNote(decision.job_id, decision.status, decision.summary(), explanation)
