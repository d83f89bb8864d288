"""The job and attempt state machine: each job brought in line with what its pool reports.

Job states (``JobState``) and when they change are in ``TRANSITIONS``, the table the
controller's README shows (a test holds the two together). Attempt states (``AttemptState``,
beside the records): ``submitting`` (recorded; Ray may not know it yet), then Ray's own
lowercased, or ``lost`` (its pool no longer knows it, and its driver log records no exit:
``meshctl/workload/exits.py``; one that does keeps the outcome it records), or ``abandoned`` (never
submitted: the job was cancelled first). A job whose attempt ended early is requeued or failed
by the lifecycle's rule (``meshctl.lifecycle.effects.requeue_or_fail``): evictions count
against its ``max_restarts``, preemptions do not. Pure, like ``decide``.
"""

from __future__ import annotations

import re
from typing import Literal

from meshctl.controller.deciding.dispatch import failures_before, submission
from meshctl.controller.deciding.leaving import taken_back
from meshctl.controller.deciding.step import AttemptChange, Resubmit, Rules, Step, Stop, Transition
from meshctl.controller.deciding.world import JobView, World
from meshctl.lifecycle import Left, Requeue
from meshctl.lifecycle.effects import requeue_or_fail
from meshctl.pools.observed import INFRA_ERRORS, RAY_ACTIVE, ObservedJob
from meshctl.state.records import (
    ACTIVE_ATTEMPT,
    FINISHED,
    QUEUED,
    AttemptRecord,
    AttemptState,
    JobState,
)

HOLDING = frozenset(
    {JobState.ADMITTED, JobState.DISPATCHED, JobState.RUNNING, JobState.PREEMPTED,
     JobState.EVICTED}
)  # fmt: skip
LEFT = {JobState.PREEMPTED: Left.PREEMPTED, JobState.EVICTED: Left.EVICTED}
KILLED = re.compile(  # SIGKILL, SIGTERM: not the job's own doing (the log tail is the job's)
    r"^Job entrypoint command failed with exit code (-9|-15|137|143)\b"
)
# Ray's words for a process of the run that died under it (an actor that never ran or died
# unexpectedly, a crashed worker, a node gone), not an exception the job's code raised.
DIED_UNDER_IT = re.compile(
    r"The actor never ran|The actor died unexpectedly|WorkerCrashedError|NodeDiedError"
    r"|ActorUnschedulableError|RaySystemError"
)

# (from, to, when): every change of a job's state. "(submit)" is a job stored; "any
# unfinished" every state but succeeded, failed and cancelled. controller/README.md shows it,
# and ``ALLOWED`` (the pairs it allows) is what the loop holds every transition to.
TRANSITIONS: tuple[tuple[str, str, str], ...] = (
    ("(submit)", "pending", "the job is stored"),
    (
        "pending, requeued",
        "admitted",
        "the scheduler placed it; its attempt is recorded (`submitting`)",
    ),
    ("admitted", "dispatched", "Ray accepted submission `meshctl-<job>-<attempt>`"),
    ("admitted, dispatched", "running", "Ray reports it running (admitted: adopted after a crash)"),
    (
        "admitted, dispatched, running, preempted, evicted",
        "succeeded / failed",
        "Ray reports it finished (failed: its command failed; a leaving job may finish in its "
        "grace)",
    ),
    (
        "any unfinished",
        "cancelled",
        "`meshctl jobs cancel` (the controller then stops the Ray job), or stopped outside meshctl",
    ),
    (
        "admitted, dispatched, running",
        "preempted",
        "the scheduler needs its GPUs for a higher-priority job (stopped after the grace "
        "period), or its spot instance was given notice or taken back (asked to checkpoint "
        "first)",
    ),
    (
        "admitted, dispatched, running",
        "evicted",
        "its node died, became unhealthy or was drained past the deadline, its supervisor "
        "died, its driver was killed, it hung, its pool lost it, or a process of its Ray "
        "Train run died before its loop ran",
    ),
    ("preempted, evicted", "requeued", "its Ray job has stopped; the next attempt is number + 1"),
    (
        "preempted, evicted",
        "failed",
        "its Ray job has stopped and its failures (evictions) pass its `max_restarts`",
    ),
    ("pending", "failed", "its `limits.deadline` came before it started"),
    ("running", "failed", "it ran past its `limits.max_runtime_s` (its Ray job is then stopped)"),
    (
        "admitted",
        "failed",
        "its pool refused its submission five times (a pool that cannot take it now is waited for)",
    ),
    (
        "admitted, dispatched, running",
        "requeued",
        "it has no attempt recorded (the controller died between placing it and recording "
        "its attempt)",
    ),
    (
        "admitted, dispatched, running, preempted, evicted",
        "requeued",
        "`meshctl down --force` (or `--drain --force` past its deadline) stopped its pool; "
        "the next `up` runs it again",
    ),
)


