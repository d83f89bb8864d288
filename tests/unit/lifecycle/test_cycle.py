"""The one cycle (``meshctl.lifecycle.cycle``) driven through a recording side: its steps in
their order, what it decides of limits and loans, and a held mesh. The controller's and the
simulator's sides are held to the same cycle by the differential check
(``test_differential.py``)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from meshctl.lifecycle.actions import BudgetCrossed, Fail, Launch, Leave, Start
from meshctl.lifecycle.cycle import Deadline, Runtime, Seen, Side, cycle
from meshctl.lifecycle.lending import Loan
from meshctl.lifecycle.view import MeshView, Victims
from meshctl.lifecycle.waits import Waits
from meshctl.policy.facts import MeshSnapshot
from meshctl.policy.tenancy import BudgetStanding
from meshctl.scheduler import PolicyView, SchedulerConfig
from meshctl.scheduler.plan import Plan
from tests.unit.scheduler.sched_helpers import node, pending, snapshot

pytestmark = pytest.mark.unit

NOW = 1000.0


@dataclass
class Recording:
    """A side whose world is given: it records what the cycle asks and hands back."""

    waiting: list[Deadline] = field(default_factory=list)
    running: list[Runtime] = field(default_factory=list)
    given_loans: list[Loan] = field(default_factory=list)
    active: set[str] = field(default_factory=set)
    replicas: set[str] = field(default_factory=set)
    held_for: str | None = None
    calls: list[tuple[Any, ...]] = field(default_factory=list)

    @property
    def now_s(self) -> float:
        return NOW

    def observe(self) -> None:
        self.calls.append(("observe",))

    def deadlines(self) -> Iterable[Deadline]:
        self.calls.append(("deadlines",))
        return self.waiting

    def runtimes(self) -> Iterable[Runtime]:
        self.calls.append(("runtimes",))
        return self.running

    def fail(self, failed: Fail, running: bool) -> None:
        self.calls.append(("fail", failed.job_id, running))
        self.active.discard(failed.job_id)

    def held(self) -> str | None:
        self.calls.append(("held",))
        return self.held_for

    def hold(self, why: str) -> None:
        self.calls.append(("hold", why))

    def scale_services(self) -> set[str]:
        self.calls.append(("scale_services",))
        return self.replicas

    def loans(self) -> tuple[Sequence[Loan], set[str]]:
        self.calls.append(("loans",))
        return self.given_loans, set(self.active)

    def close(self, closed: Sequence[Loan]) -> None:
        self.calls.append(("close", tuple(x.id for x in closed)))

    def seen(self) -> Seen:
        self.calls.append(("seen",))
        nodes = [node("n1", gpus=2)]
        waiting = [pending("p", 1, at=NOW - 10)]
        mesh = MeshView(MeshSnapshot(()), {}, Waits(), len(waiting), {}, {})
        return Seen(
            snapshot(nodes, waiting, now=NOW),
            mesh,
            dt.datetime.fromtimestamp(NOW, dt.UTC),
            {},
            lambda _: 0,
            Victims({}, {}, NOW),
            {},
        )

    def budgets(self, standings: Sequence[BudgetStanding], crossed: list[BudgetCrossed]) -> None:
        self.calls.append(("budgets", len(standings), len(crossed)))

    def carry_out(self, action: Start | Leave | Launch) -> None:
        self.calls.append(("carry_out", type(action).__name__, action.job_id))

    def decided(self, plan: Plan, policies: PolicyView, mesh: MeshView) -> None:
        self.calls.append(("decided", tuple(sorted(plan.decisions))))

    def idle(self) -> None:
        self.calls.append(("idle",))


def _loan(lender: str, borrower: str) -> Loan:
    return Loan(f"{lender}:n1:0", lender, borrower, "onprem", "n1", 1.0, 0.0)


def test_a_cycle_takes_its_steps_in_their_order() -> None:
    side = Recording(
        running=[Runtime("long", NOW - 100, 60.0), Runtime("short", NOW - 10, 60.0)],
        waiting=[Deadline("late", NOW - 1, "yesterday"), Deadline("early", NOW + 50)],
        given_loans=[_loan("elastic", "long")],
        active={"elastic", "long", "short", "p"},
    )
    _: Side = side  # a Side, as mypy checks
    plan = cycle(side, None, SchedulerConfig())
    assert plan is not None
    assert set(plan.decisions) == {"p"}
    assert side.calls == [
        ("observe",),
        ("runtimes",),
        ("fail", "long", True),  # past its maximum runtime: fails, and stops
        ("deadlines",),
        ("fail", "late", False),  # its deadline came before it started
        ("held",),
        ("scale_services",),
        ("loans",),
        ("close", ("elastic:n1:0",)),  # its borrower failed this cycle: closed before the snapshot
        ("seen",),
        ("budgets", 0, 0),
        ("carry_out", "Start", "p"),
        ("decided", ("p",)),
        ("idle",),
    ]


def test_a_held_mesh_starts_nothing_but_limits_and_idle_teardown_still_apply() -> None:
    side = Recording(
        waiting=[Deadline("late", NOW - 1)],
        given_loans=[_loan("elastic", "gone")],
        active={"elastic"},
        held_for="held by the operator",
    )
    assert cycle(side, None, SchedulerConfig()) is None
    assert side.calls == [
        ("observe",),
        ("runtimes",),
        ("deadlines",),
        ("fail", "late", False),
        ("held",),
        ("hold", "held by the operator"),
        ("idle",),
    ]


# (lender, borrower, active jobs, active replicas): whether the loan closes this cycle
LOANS = {
    "both active: stays open": ("lender", "borrower", {"lender", "borrower"}, set(), False),
    "its borrower ended": ("lender", "borrower", {"lender"}, set(), True),
    "its lender ended": ("lender", "borrower", {"borrower"}, set(), True),
    "a replica borrows, still wanted": ("lender", "svc/r1", {"lender"}, {"svc/r1"}, False),
    "a replica borrows, scaled in": ("lender", "svc/r1", {"lender"}, set(), True),
}


@pytest.mark.parametrize(
    ("lender", "borrower", "active", "replicas", "closes"), LOANS.values(), ids=list(LOANS)
)
def test_a_loan_closes_once_its_lender_or_borrower_is_no_longer_active(
    lender: str, borrower: str, active: set[str], replicas: set[str], closes: bool
) -> None:
    loan = _loan(lender, borrower)
    side = Recording(given_loans=[loan], active=active, replicas=replicas)
    cycle(side, None, SchedulerConfig())
    closed = [c for c in side.calls if c[0] == "close"]
    assert closed == ([("close", (loan.id,))] if closes else [])
