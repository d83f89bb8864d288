"""Preemption, bursting, quotas and backfill, with verdicts from the real policy engine."""

from __future__ import annotations

import pytest
from policy_helpers import job, pending_of, view
from sched_helpers import node, pending, running, snapshot

from meshctl.model.policy import TeamQuota
from meshctl.scheduler import Offer, Permissive, PoolInfo, Preempt, Provision, schedule

pytestmark = pytest.mark.unit

PRIORITY = """\
priority_classes: [{name: serve, value: 100}, {name: low, value: 1}]
default_priority_class: {inference: serve, batch: low}
preemption:
  - {name: serve-first, when: 'job.kind == "inference"', victims: 'victim.kind == "batch"',
     grace_s: 60}
"""


def test_inference_preempts_the_batch_job_that_loses_least_work():
    # n is full: b-old last checkpointed at 0 (loses 1000 s x 4 GPUs), b-new at 900 (100 s x 4)
    old = running("b-old", "n", [0, 1, 2, 3], priority=1, checkpoint=0.0)
    new = running("b-new", "n", [4, 5, 6, 7], priority=1, checkpoint=900.0)
    serve = job("serve", kind="inference", resources={"gpus": 4})
    engine = view(PRIORITY, [serve], victims=[(old, job("b-old")), (new, job("b-new"))])
    plan = schedule(snapshot([node("n")], [pending_of(serve, engine)], [old, new]), engine)
    assert plan.actions == [Preempt("b-new", "serve", 60.0, "serve-first")]
    decision = plan.decisions["serve"]
    assert (decision.status, decision.reason) == (
        "preempting",
        "preempting b-new (grace 60 s) on n",
    )


def test_a_job_never_preempts_equal_or_higher_priority():
    other = running("other", "n", list(range(8)), priority=100)
    serve = job("serve", kind="inference", resources={"gpus": 4})
    engine = view(PRIORITY, [serve], victims=[(other, job("other", kind="batch"))])
    plan = schedule(snapshot([node("n")], [pending_of(serve, engine)], [other]), engine)
    assert plan.actions == []
    assert plan.decisions["serve"].status == "pending"


def test_batch_jobs_may_not_preempt_at_all():
    victim = running("v", "n", list(range(8)), priority=0)
    batch = job("b", resources={"gpus": 1})
    engine = view(PRIORITY, [batch], victims=[(victim, job("v"))])
    plan = schedule(snapshot([node("n")], [pending_of(batch, engine)], [victim]), engine)
    assert plan.actions == []


BURST = """\
burst:
  - name: spill
    when: 'job.criticality == "best-effort" && mesh.pools["onprem"].expected_wait_s > 600.0'
    to: pool.cloud
    spot: true
    max_usd_per_hour: 12
"""


def offer(name: str, gpus: int, usd: float, spot: float | None) -> Offer:
    return Offer("aws", name, gpus, 24, "L4", "nvidia", 4 * gpus, 16 * gpus, 25, usd, spot, True, 4)


OFFERS = (offer("g6.xlarge", 1, 0.80, 0.35), offer("g6.48xlarge", 8, 13.35, 6.0))


@pytest.mark.parametrize(
    ("gpus", "expected"),
    [
        pytest.param(
            1, Provision("bj", "aws", "g6.xlarge", 1, True, 0.35), id="cheapest-spot-that-fits"
        ),
        pytest.param(
            8, Provision("bj", "aws", "g6.48xlarge", 1, True, 6.0), id="only-the-big-type-fits"
        ),
    ],
)
def test_burst_launches_the_cheapest_fitting_node_type(gpus, expected):
    be = job("bj", criticality="best-effort", resources={"gpus": gpus, "memory_gib": 8})
    engine = view(BURST, [be], waits={"onprem": 1200.0})
    busy = running("x", "n", list(range(8)))
    snap = snapshot(
        [node("n")],
        [pending_of(be, engine)],
        [busy],
        pools=(PoolInfo("onprem", False, 1200.0), PoolInfo("aws", True)),
        offers=OFFERS,
    )
    assert schedule(snap, engine).actions == [expected]


