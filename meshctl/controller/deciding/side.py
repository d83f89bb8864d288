"""The controller's side of the one cycle (``meshctl.lifecycle.cycle``): the world it observed
made into what the cycle reads, and what the cycle decides made into the step. Pure.

Observe: every job brought in line with what its pool reports (``states.py``: a Ray job that
started, finished, failed, was lost or must be stopped), then the jobs that must leave their
nodes (``leaving.py``: a drain's deadline passed, noticed spot instances, unhealthy or dead
nodes, hangs), the jobs replaced on new nodes seen there already. The snapshot
(``scheduling.py``): the jobs holding resources and waiting, the observed nodes, the cloud
offers less what runs, the pools' facts and what the policies see. The plan's actions
become the step's dispatches, stops, checkpoint requests, loans and launches; its decisions
the notes ``explain`` reads. Last, idle cloud instances go (``idle.py``).
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import replace

from meshctl.controller.deciding import services
from meshctl.controller.deciding.dispatch import dispatch, placement_nodes
from meshctl.controller.deciding.idle import idle_pools
from meshctl.controller.deciding.leaving import dead_nodes, hung, leave, reclaimed, unhealthy
from meshctl.controller.deciding.nodes import FINISHED_STATES
from meshctl.controller.deciding.nodes import nodes as observed_nodes
from meshctl.controller.deciding.observing import drain_deadlines, on_new_nodes, requeued
from meshctl.controller.deciding.scheduling import (
    Estimates,
    as_loan,
    forecasts,
    launch_request,
    leaving_now,
    loan_record,
    mesh_view,
    note,
    rule_errors,
    running_now,
    runtime_of,
    seconds,
    snapshot,
)
from meshctl.controller.deciding.states import reconcile
from meshctl.controller.deciding.step import AttemptChange, DecisionNote, Rules, Step, Transition
from meshctl.controller.deciding.world import JobView, World
from meshctl.lifecycle import Estimator, Fail, Launch, Leave, Start, lending
from meshctl.lifecycle.actions import BudgetCrossed
from meshctl.lifecycle.cycle import Deadline, Runtime, Seen
from meshctl.lifecycle.view import MeshView, Victims
from meshctl.policy.tenancy import BudgetStanding
from meshctl.scheduler import PolicyView, Running
from meshctl.scheduler.plan import Plan
from meshctl.scheduler.preempt import lost_work_s
from meshctl.state.records import JobState


class ControllerSide:
    """One cycle of the controller over ``world``, writing what it decides into ``step``."""

    def __init__(self, world: World, rules: Rules, step: Step) -> None:
        self.world, self.rules, self.step = world, rules, step
        self.holding: list[JobView] = []  # running, or leaving their nodes
        self.queued: list[JobView] = []
        self.serving: list[JobView] = []  # services
        self.estimator: Estimator = world.estimator
        self.units = services.Units()
        self.loaned: list[lending.Loan] = []
        self.closed: set[str] = set()  # loans closed this cycle
        # what the snapshot was built from, for what the plan does
        self.running: list[Running] = []
        self.estimates: Estimates = {}
        self.views: dict[str, JobView] = {}
        self.leaving: set[str] = set()
        self.lenders: dict[str, Running] = {}

    @property
    def now_s(self) -> float:
        return self.world.now_s

    # --- before the snapshot -----------------------------------------------------------------

    def observe(self) -> None:
        world, rules, step = self.world, self.rules, self.step
        for view in world.jobs:
            kept = reconcile(view, world, rules, step)
            if kept == "holding":
                self.holding.append(view)
            elif kept == "queued":
                self.queued.append(view)
            elif kept == "service":
                self.serving.append(view)
        self.queued += requeued(world, step)  # they wait from now on: this cycle decides them
        drain_deadlines(world, self.holding, step)
        reclaimed(world, rules, self.holding, step)
        unhealthy(world, rules, self.holding, step)
        hung(world, rules, self.holding, step)
        dead_nodes(world, rules, self.holding, step, self.serving)
        self.holding = on_new_nodes(self.holding, step)  # the cycle sees them on their new nodes
        self.estimator = world.estimator.plus(step.successes)  # what ended counts already

    def runtimes(self) -> list[Runtime]:
        moved = {t.job_id for t in self.step.transitions}
        return [
            Runtime(view.record.id, view.attempt.started_at_s, view.job.spec.limits.max_runtime_s)
            for view in self.holding
            if view.record.state is JobState.RUNNING
            and view.attempt is not None
            and view.record.id not in moved
        ]

    def deadlines(self) -> Iterator[Deadline]:
        """The jobs that have never started (one that has met its deadline, whatever happens
        to it later)."""
        for view in list(self.queued):
            deadline = view.job.spec.limits.deadline if view.attempt is None else None
            if deadline is not None:
                said = deadline.astimezone(dt.UTC).isoformat()
                yield Deadline(view.record.id, deadline.timestamp(), said)

    def fail(self, failed: Fail, running: bool) -> None:
        """A job fails by a limit; a running one's Ray job is stopped from the next cycle on,
        like any finished job's that still runs."""
        self.step.transitions.append(Transition(failed.job_id, JobState.FAILED, failed.reason))
        if running:
            attempt = next(v.attempt for v in self.holding if v.record.id == failed.job_id)
            assert attempt is not None
            self.step.attempts.append(AttemptChange(attempt.id, None, stop_at_s=self.now_s))
        else:
            self.queued = [v for v in self.queued if v.record.id != failed.job_id]

    def held(self) -> str | None:
        return self.world.hold

    def hold(self, why: str) -> None:
        """Nothing new starts, nothing is preempted for it: the running jobs may end."""
        held = {"status": "held", "reason": why}
        self.step.decisions += [DecisionNote(v.record.id, "held", why, held) for v in self.queued]

    def scale_services(self) -> set[str]:
        world = self.world
        self.loaned = [as_loan(r) for r in world.loans]
        borrowers = {x.borrower for x in self.loaned}
        names = {
            pool: {n.ray_node_id: n.name for n in seen.nodes if n.alive}
            for pool, seen in world.pools.items()
        }
        taken: dict[str, set[str]] = defaultdict(set)  # nodes other jobs hold, per pool
        for view in self.holding:
            if view.attempt is not None:
                taken[view.attempt.pool].update(placement_nodes(view.attempt))
        alive = {
            pool: set(by_id.values())
            for pool, by_id in names.items()
            if world.pools[pool].reachable
        }
        self.units = services.units(
            self.serving, world.serve, borrowers, world.now_s, names, taken, alive
        )
        return self.units.active

    def loans(self) -> tuple[Sequence[lending.Loan], set[str]]:
        ended = {t.job_id for t in self.step.transitions if t.to in FINISHED_STATES}
        return self.loaned, {v.record.id for v in (*self.holding, *self.queued)} - ended

    def close(self, closed: Sequence[lending.Loan]) -> None:
        self.step.loans += [loan_record(x) for x in closed]
        self.closed = {x.id for x in closed}

    # --- the snapshot --------------------------------------------------------------------------

    def seen(self) -> Seen:
        world, rules = self.world, self.rules
        self.leaving = leaving_now(self.step)
        lent = lending.lent_nodes(x for x in self.loaned if x.id not in self.closed)
        self.running = [
            running_now(v, world, self.estimator, self.leaving, lent)
            for v in self.holding
            if v.attempt
        ]
        self.running += self.units.running
        self.lenders = {r.job_id: r for r in self.running}
        nodes = observed_nodes(world, rules.mesh, self.running, rules.catalogs, rules.registry)
        self.estimates = {v.record.id: runtime_of(v, self.estimator) for v in self.queued}
        mesh = mesh_view(world, rules, nodes, self.running, self.queued, self.estimates)
        found = snapshot(
            world, rules, self.holding, self.running, self.queued, self.estimates, mesh, nodes,
            lent, self.units.pending,
        )  # fmt: skip
        self.views = {v.record.id: v for v in (*self.holding, *self.queued)} | self.units.views
        views = self.views
        jobs = {job_id: v.job for job_id, v in views.items()}
        return Seen(
            found,
            mesh,
            dt.datetime.fromtimestamp(world.now_s, dt.UTC),
            jobs,
            lambda job_id: views[job_id].record.priority,
            Victims(self.lenders, jobs, world.now_s),
            world.budget_states,
            frozenset(self.leaving),
            rules.mesh.grow_graces(),
        )

    # --- what the plan does --------------------------------------------------------------------

    def budgets(self, standings: Sequence[BudgetStanding], crossed: list[BudgetCrossed]) -> None:
        self.step.standings = tuple(standings)
        self.step.budgets += crossed

    def carry_out(self, action: Start | Leave | Launch) -> None:
        """One of the plan's actions into the step (a service's replicas: into the
        service)."""
        if services.carry(action, self.units):
            return
        world, rules, step = self.world, self.rules, self.step
        view = self.views[action.job_id]
        if isinstance(action, Start):
            found = seconds(self.estimates[action.job_id])
            step.dispatches.append(dispatch(view, action, rules, world, found))
        elif isinstance(action, Leave):
            leave(view, rules, action, step)
            lender = self.lenders.get(action.job_id)
            if action.lent and lender is not None:
                lost = lost_work_s(lender, action.stop_at_s)
                for loan in lending.opened(action, lender, world.now_s, lost):
                    step.loans.append(loan_record(loan))
        else:
            number = (view.attempt.number if view.attempt else 0) + 1
            request_id = launch_request(world, action.job_id, number)
            step.launches.append(replace(action, request_id=request_id))

    def decided(self, plan: Plan, policies: PolicyView, mesh: MeshView) -> None:
        """The services' records and states; a note per waiting job with what ``explain``
        says of it besides the scheduler's reasons; the rules that failed for it."""
        step = self.step
        step.plan = plan
        services.settle(self.units, self.world.serve, step)
        said = forecasts(self.queued, self.estimates, mesh)
        decided = services.decisions(plan.decisions.values(), self.units)
        step.decisions += [note(d, said.get(d.job_id)) for d in decided]
        step.rule_errors += rule_errors(policies, self.queued)

    def idle(self) -> None:
        idle_pools(self.world, self.rules, [*self.holding, *self.serving], self.step)