def _allowed() -> frozenset[tuple[JobState | None, JobState]]:
    unfinished = [s for s in JobState if s not in FINISHED]
    pairs = set()
    for sources, targets, _ in TRANSITIONS:
        froms: list[JobState | None] = []
        for name in sources.split(", "):
            if name == "(submit)":
                froms.append(None)
            elif name == "any unfinished":
                froms += unfinished
            else:
                froms.append(JobState(name))
        pairs |= {(f, JobState(t)) for f in froms for t in targets.split(" / ")}
    return frozenset(pairs)


ALLOWED = _allowed()  # (from, to): what TRANSITIONS allows; None is a job being stored

Kept = Literal["holding", "queued", "service"] | None


def reconcile(view: JobView, world: World, rules: Rules, step: Step) -> Kept:
    """Bring one job in line with its pool; say whether it holds resources or waits."""
    record, attempt = view.record, view.attempt
    state = record.state
    if view.job.spec.serve is not None:  # a service: no Ray job; services.py follows it
        return None if state in FINISHED else "service"
    if state in QUEUED:
        return "queued"
    if attempt is None or attempt.state not in ACTIVE_ATTEMPT:
        if state in (JobState.ADMITTED, JobState.DISPATCHED, JobState.RUNNING):
            # admitted, then the controller died before recording an attempt
            step.transitions.append(Transition(record.id, JobState.REQUEUED, "no attempt"))
        elif state in LEFT:
            requeue(view, LEFT[state], "its attempt has ended", step)
        return None
    observation = world.pools.get(attempt.pool)
    if observation is not None and not observation.reachable:
        return "holding"  # nothing is known; keep its resources counted
    # No observation at all: the pool has no cluster any more (a cloud pool whose last
    # instance went, a local pool that is down): whatever ran there is gone.
    ray = observation.jobs.get(attempt.submission_id) if observation else None
    if ray is None and attempt.id in world.exits:  # ended before its head forgot it
        ray = recorded_exit(attempt, world.exits[attempt.id], world.now_s)
    if state in FINISHED:  # cancelled (or finished) while its attempt may still run
        if ray is not None and ray.status in RAY_ACTIVE:
            step.stops.append(Stop(record.id, attempt.pool, attempt.submission_id, state.value))
            return "holding"
        step.attempts.append(ended(attempt, ray, world.now_s))
        return None
    if state in LEFT:
        return _leaving(view, attempt, ray, world, step)
    if ray is None:  # admitted, dispatched or running, and its pool does not know it
        return _unknown(view, attempt, observation is None, world, rules, step)
    return follow(view, attempt, ray, world, step)


def recorded_exit(attempt: AttemptRecord, status: int, now: float) -> ObservedJob:
    """What Ray would have said of an attempt whose driver log recorded its exit
    (``meshctl/workload/exits.py``): Ray's own words for a failure, so a killed one is told
    apart."""
    if status == 0:
        return ObservedJob(attempt.submission_id, "SUCCEEDED", "its log records exit 0", end_s=now)
    said = f"Job entrypoint command failed with exit code {status} (its log records it)"
    return ObservedJob(attempt.submission_id, "FAILED", said, end_s=now)