def test_no_burst_while_on_prem_wait_is_short():
    be = job("bj", criticality="best-effort", resources={"gpus": 1})
    engine = view(BURST, [be], waits={"onprem": 60.0})
    snap = snapshot(
        [node("n")], [pending_of(be, engine)], [running("x", "n", list(range(8)))], offers=OFFERS
    )
    decision = schedule(snap, engine).decisions["bj"]
    assert decision.status == "pending"
    assert "burst not allowed: no burst rule applies to this job now" in decision.summary()


def test_burst_respects_the_price_limit():
    # 2 nodes x 8 GPUs of g6.48xlarge at 6.0 spot = 12.0 USD/h, within 12; the job allows 10
    be = job(
        "bj",
        criticality="best-effort",
        resources={"gpus": 8, "nodes": 2},
        limits={"max_usd_per_hour": 10},
    )
    engine = view(BURST, [be], waits={"onprem": 1200.0})
    snap = snapshot(
        [node("n")], [pending_of(be, engine)], [running("x", "n", list(range(8)))], offers=OFFERS
    )
    decision = schedule(snap, engine).decisions["bj"]
    assert decision.status == "pending"
    assert "g6.48xlarge: 12 USD/h over the 10 limit" in decision.summary()


@pytest.mark.parametrize(
    ("used", "gpus", "status"),
    [
        pytest.param(2, 2, "placed", id="within-quota"),  # 2 + 2 <= 4
        pytest.param(2, 4, "placed", id="borrows-2-of-2-lendable"),  # 6 <= 4 + min(2, 4 idle)
        pytest.param(2, 5, "pending", id="over-the-borrowing-limit"),  # 7 > 4 + 2
    ],
)
def test_quotas_with_borrowing(used, gpus, status):
    quotas = {
        "a": TeamQuota(team="a", cohort="c", gpus=4, borrowing_limit_gpus=2),
        "b": TeamQuota(team="b", cohort="c", gpus=4),
    }
    run = [running("held", "n1", list(range(used)), team="a")]
    plan = schedule(
        snapshot([node("n1"), node("n2")], [pending("j", gpus, team="a")], run),
        Permissive(quotas=quotas),
    )
    assert plan.decisions["j"].status == status


def test_backfill_uses_a_reserved_node_only_for_jobs_that_end_in_time():
    # n has 7 GPUs busy until t=1100 and 1 free; head needs 8 -> n is reserved from +100 s
    busy = running("busy", "n", list(range(7)), end=1100.0)
    jobs = [
        pending("head", 8, priority=10),
        pending("long", 1, at=1, runtime=500.0),  # would end at 1500: delays head
        pending("short", 1, at=2, runtime=50.0),
    ]  # ends at 1050: fine
    plan = schedule(snapshot([node("n")], jobs, [busy], now=1000.0), Permissive())
    assert [a.job_id for a in plan.placed()] == ["short"]
    assert "reserved 1 node(s) from +100 s" in plan.decisions["head"].summary()
    assert plan.decisions["long"].reason == "nodes it fits are held for head"


def test_burst_stays_within_what_the_budget_allows_per_hour():
    # the pool's budgets allow 0.5 USD/h for the rest of the month: g6.xlarge spot at 0.35 fits
    # a 1-GPU job; the 8-GPU job's only fitting type costs 6.0 and is refused
    small = job("small", criticality="best-effort", resources={"gpus": 1})
    big = job("big", criticality="best-effort", resources={"gpus": 8})
    engine = view(BURST, [small, big], waits={"onprem": 1200.0})
    snap = snapshot(
        [node("n")],
        [pending_of(small, engine), pending_of(big, engine, at=1.0)],
        [running("x", "n", list(range(8)))],
        pools=(PoolInfo("onprem", False, 1200.0), PoolInfo("aws", True, 0.0, 0.5)),
        offers=OFFERS,
    )
    plan = schedule(snap, engine)
    assert [a.job_id for a in plan.actions] == ["small"]
    assert "over the pool's remaining budget" in plan.decisions["big"].summary()


@pytest.mark.parametrize(
    ("now", "hours"),
    [
        pytest.param("2026-01-31T00:00:00+00:00", 24.0, id="last-day"),
        pytest.param("2026-12-31T12:00:00+00:00", 12.0, id="year-end"),
    ],
)
def test_hours_left_in_month(now, hours):
    import datetime as dt

    from meshctl.policy.tenancy import hours_left_in_month

    assert hours_left_in_month(dt.datetime.fromisoformat(now)) == hours


