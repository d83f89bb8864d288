"""The controller's acting half: observe -> decide -> apply -> record, once per cycle.

Everything that can be decided is decided by ``decide`` (pure); this module only gathers the
world (pool adapters and the store), applies the step in a crash-safe order, and writes a
heartbeat. Crash safety of a dispatch: the attempt (with its deterministic submission id) is
recorded before Ray hears of it; Ray refuses a second job with the same id; and the next cycle
adopts what Ray already runs or submits what it does not know. Failpoints
(``MESHCTL_FAILPOINT=after-submit``) let tests kill the controller at exactly those points.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

from meshctl.controller.burst import Burst
from meshctl.controller.decide import (
    FINISHED,
    AttemptChange,
    CheckpointRequest,
    Dispatch,
    Rules,
    Step,
    Transition,
    decide,
)
from meshctl.controller.logs import LogCopier
from meshctl.controller.nodes import pools_down
from meshctl.controller.progress import ProgressReader
from meshctl.controller.records import Recorder
from meshctl.controller.reload import Reloader, in_use_removed
from meshctl.controller.states import ALLOWED
from meshctl.controller.world import JobView, World, latest_attempts, node_busy, past_runs
from meshctl.lifecycle import BudgetCrossed, Estimator
from meshctl.model.job import Job
from meshctl.pools.checkpoints import request_checkpoint
from meshctl.pools.observed import PoolObservation, Submission
from meshctl.pools.ray import LogChunk
from meshctl.state.private import write_private
from meshctl.state.records import (
    ACTIVE_ATTEMPT,
    AttemptRecord,
    AttemptState,
    Decision,
    Event,
    JobRecord,
    JobState,
    NodeRecord,
)
from meshctl.state.store import ConflictError, NotFoundError, Store

log = logging.getLogger("meshctl.controller")
STOP_RESEND_S = 10.0  # a stop not yet seen to take effect is asked again after this
BUDGET_SAID = {
    "warn": "past its warning share",
    "exceeded": "exhausted: bursting stops",
    "ok": "back within its warning share",
}
MAX_SUBMIT_ERRORS = 5  # a submission refused this often fails its job instead of holding GPUs


class PoolClient(Protocol):
    """What the loop needs of a pool adapter (``meshctl.pools.ray.RayPoolClient``)."""

    def observe(self) -> PoolObservation: ...

    def submit(self, submission: Submission) -> str: ...

    def stop(self, submission_id: str) -> bool: ...

    def read_log(self, submission_id: str, offset: int, limit: int) -> LogChunk | None: ...


def failpoint(name: str) -> None:
    """Die here, as SIGKILL would, when ``MESHCTL_FAILPOINT`` names this point (tests)."""
    if os.environ.get("MESHCTL_FAILPOINT") == name:
        log.warning("failpoint %s: killing the controller", name)
        os.kill(os.getpid(), signal.SIGKILL)


@dataclass
class CycleReport:
    at_s: float
    duration_s: float
    jobs: int
    dispatched: int
    transitions: int
    errors: list[str]
    unavailable: Mapping[str, str] = field(default_factory=dict)  # pool -> why, this cycle


class Controller:
    def __init__(
        self,
        store: Store,
        rules: Rules,
        clients: Mapping[str, PoolClient],
        clock: Callable[[], float] = time.time,
        heartbeat: Path | None = None,
        resolve: Callable[[], tuple[Mapping[str, PoolClient], Mapping[str, str]]] | None = None,
        burst: Burst | None = None,
        health: Callable[[], Mapping[str, str]] | None = None,
        reloader: Reloader | None = None,
        logs: LogCopier | None = None,
        hold: Callable[[], str | None] | None = None,
        progress: ProgressReader | None = None,
    ) -> None:
        """``resolve``: how to find the pools again each cycle (a pool restarted by ``up``
        comes back on new ports with a new token), and the Ray pools without a client, with
        why (``runtime.driven``); without it, ``clients`` are fixed.
        ``health``: the nodes' health signals (``meshctl.pools.health``), by "pool/node".
        ``reloader``: takes a new rule set asked for or noticed (``reload.py``); the rules
        are replaced at the start of a cycle, never within one.
        ``logs``: copies the jobs' driver logs into the state folder (``logs.py``).
        ``hold``: why nothing new may start now (``meshctl down --drain``), or None.
        ``progress``: reads what running train jobs recorded (``progress.py``)."""
        self.store, self.rules, self.clients, self.clock = store, rules, clients, clock
        self.resolve = resolve
        self.unreachable: Mapping[str, str] = {}  # Ray pools without a client -> why
        self.burst = burst  # the cloud side: launches, instance watch, teardown
        self.health = health
        self.logs, self.hold = logs, hold
        self.reloader = reloader
        if reloader is not None:
            reloader.veto = lambda old, new: in_use_removed(old, new, self._busy_pools())
        self.progress = progress or ProgressReader(store)  # what running train jobs report
        self.heartbeat = heartbeat
        self.cycles = 0
        self._jobs: dict[str, Job] = {}  # parsed job files, by job id
        self._same: dict[str, Job] = {}  # by content: identical jobs share one object
        self._decided: dict[str, tuple[str, str, str]] = {}  # job -> last decision recorded
        self.recorder = Recorder(store)  # pool and node records, node health
        self._stopped: dict[str, float] = {}  # submission id -> when a stop was last sent
        self.estimator: Estimator | None = None  # runtimes of the jobs that ended well
        self._budgets: dict[str, str] | None = None  # budget -> what it was last said to be

    # --- one cycle ----------------------------------------------------------------------------

    def cycle(self) -> CycleReport:
        started = time.perf_counter()
        now = self.clock()
        self._reload(now)
        if self.resolve is not None:
            self.clients, self.unreachable = self.resolve()
        if self.burst is not None:
            self.burst.watch(now)
        world = self.world(now)
        if self.hold is not None:
            world = replace(world, hold=self.hold())
        step = decide(world, self.rules)
        errors = self.apply(step, now)
        if self.logs is not None:
            self.logs.follow(world, self.clients)
        self.recorder.record(world, self.rules.mesh, self.burst, now)
        self.cycles += 1
        report = CycleReport(
            now,
            time.perf_counter() - started,
            len(world.jobs),
            len(step.dispatches),
            len(step.transitions),
            errors,
            world.pool_unavailable,
        )
        self._beat(report)
        return report

    def _reload(self, now: float) -> None:
        """A rule set asked for or noticed: taken for this cycle on, or refused (the old one
        runs on); either way an event, and the heartbeat says so."""
        found = self.reloader.poll(now, self.rules) if self.reloader is not None else None
        if found is None:
            return
        rules, outcome = found
        data = {"old_hash": outcome.old_hash, "new_hash": outcome.new_hash}
        if outcome.request:
            data["request"] = outcome.request
        if outcome.outcome == "reloaded":
            self.rules = rules
            if self.burst is not None:
                self.burst.use(rules.mesh, rules.catalogs)
            message = "; ".join([outcome.message, *outcome.notes])
            self.store.append_event(Event(now, "policy.reloaded", None, message, data))
            log.info("%s", message)
        elif outcome.outcome == "refused":
            message = f"kept policies {outcome.old_hash}: {outcome.message}"
            self.store.append_event(Event(now, "policy.reload_refused", None, message, data))
            log.warning("reload refused: %s", outcome.message)

    def _busy_pools(self) -> set[str]:
        """Pools where jobs run or cloud instances live (a reload may not drop them)."""
        busy = {a.pool for a in self.store.list(AttemptRecord) if a.state in ACTIVE_ATTEMPT}
        return busy | ({i.pool for i in self.burst.live()} if self.burst is not None else set())

    def world(self, now: float) -> World:
        observations = {name: client.observe() for name, client in self.clients.items()}
        records = self.store.list(JobRecord)
        attempts = self.store.list(AttemptRecord)
        latest = latest_attempts(attempts)
        views = []
        for record in records:
            attempt = latest.get(record.id)
            active = attempt is not None and attempt.state in ACTIVE_ATTEMPT
            if record.state in FINISHED and not active:
                continue
            job = self._job(record)
            if job is not None:
                views.append(JobView(record, job, attempt))
        if self.estimator is None:  # once: the runs recorded before this controller began
            self.estimator = Estimator()
            self.estimator.observe_all(past_runs(records, latest))
        health = dict(self.health()) if self.health is not None else {}
        down = pools_down(self.rules.mesh, observations, self.unreachable)
        down |= self.burst.down() if self.burst is not None else {}
        world = World(
            now,
            observations,
            tuple(views),
            {n.id: n for n in self.store.list(NodeRecord)},
            progress=self.progress.read(views),
            health=health,
            pool_unavailable=down,
            node_busy_s=node_busy(attempts, now),
            estimator=self.estimator,
            budget_states=self._budget_states(),
        )
        if self.burst is None:
            return world
        return replace(
            world,
            instances=tuple(self.burst.live()),
            unavailable=self.burst.blocked(now),
            spend_usd=self.burst.spend(now),
            team_spend_usd=self.burst.team_spend(now),
            interrupted=self.burst.interrupted(),
            reclaiming=self.burst.reclaiming(),
        )

    def _budget_states(self) -> dict[str, str]:
        """What each budget was last said to be (``budget.*`` events; read from the store
        once, so a restarted controller does not say it again)."""
        if self._budgets is None:
            self._budgets = {}
            for event in self.store.events():
                if event.kind.startswith("budget.") and "budget" in event.data:
                    self._budgets[str(event.data["budget"])] = event.kind.removeprefix("budget.")
        return self._budgets

    def _job(self, record: JobRecord) -> Job | None:
        job = self._jobs.get(record.id)
        if job is None:
            content = json.dumps(record.spec, sort_keys=True)
            job = self._same.get(content)
            if job is None:
                try:
                    job = self._same[content] = Job.model_validate(record.spec)
                except ValueError as err:  # a record written by a different meshctl
                    log.error("job %s: stored spec is invalid: %s", record.id, err)
                    return None
            self._jobs[record.id] = job
        return job

    # --- applying -----------------------------------------------------------------------------

    def apply(self, step: Step, now: float) -> list[str]:
        errors: list[str] = []
        for change in step.attempts:
            self._attempt(change, now)
        for transition in step.transitions:
            self._transition(transition, now)
        for stop in step.stops:
            if now - self._stopped.get(stop.submission_id, -STOP_RESEND_S) < STOP_RESEND_S:
                continue  # asked already; Ray is stopping it
            self._stopped[stop.submission_id] = now
            try:
                if self.clients[stop.pool].stop(stop.submission_id):
                    self._event(now, "job.stop", stop.job_id, f"stopping it ({stop.reason})")
            except Exception as err:  # an adapter error is reported, the loop goes on
                errors.append(f"stop {stop.submission_id}: {err}")
        for node_change in step.nodes:
            self.recorder.node_health(node_change, now)
        for request in step.checkpoints:
            error = self._ask_to_checkpoint(request, now)
            if error:
                errors.append(error)
        for resubmit in step.resubmits:
            try:
                outcome = self.clients[resubmit.pool].submit(resubmit.submission)
            except Exception as err:
                errors.append(self._submit_failed(resubmit.job_id, resubmit.attempt_id, err, now))
                continue
            self._event(now, "job.submit", resubmit.job_id, f"{outcome} on {resubmit.pool}")
        for dispatch in step.dispatches:
            error = self._dispatch(dispatch, now)
            if error:
                errors.append(error)
        if self.burst is not None:
            for launch in step.launches:
                try:
                    error = self.burst.launch(launch, now)
                except Exception as err:  # a node that would not join, an SDK error
                    error = f"launch for {launch.job_id} in {launch.pool}: {err}"
                if error:
                    errors.append(error)
            for down in step.teardowns:
                self.burst.teardown(down, now)
        self._decisions(step, now)
        for failed in step.rule_errors:
            self.recorder.rule_error(failed, now)
        for crossed in step.budgets:
            self._budget(crossed, now)
        if self.estimator is not None:
            self.estimator.observe_all(step.successes)
        for error in errors:
            log.warning("%s", error)
        return errors

    def _ask_to_checkpoint(self, request: CheckpointRequest, now: float) -> str | None:
        """Tell the job to checkpoint now, where it keeps its checkpoints (meshctl.workload)."""
        left = max(0.0, request.deadline_s - now)
        if request.uri is None:
            message = f"{request.reason}; it has no checkpoint storage to be asked through"
            self._event(now, "job.checkpoint-request", request.job_id, message)
            return None
        body = {
            "attempt": request.attempt,
            "reason": request.reason,
            "requested_at_s": now,
            "deadline_s": request.deadline_s,
        }
        try:
            where = request_checkpoint(request.uri, body, request.endpoint_url)
        except Exception as err:  # the job is stopped at the deadline all the same
            return f"checkpoint request for {request.job_id}: {err}"
        message = f"{request.reason}: asked to checkpoint within {left:.0f} s ({where})"
        self._event(now, "job.checkpoint-request", request.job_id, message)
        return None

    def _dispatch(self, dispatch: Dispatch, now: float) -> str | None:
        attempt = dispatch.attempt
        try:
            self.store.create(attempt)
        except ConflictError:
            return None  # recorded already; the next cycle adopts or resubmits it
        admitted = self._transition(
            Transition(dispatch.job_id, JobState.ADMITTED, dispatch.reason, attempt.pool), now
        )
        if not admitted:  # cancelled meanwhile: this attempt will never be submitted
            self._attempt(AttemptChange(attempt.id, AttemptState.ABANDONED, "not admitted"), now)
            return None
        failpoint("before-submit")
        try:
            outcome = self.clients[attempt.pool].submit(dispatch.submission)
        except Exception as err:
            return self._submit_failed(dispatch.job_id, attempt.id, err, now)
        failpoint("after-submit")
        self._attempt(AttemptChange(attempt.id, "pending"), now)
        self._transition(
            Transition(
                dispatch.job_id,
                JobState.DISPATCHED,
                f"{outcome} to pool {attempt.pool} as {attempt.submission_id}",
            ),
            now,
        )
        return None

    def _submit_failed(self, job_id: str, attempt_id: str, err: Exception, now: float) -> str:
        """Count a failed submission; retried next cycle, until MAX_SUBMIT_ERRORS fail it."""
        attempt = self.store.get(AttemptRecord, attempt_id)
        message = f"submit {attempt_id}: {err}"
        if attempt is None:
            return message
        count = attempt.detail.submit_errors + 1
        detail = replace(attempt.detail, submit_errors=count)
        failed = count >= MAX_SUBMIT_ERRORS
        changed = replace(attempt, detail=detail, reason=str(err)[:300])
        if failed:
            changed = replace(changed, state=AttemptState.FAILED, ended_at_s=now)
        with contextlib.suppress(ConflictError, NotFoundError):
            self.store.update(changed, expected_version=attempt.version)
        if failed:
            why = f"its pool refused it {count} times: {str(err)[:200]}"
            self._transition(Transition(job_id, JobState.FAILED, why), now)
        return message

    def _transition(self, t: Transition, now: float) -> bool:
        record = self.store.get(JobRecord, t.job_id)
        if record is None or record.state is t.to:
            return False
        if record.state in FINISHED:
            return False  # finished (or cancelled meanwhile) is final
        if (record.state, t.to) not in ALLOWED:  # the job-state table (states.py) is the rule
            log.error("job %s: %s -> %s is not in the job-state table", t.job_id,
                      record.state.value, t.to.value)  # fmt: skip
        changed = replace(record, state=t.to, pool=t.pool or record.pool, updated_at_s=now)
        event = Event(
            now,
            f"job.{t.to.value}",
            t.job_id,
            t.reason,
            {"from": record.state.value, "to": t.to.value, "pool": changed.pool},
        )
        try:
            self.store.update(changed, expected_version=record.version, events=[event])
        except (ConflictError, NotFoundError):
            return False  # someone else (a cancel) won; the next cycle sees their change
        return True

    def _attempt(self, change: AttemptChange, now: float) -> None:
        attempt = self.store.get(AttemptRecord, change.attempt_id)
        if attempt is None:
            return
        detail = attempt.detail
        if change.stop_at_s is not None and detail.stop_at_s is None:  # a grace never moves
            detail = replace(detail, stop_at_s=change.stop_at_s)
        if change.for_job is not None and detail.for_job is None:
            detail = replace(detail, for_job=change.for_job)
        if change.failures is not None:
            detail = replace(detail, failures=change.failures)
        updated = replace(
            attempt,
            state=change.state or attempt.state,
            reason=change.reason or attempt.reason,
            started_at_s=attempt.started_at_s or change.started_at_s,
            ended_at_s=attempt.ended_at_s or change.ended_at_s,
            detail=detail,
        )
        if updated == attempt:
            return
        with contextlib.suppress(ConflictError, NotFoundError):
            self.store.update(updated, expected_version=attempt.version)

    def _decisions(self, step: Step, now: float) -> None:
        policy_hash = self.rules.policies.content_hash if self.rules.policies else ""
        for note in step.decisions:
            key = (note.outcome, note.summary, policy_hash)  # after a reload: recorded again
            if self._decided.get(note.job_id) == key:
                continue
            self._decided[note.job_id] = key
            self.store.record_decision(
                Decision(
                    now,
                    note.job_id,
                    note.outcome,
                    policy_hash,
                    {"summary": note.summary, **note.explanation},
                )
            )

    def _budget(self, crossed: BudgetCrossed, now: float) -> None:
        """A budget's standing changed: ``budget.warn``, ``budget.exceeded`` or ``budget.ok``."""
        said = BUDGET_SAID.get(crossed.state, crossed.state)
        message = (
            f"budget {crossed.budget} ({crossed.scope}) {said}: {crossed.spent_usd:,.2f} of "
            f"{crossed.limit_usd:,.2f} USD this month"
        )
        data = {"budget": crossed.budget, "scope": crossed.scope, "state": crossed.state,
                "spent_usd": crossed.spent_usd, "limit_usd": crossed.limit_usd}  # fmt: skip
        self.store.append_event(Event(now, f"budget.{crossed.state}", None, message, data))
        self._budget_states()[crossed.budget] = crossed.state
        log.log(logging.INFO if crossed.state == "ok" else logging.WARNING, "%s", message)

    def _event(self, now: float, kind: str, job_id: str | None, message: str) -> None:
        self.store.append_event(Event(now, kind, job_id, message))

    def _beat(self, report: CycleReport) -> None:
        if self.heartbeat is None:
            return
        data = {
            "pid": os.getpid(),
            "cycles": self.cycles,
            "at_s": report.at_s,
            "cycle_ms": round(report.duration_s * 1000, 1),
            "jobs": report.jobs,
            "errors": report.errors[-5:],
            "policy_hash": self.rules.policies.content_hash if self.rules.policies else None,
            "unavailable": dict(report.unavailable),
        }
        if self.reloader is not None:
            data |= self.reloader.status()
        write_private(self.heartbeat, json.dumps(data))

    # --- running ------------------------------------------------------------------------------

    def run(
        self,
        interval_s: float = 1.0,
        stop: threading.Event | None = None,
        wake: threading.Event | None = None,
    ) -> None:
        """Cycle every ``interval_s``, or at once when ``wake`` is set (a submit, a cancel),
        until ``stop`` is set; a failing cycle is logged, not fatal."""
        stop, wake = stop or threading.Event(), wake or threading.Event()
        while not stop.is_set():
            wake.clear()
            try:
                report = self.cycle()
                if report.dispatched or report.transitions:
                    log.info(
                        "cycle %d: %d jobs, %d dispatched, %d transitions, %.0f ms",
                        self.cycles,
                        report.jobs,
                        report.dispatched,
                        report.transitions,
                        report.duration_s * 1000,
                    )
            except Exception:
                log.exception("cycle failed")
            wake.wait(interval_s)
