"""The lifecycle's rules, each against named cases: what a plan and the world's events do to
jobs, runtime estimates, idle teardown, and the monthly ledger at the price paid."""

from __future__ import annotations

import datetime as dt

import pytest

from meshctl.lifecycle import Charge, Estimator, Fail, Ledger, Left, Requeue, effects
from meshctl.lifecycle.snapshot import price_paid
from meshctl.lifecycle.teardown import CloudNode, idle
from meshctl.scheduler import Offer, Plan, Preempt

pytestmark = pytest.mark.unit

NOW = 10_000.0


@pytest.mark.parametrize(
    ("grace_s", "stop_at", "checkpoint"),
    [(30.0, NOW + 30, True), (0.0, NOW, False)],
    ids=["a grace: asked to checkpoint, stopped after it", "no grace: stopped, not asked"],
)
def test_a_preemption_gives_its_grace(grace_s: float, stop_at: float, checkpoint: bool) -> None:
    plan = Plan(NOW, [Preempt("v", "p", grace_s, "rule")])
    [leave] = effects.of_plan(plan)
    assert (leave.left, leave.stop_at_s, leave.checkpoint, leave.for_job) == (
        Left.PREEMPTED,
        stop_at,
        checkpoint,
        "p",
    )


@pytest.mark.parametrize(
    ("taken_in_s", "stop_in_s"),
    [(120.0, 120.0 - effects.STOP_MARGIN_S), (5.0, 0.0)],
    ids=["EC2's two minutes: stopped 15 s before", "shorter than the margin: stopped now"],
)
def test_a_spot_notice_stops_the_job_before_the_instance_goes(taken_in_s, stop_in_s) -> None:
    leave = effects.noticed("j", "n", NOW + taken_in_s, NOW)
    assert (leave.stop_at_s, leave.checkpoint) == (NOW + stop_in_s, True)


REQUEUES = [
    # (name, how it left, failures before, max_restarts, outcome, failures after)
    ("a preemption never counts", Left.PREEMPTED, 3, 3, Requeue, 3),
    ("an eviction counts", Left.EVICTED, 0, 3, Requeue, 1),
    ("up to max_restarts failures: requeued", Left.EVICTED, 2, 3, Requeue, 3),
    ("one more: failed", Left.EVICTED, 3, 3, Fail, 4),
    ("max_restarts 0: the first failure fails it", Left.EVICTED, 0, 0, Fail, 1),
]


@pytest.mark.parametrize(
    ("left", "before", "limit", "kind", "after"),
    [c[1:] for c in REQUEUES],
    ids=[c[0] for c in REQUEUES],
)
def test_requeue_or_fail_by_failures_against_max_restarts(left, before, limit, kind, after):
    outcome, failures = effects.requeue_or_fail("j", left, "why", before, limit)
    assert isinstance(outcome, kind)
    assert failures == after


def test_a_deadline_fails_a_job_that_has_not_started_and_a_limit_one_that_runs_past() -> None:
    assert effects.past_deadline("j", NOW + 1, NOW) is None
    assert effects.past_deadline("j", NOW, NOW) == Fail(
        "j", "did not start before its deadline", "deadline"
    )
    assert effects.overran("j", NOW - 100, 100.0, NOW) == Fail(
        "j", "ran past its max_runtime_s of 100 s", "max_runtime", stop=True
    )
    assert effects.overran("j", NOW - 99, 100.0, NOW) is None


def test_estimates_are_what_is_declared_else_the_mean_of_the_last_two_runs() -> None:
    estimator = Estimator()
    assert estimator.estimate("t", "etl") is None
    estimator.observe_all([("t", "etl", 100.0), ("t", "etl", 300.0), ("t", "etl", 500.0)])
    found = estimator.estimate("t", "etl")
    assert found is not None
    assert found.seconds == 400.0
    assert found.source == "mean of team t's last 2 runs of 'etl'"
    assert estimator.estimate("other", "etl") is None  # another team's job is another job
    declared = estimator.estimate("t", "etl", declared_s=60.0)
    assert declared is not None
    assert (declared.seconds, declared.declared) == (60.0, True)
    later = estimator.plus([("t", "etl", 700.0)])
    assert later.seconds("t", "etl") == 600.0
    assert estimator.seconds("t", "etl") == 400.0


IDLE = [
    # (name, instances (id, idle since or None: busy), teardowns, in order)
    ("a busy pool keeps everything", [("head", None), ("w1", None)], []),
    ("an idle worker goes, the busy head stays", [("head", None), ("w1", 0.0)], ["w1"]),
    ("an idle head stays while a worker is busy", [("head", 0.0), ("w1", None)], []),
    (
        "all idle: workers first, the head last",
        [("head", 0.0), ("w1", 0.0), ("w2", 0.0)],
        ["w2", "w1", "head"],
    ),
    ("idle, but not for long enough", [("head", NOW - 30)], []),
]


@pytest.mark.parametrize(("instances", "going"), [c[1:] for c in IDLE], ids=[c[0] for c in IDLE])
def test_idle_instances_go_after_the_pools_idle_time(instances, going) -> None:
    nodes = [CloudNode("aws", i, since) for i, since in instances]
    assert [t.instance_id for t in idle(nodes, 60.0, NOW)] == going


def test_the_ledger_books_this_month_at_the_price_paid() -> None:
    offer = Offer("aws", "g", 1, 24, "L4", "nvidia", 4, 16, 10, 0.8 * 0.5, 0.3, True, 4)
    assert price_paid(offer, spot=False) == 0.4  # the discounted on-demand price
    assert price_paid(offer, spot=True) == 0.3
    start = dt.datetime(2027, 2, 1, tzinfo=dt.UTC).timestamp()
    ledger = Ledger()
    ledger.close(Charge("aws", "a", 1.0, start - 3600, start + 3600))  # half of it in February
    ledger.close(Charge("aws", "b", 1.0, start - 7200, start - 3600))  # all of it in January
    live = [Charge("aws", "b", 2.0, start, None)]
    spent = ledger.this_month(start + 1800, live)
    assert spent.by_pool == {"aws": pytest.approx(1.0 + 1.0)}  # 1 h booked, 0.5 h x 2 USD
    assert spent.by_team == {"a": pytest.approx(1.0), "b": pytest.approx(1.0)}
    assert ledger.total_usd["aws"] == pytest.approx(3.0)