def _leaving(
    view: JobView, attempt: AttemptRecord, ray: ObservedJob | None, world: World, step: Step
) -> Kept:
    """A preempted or evicted job: stopped once its stop time has come, requeued (or failed)
    once its Ray job has stopped; one that finished on its own meanwhile keeps that outcome."""
    record, now = view.record, world.now_s
    if ray is not None and ray.status in RAY_ACTIVE:
        stop_at = attempt.detail.stop_at_s
        if stop_at is None or now >= stop_at:
            step.stops.append(
                Stop(record.id, attempt.pool, attempt.submission_id, record.state.value)
            )
        return "holding"
    stopped = (
        ray is None
        or ray.status == "STOPPED"
        or ray.error_type in INFRA_ERRORS
        or (ray.status == "FAILED" and taken_back(world, attempt) is not None)
    )  # a job that failed because its instance was taken back is requeued, not failed
    if not stopped:  # it finished on its own during its grace: that is its outcome
        assert ray is not None
        return follow(view, attempt, ray, world, step)
    step.attempts.append(ended(attempt, ray, now))
    requeue(view, LEFT[record.state], f"{record.state.value}; its attempt has stopped", step)
    return None


def _unknown(
    view: JobView, attempt: AttemptRecord, gone: bool, world: World, rules: Rules, step: Step
) -> Kept:
    """An attempt its pool does not know: submitted (again) if it never was, else lost."""
    record = view.record
    if attempt.state == AttemptState.SUBMITTING and not gone:
        sub = submission(view, rules, attempt)
        step.resubmits.append(Resubmit(record.id, attempt.id, attempt.pool, sub))
        return "holding"
    step.attempts.append(
        AttemptChange(attempt.id, AttemptState.LOST, "the pool no longer knows it")
    )
    taken = taken_back(world, attempt)
    if taken:
        step.transitions.append(
            Transition(record.id, JobState.PREEMPTED, f"spot instance {taken} was taken back")
        )
        requeue(view, Left.PREEMPTED, "its instance was taken back", step)
    else:
        step.transitions.append(
            Transition(record.id, JobState.EVICTED, f"pool {attempt.pool} lost the job")
        )
        requeue(view, Left.EVICTED, "its pool lost it", step)
    return None


def follow(
    view: JobView, attempt: AttemptRecord, ray: ObservedJob, world: World, step: Step
) -> Kept:
    """A job its pool knows: move the job and the attempt to what Ray says."""
    record, status = view.record, ray.status.lower()
    if status != attempt.state:
        started = ray.start_s if status == AttemptState.RUNNING else None
        step.attempts.append(AttemptChange(attempt.id, status, ray.message, started, ray.end_s))
    if status == AttemptState.PENDING:
        if record.state is not JobState.DISPATCHED:
            step.transitions.append(Transition(record.id, JobState.DISPATCHED, "submitted"))
        return "holding"
    if status == AttemptState.RUNNING:
        if record.state is not JobState.RUNNING:
            step.transitions.append(Transition(record.id, JobState.RUNNING, "started"))
        return "holding"
    if status == AttemptState.SUCCEEDED:
        step.transitions.append(Transition(record.id, JobState.SUCCEEDED, "exited 0"))
        began = ray.start_s if ray.start_s is not None else attempt.started_at_s
        if began is not None:  # what its runtime estimates learn from
            runtime = (ray.end_s if ray.end_s is not None else world.now_s) - began
            step.successes.append((record.team, record.name, max(0.0, runtime)))
    elif status == AttemptState.FAILED and ray.error_type in INFRA_ERRORS:
        _failed_under_it(view, attempt, ray, world, step)
    elif status == AttemptState.FAILED and KILLED.search(ray.message or ""):
        said = (ray.message or "").splitlines()[0]  # Ray's own line, not the job's log tail
        why = f"its driver was killed: {said}"  # the OOM killer, a node
        step.transitions.append(Transition(record.id, JobState.EVICTED, why))
        requeue(view, Left.EVICTED, "its driver was killed", step)
    elif status == AttemptState.FAILED and before_its_loop(view, attempt, ray, world):
        why = f"its run died before its loop ran: {_died(ray.message or '')}"
        step.transitions.append(Transition(record.id, JobState.EVICTED, why[:300]))
        requeue(view, Left.EVICTED, "its run died before its loop ran", step)
    elif status == AttemptState.FAILED:
        step.transitions.append(Transition(record.id, JobState.FAILED, last_line(ray.message)))
    else:  # stopped by someone else
        step.transitions.append(
            Transition(record.id, JobState.CANCELLED, "stopped outside meshctl")
        )
    return None


