"""The controller's applying half: a step carried out in a crash-safe order.

Store writes first (attempt changes, transitions, each with its event), then what reaches
the pools (stops, asked again only after ``STOP_RESEND_S``; checkpoint requests where the job
keeps its checkpoints; resubmissions and dispatches), then the cloud side (launches,
teardowns), then what is recorded of the cycle (decisions when they change, rule failures,
budget crossings) and what runtime estimates learn. A dispatch: the attempt (with its
deterministic submission id) is recorded before Ray hears of it, the job becomes admitted,
Ray gets the submission, the job becomes dispatched; a controller killed in between finds
what it needs on restart (``loop.py``). Jobs and attempts are written in batches
(``writes.py``), every transition held to the job-state table.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from meshctl.controller.burst import Burst
from meshctl.controller.clients import PoolClient
from meshctl.controller.deciding.decide import (
    AttemptChange,
    CheckpointRequest,
    Dispatch,
    Replacement,
    Rules,
    Step,
    Transition,
)
from meshctl.controller.deciding.step import ServiceChange
from meshctl.controller.failpoints import failpoint
from meshctl.controller.history import History
from meshctl.controller.records import Recorder
from meshctl.controller.writes import JobWrites, lost
from meshctl.errors import in_words
from meshctl.lifecycle import BudgetCrossed, Estimator
from meshctl.pools.checkpoints import request_checkpoint
from meshctl.pools.ray import PoolUnavailable
from meshctl.state.records import (
    ACTIVE_ATTEMPT,
    AttemptRecord,
    AttemptState,
    Decision,
    Event,
    JobState,
    LoanRecord,
)
from meshctl.state.store import ConflictError, NotFoundError, Store, Write

if TYPE_CHECKING:
    from meshctl.controller.packages import Packages
    from meshctl.pools.observed import Submission

log = logging.getLogger("meshctl.controller")
STOP_RESEND_S = 10.0  # a stop not yet seen to take effect is asked again after this
# a submission refused this often fails its job instead of holding GPUs; a pool that cannot
# take it now (no answer, a server error) is not a refusal: the job waits for it
MAX_SUBMIT_ERRORS = 5
BUDGET_SAID = {
    "warn": "past its warning share",
    "exceeded": "exhausted: bursting stops",
    "ok": "back within its warning share",
}


class Applier:
    """The controller's applying half. It holds what a step is carried out with (the store,
    what the history keeps, the pool and node recorder, the cloud side, the jobs' packages)
    and what applying remembers between cycles: the pools refusing submissions now, when
    each stop was last sent, the decisions recorded, what each budget was last said to be.
    What changes from cycle to cycle (the pools' clients, the rules, the runtime estimates)
    comes with each step (``apply``)."""

    def __init__(
        self,
        store: Store,
        history: History,
        recorder: Recorder,
        burst: Burst | None = None,
        packages: Packages | None = None,
    ) -> None:
        self.store, self.history, self.recorder = store, history, recorder
        self.burst, self.packages = burst, packages
        self.refusing: dict[str, str] = {}  # pools that could not take a submission -> why
        self._stopped: dict[str, float] = {}  # submission id -> when a stop was last sent
        self._decided: dict[str, tuple[str, str, str]] = {}  # job -> last decision recorded
        self._budgets: dict[str, str] | None = None  # budget -> what it was last said to be
        self.writes = JobWrites(store, history)  # jobs moved and attempts changed, batched

    def budget_states(self) -> dict[str, str]:
        """What each budget was last said to be (``budget.*`` events; read from the store
        once, so a restarted controller does not say it again)."""
        if self._budgets is None:
            self._budgets = {}
            for event in self.store.events():
                if event.kind.startswith("budget.") and "budget" in event.data:
                    self._budgets[str(event.data["budget"])] = event.kind.removeprefix("budget.")
        return self._budgets

    def forget(self, live: set[str]) -> None:
        """The decisions recorded of jobs no longer live are forgotten: memory does not grow
        with history."""
        self._decided = {k: d for k, d in self._decided.items() if k in live}

    def apply(
        self,
        step: Step,
        now: float,
        clients: Mapping[str, PoolClient],
        rules: Rules,
        estimator: Estimator | None,
    ) -> list[str]:
        """Carry out ``step`` through this cycle's ``clients``; ``rules``: the rules it was
        decided by (whose hash its decisions record); ``estimator``: what learns from the
        runs that ended well. What went wrong, each logged."""
        errors: list[str] = []
        self.writes.attempts(step.attempts, now)
        for replacement in step.replacements:
            error = self._replace(replacement, now)
            if error:
                errors.append(error)
        self.writes.transitions(step.transitions, now)
        for service in step.services:
            self._service(service, now)
        for loan in step.loans:
            self._loan(loan, now)
        for stop in step.stops:
            if now - self._stopped.get(stop.submission_id, -STOP_RESEND_S) < STOP_RESEND_S:
                continue  # asked already; Ray is stopping it
            self._stopped[stop.submission_id] = now
            try:
                if clients[stop.pool].stop(stop.submission_id):
                    self._event(now, "job.stop", stop.job_id, f"stopping it ({stop.reason})")
            except Exception as err:  # an adapter error is reported, the loop goes on
                errors.append(f"stop {stop.submission_id}: {err}")
        for node_change in step.nodes:
            self.recorder.node_health(node_change, now)
        for request in step.checkpoints:
            error = self._ask_to_checkpoint(request, now)
            if error:
                errors.append(error)
        resubmitted = []
        for resubmit in step.resubmits:
            try:
                outcome = self._submit(clients, resubmit.pool, resubmit.job_id, resubmit.submission)
            except Exception as err:
                errors.append(self._submit_failed(resubmit.job_id, resubmit.attempt_id, err, now))
                continue
            self._event(now, "job.submit", resubmit.job_id, f"{outcome} on {resubmit.pool}")
            resubmitted.append(AttemptChange(resubmit.attempt_id, None, outcome))
        self.writes.attempts(resubmitted, now)  # their reasons: what became of them, as below
        errors += self._dispatch(step.dispatches, now, clients)
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
        self._decisions(step, now, rules)
        for failed in step.rule_errors:
            self.recorder.rule_error(failed, now)
        for crossed in step.budgets:
            self._budget(crossed, now)
        if estimator is not None:
            estimator.observe_all(step.successes)
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

    def _dispatch(
        self, dispatches: Sequence[Dispatch], now: float, clients: Mapping[str, PoolClient]
    ) -> list[str]:
        """The attempts recorded (one transaction) and their jobs admitted (one more), then
        each submitted, then the submitted ones marked pending and dispatched (one more): a
        cycle placing thousands commits three times, and nothing reaches Ray unrecorded."""
        if not dispatches:
            return []
        made = self.store.write_all([Write(d.attempt) for d in dispatches])
        self.history.wrote(made)
        recorded = [d for d, done in zip(dispatches, made, strict=True) if not lost(done)]
        # an attempt found recorded already: the next cycle adopts or resubmits it
        admitted = self.writes.transitions(
            [Transition(d.job_id, JobState.ADMITTED, d.reason, d.attempt.pool) for d in recorded],
            now,
        )
        going = [d for d, ok in zip(recorded, admitted, strict=True) if ok]
        # cancelled meanwhile: these attempts will never be submitted
        gone = {d.attempt.id for d in going}
        abandoned = AttemptState.ABANDONED
        self.writes.attempts([AttemptChange(d.attempt.id, abandoned, "not admitted")
                        for d in recorded if d.attempt.id not in gone], now)  # fmt: skip
        errors, submitted = [], []
        for dispatch in going:
            attempt = dispatch.attempt
            failpoint("before-submit")
            try:
                outcome = self._submit(clients, attempt.pool, dispatch.job_id, dispatch.submission)
            except Exception as err:
                errors.append(self._submit_failed(dispatch.job_id, attempt.id, err, now))
                continue
            failpoint("after-submit")
            submitted.append((dispatch, outcome))
        # its reason now what became of it (not what a refusal or a wait for its pool said)
        self.writes.attempts(
            [AttemptChange(d.attempt.id, "pending", outcome) for d, outcome in submitted], now
        )
        done = "{} to pool {} as {}"
        self.writes.transitions(
            [Transition(d.job_id, JobState.DISPATCHED,
                        done.format(outcome, d.attempt.pool, d.attempt.submission_id))
             for d, outcome in submitted],
            now,
        )  # fmt: skip
        return errors

    def _submit(
        self, clients: Mapping[str, PoolClient], pool: str, job_id: str, submission: Submission
    ) -> str:
        """Send a submission to its pool, its working directory a folder on this host."""
        if self.packages is not None:
            submission = self.packages.here(job_id, submission)
        outcome = clients[pool].submit(submission)
        self.refusing.pop(pool, None)  # it takes submissions again
        return outcome

    def _submit_failed(self, job_id: str, attempt_id: str, err: Exception, now: float) -> str:
        """Count a refused submission; retried next cycle, until MAX_SUBMIT_ERRORS fail it.
        A pool that cannot take it now (``PoolUnavailable``: no answer, a server error) is
        not the job's fault: it waits, the reason on its attempt, and is sent again."""
        attempt = self.store.get(AttemptRecord, attempt_id)
        message = f"submit {attempt_id}: {err}"
        if attempt is None:
            return message
        if isinstance(err, PoolUnavailable):
            self.refusing[attempt.pool] = in_words(err)  # until it takes one again
            waiting = f"waiting for its pool: {in_words(err, 280)}"
            if attempt.reason != waiting:
                with contextlib.suppress(ConflictError, NotFoundError):
                    self.store.update(
                        replace(attempt, reason=waiting), expected_version=attempt.version
                    )
            return message
        count = attempt.detail.submit_errors + 1
        detail = replace(attempt.detail, submit_errors=count)
        failed = count >= MAX_SUBMIT_ERRORS
        changed = replace(attempt, detail=detail, reason=in_words(err))
        if failed:
            changed = replace(changed, state=AttemptState.FAILED, ended_at_s=now)
        with contextlib.suppress(ConflictError, NotFoundError):
            self.store.update(changed, expected_version=attempt.version)
        if failed:
            why = f"its pool refused it {count} times: {in_words(err, 200)}"
            self.writes.transition(Transition(job_id, JobState.FAILED, why), now)
        return message

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
        from meshctl.workload.train.nominations import (
            nominate,  # pyarrow: only when a node is replaced
        )

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
            from meshctl.workload.train.nominations import (
                nominate,  # pyarrow: only when one needs it
            )

            try:
                nominate(detail.checkpoint_uri, detail.checkpoint_endpoint or None,
                         attempt.number, detail.ray_node_ids)  # fmt: skip
            except Exception as err:  # storage unreachable: said, and the run's wait decides
                errors.append(f"nominate {attempt.job_id} attempt {attempt.number}: {err}")
        return errors

    def _decisions(self, step: Step, now: float, rules: Rules) -> None:
        """Record the decisions that changed, in one transaction (a cycle over thousands of
        new jobs writes once, not once a job)."""
        policy_hash = rules.policies.content_hash if rules.policies else ""
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
        self.budget_states()[crossed.budget] = crossed.state
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