def test_a_job_bigger_than_its_team_could_ever_hold_is_unschedulable():
    # a: quota 4, borrowing limit 2 -> at most 6 GPUs, however idle the cohort
    quotas = {
        "a": TeamQuota(team="a", cohort="c", gpus=4, borrowing_limit_gpus=2),
        "b": TeamQuota(team="b", cohort="c", gpus=4),
    }
    plan = schedule(
        snapshot([node("n1"), node("n2")], [pending("j", 8, team="a")]), Permissive(quotas=quotas)
    )
    decision = plan.decisions["j"]
    assert (decision.status, decision.reason) == (
        "unschedulable",
        "needs 8 GPUs; team a's quota allows at most 6, borrowing included",
    )


CLASSES = "priority_classes: [{name: low, value: 1}]\ndefault_priority_class: {batch: low}\n"
BLOCKERS = [
    # (name, policies, the job's spec, GPUs already held by team a, status, blocked by)
    ("GPUs busy: it waits for them, a wait is forecast", CLASSES, {"resources": {"gpus": 8}},
     4, "pending", None),
    ("its team's quota now", CLASSES, {"resources": {"gpus": 4}, "team": "a"},
     4, "pending", "quota"),
    ("more than its team's quota allows at all", CLASSES,
     {"resources": {"gpus": 8}, "team": "a"}, 0, "unschedulable", "quota"),
    ("a class the policies do not define", CLASSES, {"priority_class": "urgent"},
     0, "unschedulable", "policy"),
    ("every pool denied by the policies",
     CLASSES + "pools: [{name: none, deny: 'true'}]\n", {}, 0, "unschedulable", "policy"),
    ("bigger than any node", CLASSES, {"resources": {"gpus": 64}}, 0, "unschedulable", "size"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("spec", "job_spec", "held", "status", "blocker"),
    [b[1:] for b in BLOCKERS],
    ids=[b[0] for b in BLOCKERS],
)
def test_what_keeps_a_job_from_running_besides_busy_gpus(
    spec: str, job_spec: dict[str, object], held: int, status: str, blocker: str | None
) -> None:
    """A job its quota, the policies or its size keep from running says which (no wait is
    forecast for it: issue 45); one that waits for busy GPUs says none."""
    quotas = "quotas: [{team: a, gpus: 4}]\n"
    waiting = job("j", **({"resources": {"gpus": 1}} | job_spec))  # type: ignore[arg-type]
    engine = view(spec + quotas, [waiting])
    run = [running("busy", "n", list(range(held)), team="a")] if held else []
    plan = schedule(snapshot([node("n")], [pending_of(waiting, engine)], run), engine)
    decision = plan.decisions["j"]
    assert (decision.status, decision.blocked_by) == (status, blocker), decision.summary()


@pytest.mark.parametrize(
    ("blockers", "expected"),
    [
        (("quota", "quota"), "quota"),
        (("policy", "policy"), "policy"),
        (("size", "size"), "size"),
        (("quota", "size"), "size"),
        ((None, None), "size"),
    ],
    ids=["every option over the quota", "every option kept out by the policies",
         "every option too big", "options blocked for different reasons: its size",
         "none says: its size"],
)  # fmt: skip
def test_a_fungible_request_none_of_whose_options_fits_says_what_blocks_them(
    blockers: tuple[str | None, str | None], expected: str
) -> None:
    from dataclasses import replace

    from sched_helpers import req

    from meshctl.scheduler.options import decide_any
    from meshctl.scheduler.plan import Decision

    options = (req(8, models=["H100"]), req(12, models=["MI300X"]))
    fungible = pending("f", request=replace(options[0], options=options))
    said = iter(blockers)

    def decide_one(variant: object, stage: str) -> Decision:
        return Decision("f", "unschedulable", "no", blocked_by=next(said))  # type: ignore[arg-type]

    decision = decide_any(fungible, decide_one)  # type: ignore[arg-type]
    assert (decision.status, decision.blocked_by) == ("unschedulable", expected)