def before_its_loop(view: JobView, attempt: AttemptRecord, ray: ObservedJob, world: World) -> bool:
    """A train job whose run failed because a process of it died (Ray's words), with no
    report from its loop in this attempt: the loop never ran, so the failure is not its
    own. It is evicted and runs again (counted against its max_restarts), never failed for
    good. A loop that raised before its first report says so in its own words, and fails."""
    if view.job.spec.train is None or not DIED_UNDER_IT.search(ray.message or ""):
        return False
    seen = world.progress.get(view.record.id)
    return seen is None or seen.attempt != attempt.number or seen.reports == 0


def _died(message: str) -> str:
    """Ray's line that says what died."""
    found = DIED_UNDER_IT.search(message)
    if found is None:
        return last_line(message)
    start = message.rfind("\n", 0, found.start()) + 1
    end = message.find("\n", found.end())
    return message[start : end if end >= 0 else len(message)].strip()


def _failed_under_it(
    view: JobView, attempt: AttemptRecord, ray: ObservedJob, world: World, step: Step
) -> None:
    """Its infrastructure failed under it: a spot instance taken back (a preemption), or a
    node or supervisor that died (an eviction: a failure)."""
    record, taken = view.record, taken_back(world, attempt)
    if taken:
        why = f"spot instance {taken} was taken back"
        step.transitions.append(Transition(record.id, JobState.PREEMPTED, why))
        requeue(view, Left.PREEMPTED, "its instance was taken back", step)
        return
    message = ray.message or ""
    why = "its node died" if "node has died" in message else last_line(message)
    step.transitions.append(Transition(record.id, JobState.EVICTED, why))
    requeue(view, Left.EVICTED, ray.error_type or "infrastructure failure", step)


def requeue(view: JobView, left: Left, why: str, step: Step) -> None:
    """Requeue the job, or fail it when its failures pass its max_restarts (the lifecycle's
    rule); the attempt records the failures so far."""
    limit = view.job.spec.limits.max_restarts
    outcome, failures = requeue_or_fail(
        view.record.id, left, why, failures_before(view.attempt), limit
    )
    if view.attempt is not None:
        step.attempts.append(AttemptChange(view.attempt.id, None, failures=failures))
    to = JobState.REQUEUED if isinstance(outcome, Requeue) else JobState.FAILED
    step.transitions.append(Transition(view.record.id, to, outcome.reason))


def ended(attempt: AttemptRecord, ray: ObservedJob | None, now: float) -> AttemptChange:
    if ray is None:
        gone = "the pool no longer knows it"
        return AttemptChange(attempt.id, AttemptState.LOST, gone, ended_at_s=now)
    return AttemptChange(attempt.id, ray.status.lower(), ray.message, ended_at_s=ray.end_s or now)


def last_line(text: str) -> str:
    """What a failure says last (Ray's message ends with the job's own last words)."""
    return text.strip().splitlines()[-1][:300] if text.strip() else "failed"
