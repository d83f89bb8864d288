"""The controller's applying half: a step carried out in a crash-safe order.

Store writes first (attempt changes, transitions, each with its event), then what reaches
the pools (stops, asked again only after ``STOP_RESEND_S``; checkpoint requests where the job
keeps its checkpoints; resubmissions and dispatches), then the cloud side (launches,
teardowns), then what is recorded of the cycle (decisions when they change, rule failures,
budget crossings) and what runtime estimates learn. A dispatch: the attempt (with its
deterministic submission id) is recorded before Ray hears of it, the job becomes admitted,
Ray gets the submission, the job becomes dispatched; a controller killed in between finds
what it needs on restart (``loop.py``). Every transition is held to the job-state table
(``states.ALLOWED``): one outside it is logged.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from meshctl.controller.burst import Burst
from meshctl.controller.decide import (
    FINISHED,
    AttemptChange,
    CheckpointRequest,
    Dispatch,
    Replacement,
    Rules,
    Step,
    Transition,
)
from meshctl.controller.failpoints import failpoint
from meshctl.controller.records import Recorder
from meshctl.controller.states import ALLOWED
from meshctl.controller.step import ServiceChange
from meshctl.lifecycle import BudgetCrossed, Estimator
from meshctl.pools.checkpoints import request_checkpoint
from meshctl.state.records import (
    ACTIVE_ATTEMPT,
    AttemptRecord,
    AttemptState,
    Decision,
    Event,
    JobRecord,
    JobState,
    LoanRecord,
)
from meshctl.state.store import ConflictError, NotFoundError, Store

if TYPE_CHECKING:
    from meshctl.controller.loop import PoolClient
    from meshctl.controller.packages import Packages
    from meshctl.pools.observed import Submission

log = logging.getLogger("meshctl.controller")
STOP_RESEND_S = 10.0  # a stop not yet seen to take effect is asked again after this
MAX_SUBMIT_ERRORS = 5  # a submission refused this often fails its job instead of holding GPUs
BUDGET_SAID = {
    "warn": "past its warning share",
    "exceeded": "exhausted: bursting stops",
    "ok": "back within its warning share",
}


class Applying:
    """What the loop applies a step with (``Controller`` sets these up)."""

    store: Store
    rules: Rules
    clients: Mapping[str, PoolClient]
    burst: Burst | None
    recorder: Recorder
    estimator: Estimator | None
    _stopped: dict[str, float]
    _decided: dict[str, tuple[str, str, str]]
    packages: Packages | None

    def _budget_states(self) -> dict[str, str]:
        raise NotImplementedError

    def apply(self, step: Step, now: float) -> list[str]:
        errors: list[str] = []
        for change in step.attempts:
            self._attempt(change, now)
        for replacement in step.replacements:
            error = self._replace(replacement, now)
            if error:
                errors.append(error)
        for transition in step.transitions:
            self._transition(transition, now)
        for service in step.services:
            self._service(service, now)
        for loan in step.loans:
            self._loan(loan, now)
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
                outcome = self._submit(resubmit.pool, resubmit.job_id, resubmit.submission)
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
            outcome = self._submit(attempt.pool, dispatch.job_id, dispatch.submission)
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

    def _submit(self, pool: str, job_id: str, submission: Submission) -> str:
        """Send a submission to its pool, its working directory a folder on this host."""
        if self.packages is not None:
            submission = self.packages.here(job_id, submission)
        return self.clients[pool].submit(submission)

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

    def _replace(self, change: Replacement, now: float) -> str | None:
        """An attempt on its new nodes: recorded (with a ``job.node-replaced`` event), then its
        run told its new pins beside its checkpoints; what went wrong, or None."""
        attempt = self.store.get(AttemptRecord, change.attempt_id)
        if attempt is None:
            return None
        nodes = [h.node for h in change.allocations]
        data = {"attempt": change.attempt, "nodes": nodes}
        event = Event(now, "job.node-replaced", change.job_id, change.reason, data)
        try:
            self.store.update(
                change.onto(attempt), expected_version=attempt.version, events=[event]
            )
        except (ConflictError, NotFoundError):
            return None  # changed meanwhile (a cancel): the next cycle decides again
        from meshctl.train.nominations import nominate  # pyarrow: only when a node is replaced

        try:
            nominate(change.uri, change.endpoint_url, change.attempt, change.ray_node_ids)
        except Exception as err:  # storage unreachable: the run's wait ends, the attempt fails
            return f"nominate {change.job_id} attempt {change.attempt}: {err}"
        return None

    def renominate(self, attempts: Sequence[AttemptRecord]) -> list[str]:
        """Each running attempt that had a node replaced is told its pins again (at the
        controller's start: one that stopped between recording a replacement and telling the
        run would leave the run waiting); what went wrong."""
        errors = []
        for attempt in attempts:
            detail = attempt.detail
            if (
                not detail.replaced
                or not detail.checkpoint_uri
                or attempt.state not in ACTIVE_ATTEMPT
            ):
                continue
            from meshctl.train.nominations import nominate  # pyarrow: only when one needs it

            try:
                nominate(detail.checkpoint_uri, detail.checkpoint_endpoint or None,
                         attempt.number, detail.ray_node_ids)  # fmt: skip
            except Exception as err:  # storage unreachable: said, and the run's wait decides
                errors.append(f"nominate {attempt.job_id} attempt {attempt.number}: {err}")
        return errors

    def _attempt(self, change: AttemptChange, now: float) -> None:
        attempt = self.store.get(AttemptRecord, change.attempt_id)
        if attempt is None:
            return
        detail = attempt.detail
        if change.stop_at_s is not None and detail.stop_at_s is None:  # a grace never moves
            detail = replace(detail, stop_at_s=change.stop_at_s)
        if change.for_job is not None and detail.for_job is None:
            detail = replace(detail, for_job=change.for_job)
        if change.lent or change.grows_onto:
            detail = replace(detail, lent=change.lent, grows_onto=change.grows_onto)
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
        """Record the decisions that changed, in one transaction (a cycle over thousands of
        new jobs writes once, not once a job)."""
        policy_hash = self.rules.policies.content_hash if self.rules.policies else ""
        changed: dict[str, tuple[str, str, str]] = {}
        recorded = []
        for note in step.decisions:
            key = (note.outcome, note.summary, policy_hash)  # after a reload: recorded again
            if self._decided.get(note.job_id) == key or changed.get(note.job_id) == key:
                continue
            changed[note.job_id] = key
            explanation = {"summary": note.summary, **note.explanation}
            recorded.append(Decision(now, note.job_id, note.outcome, policy_hash, explanation))
        self.store.record_decisions(recorded)
        self._decided.update(changed)  # after the write: a failed one is tried again

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

    def _service(self, change: ServiceChange, now: float) -> None:
        """A service's one attempt: its replicas and scaling, recorded; what changed, an
        event."""
        attempt_id = f"{change.job_id}-1"
        found = self.store.get(AttemptRecord, attempt_id)
        scaling = change.scaling
        if found is None:
            found = self.store.create(
                AttemptRecord(
                    attempt_id, change.job_id, 1, change.pool, f"serve-{change.job_id}",
                    AttemptState.RUNNING, now, None,
                )
            )  # fmt: skip
        detail = replace(
            found.detail,
            allocations=change.allocations,
            replica_ids=change.replica_ids,
            replicas_wanted=change.wanted,
            above_since_s=scaling.above_since_s,
            below_since_s=scaling.below_since_s,
            most_below=scaling.most_below,
            next_replica=change.next_replica,
            serving=change.serving,
        )
        events = [Event(now, "service.replicas", change.job_id, change.why)] if change.why else []
        self.store.update(
            replace(found, detail=detail), expected_version=found.version, events=events
        )

    def _loan(self, loan: LoanRecord, now: float) -> None:
        """The lending ledger: a loan opened (new) or closed (its record updated)."""
        if loan.closed_at_s is None:
            if self.store.get(LoanRecord, loan.id) is not None:
                return  # recorded by an earlier try of this step
            what = f"lends {loan.node} ({loan.gpus:g} GPUs) to {loan.borrower}"
            self.store.create(loan, events=[Event(now, "loan.opened", loan.lender, what)])
            return
        found = self.store.get(LoanRecord, loan.id)
        if found is None or found.closed_at_s is not None:
            return
        hours = (loan.closed_at_s - found.opened_at_s) * found.gpus / 3600
        what = f"{found.node} back from {found.borrower} ({hours:.2f} GPU-hours lent)"
        closed = replace(found, closed_at_s=loan.closed_at_s)
        self.store.update(
            closed,
            expected_version=found.version,
            events=[Event(now, "loan.closed", found.lender, what)],
        )

    def _event(self, now: float, kind: str, job_id: str | None, message: str) -> None:
        self.store.append_event(Event(now, kind, job_id, message))
