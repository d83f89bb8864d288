"""One scheduling cycle, its steps in their order, written once. Pure.

The controller and the simulator each keep a world of their own: the controller what it
observed of its pools, its store and the clouds (``meshctl.controller.deciding``); the
simulator an event heap and models of nodes, clouds and jobs (``meshctl.sim.core``). Both
decide through ``cycle``: it asks its ``Side`` for what it needs, decides with the lifecycle
and the scheduler, and hands back what the decisions do, one at a time ("snapshot in, plan
out"). Each side is an adapter of its own world to this protocol, so the order below holds
for both, and the differential check compares two adapters of one cycle.

1. ``observe``: the side brings its jobs in line with what happened since its last cycle
   (jobs that ended, nodes lost under running jobs, runtimes learnt);
2. limits: a job that has never started fails once its deadline has come; a running job
   fails, and stops, once past its maximum runtime (``effects``);
3. hold: a held mesh starts nothing and preempts nothing (the running jobs may end): the
   cycle skips to 11;
4. ``scale_services``: each service's replica count from its traffic;
5. loans: those whose lender or borrower is no longer active close, before the snapshot, so
   that their lenders grow back in this cycle (``lending``);
6. ``seen``: the scheduler's snapshot and what the policies see (capacity, the wait forecast
   per priority, this month's spend, the victims), bound per priority (``view``);
7. budgets: where each budget stands, and the thresholds crossed since the last cycle;
8. the scheduler's plan;
9. effects: the plan's actions as the lifecycle carries them out (grace, checkpoint or not,
   loans opened), handed to the side one by one;
10. ``decided``: the plan's decisions, for the side to record;
11. ``idle``: idle cloud instances go.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from meshctl.lifecycle import effects, lending
from meshctl.lifecycle.actions import BudgetCrossed, Fail, Launch, Leave, Start
from meshctl.lifecycle.view import MeshView, Victims, budget_crossings, budgets, policy_view
from meshctl.model.job import Job
from meshctl.policy.compiled import PolicySet
from meshctl.policy.evaluate import KeptAnswers
from meshctl.policy.tenancy import BudgetStanding
from meshctl.scheduler import PolicyView, SchedulerConfig, Snapshot, schedule
from meshctl.scheduler.layout import Layout
from meshctl.scheduler.plan import Plan
from meshctl.scheduler.usage import RunningUsage


@dataclass(frozen=True, slots=True)
class Deadline:
    """A job that has never started, and when it must have (None: no deadline); ``said``: the
    deadline as its job file wrote it, for the reason."""

    job_id: str
    at_s: float | None
    said: str = ""


@dataclass(frozen=True, slots=True)
class Runtime:
    """A running job not on its way out: when its attempt began and its maximum runtime."""

    job_id: str
    began_s: float | None
    limit_s: float | None


@dataclass(frozen=True, slots=True)
class Seen:
    """What a side's world looks like to the scheduler and to the policies this cycle."""

    snapshot: Snapshot
    mesh: MeshView
    date: dt.datetime  # the cycle's time as a date: the policies' calendar
    jobs: Mapping[str, Job]  # the job file of each job the policies may ask about
    priority: Callable[[str], int]
    victims: Victims
    budget_states: Mapping[str, str]  # each budget's state after the last cycle
    leaving: frozenset[str] = frozenset()  # jobs already on their way out: no victims again
    grow_grace_s: Mapping[str, float] = field(default_factory=dict)  # per pool
    layout: Layout | None = None  # the scheduler's, kept from the side's last cycle
    usage: RunningUsage | None = None  # the same: the running jobs' use per team
    answers: KeptAnswers | None = None  # the same: the policies' answers (evaluate.py)


class Side(Protocol):
    """One world that decides through the cycle: the controller's or the simulator's."""

    @property
    def now_s(self) -> float: ...

    def observe(self) -> None: ...

    def deadlines(self) -> Iterable[Deadline]: ...

    def runtimes(self) -> Iterable[Runtime]: ...

    def fail(self, failed: Fail, running: bool) -> None:
        """A job fails by a limit: waiting (its deadline) or ``running`` (its maximum
        runtime: it stops now)."""

    def held(self) -> str | None:
        """Why nothing new starts this cycle (None: it may)."""

    def hold(self, why: str) -> None: ...

    def scale_services(self) -> set[str]:
        """Scale each service to its traffic; the ids of the replicas running or wanted."""

    def loans(self) -> tuple[Sequence[lending.Loan], set[str]]:
        """The loans, and the jobs active (running, leaving or waiting; replicas aside)."""

    def close(self, closed: Sequence[lending.Loan]) -> None: ...

    def seen(self) -> Seen: ...

    def budgets(
        self, standings: Sequence[BudgetStanding], crossed: list[BudgetCrossed]
    ) -> None: ...

    def carry_out(self, action: Start | Leave | Launch) -> None: ...

    def decided(self, plan: Plan, policies: PolicyView, mesh: MeshView) -> None: ...

    def idle(self) -> None: ...


def cycle(side: Side, policies: PolicySet | None, config: SchedulerConfig) -> Plan | None:
    """One cycle of ``side``'s world; its plan (None: the mesh is held)."""
    side.observe()
    now = side.now_s
    for running in side.runtimes():
        over = effects.overran(running.job_id, running.began_s, running.limit_s, now)
        if over is not None:
            side.fail(over, running=True)
    for waiting in side.deadlines():
        failed = effects.past_deadline(waiting.job_id, waiting.at_s, now, waiting.said)
        if failed is not None:
            side.fail(failed, running=False)
    plan = None
    held = side.held()
    if held is not None:
        side.hold(held)
    else:
        replicas = side.scale_services()
        loans, active = side.loans()
        closed = lending.closing(loans, active | replicas, now)
        if closed:
            side.close(closed)
        seen = side.seen()
        view = policy_view(policies, seen.mesh, seen.date, seen.jobs, seen.priority, seen.victims,
                           seen.answers)  # fmt: skip
        standings = budgets(policies, seen.mesh)
        side.budgets(standings, budget_crossings(seen.budget_states, standings))
        plan = schedule(seen.snapshot, view, config, seen.layout, seen.usage)
        for action in effects.of_plan(plan, seen.leaving, seen.grow_grace_s):
            side.carry_out(action)
        side.decided(plan, view, seen.mesh)
    side.idle()
    return plan
