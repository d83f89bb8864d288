"""A pool the snapshot marks unavailable (no credentials, refused ones, not up) is never picked:
not for placement, bursting or preemption; and a job that waits for it says why."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from policy_helpers import NOW, job, pending_of, policies, view
from sched_helpers import node, pending, running, snapshot

from meshctl.policy import MeshSnapshot, PoolFacts, bind
from meshctl.scheduler import (
    FromPolicyEngine,
    Offer,
    Permissive,
    Place,
    PoolInfo,
    Preempt,
    Provision,
    schedule,
)

pytestmark = pytest.mark.unit

BURST = """\
burst:
  - name: spill
    when: 'job.criticality == "best-effort"'
    to: pool.cloud
    spot: true
"""
PREEMPT = """\
priority_classes: [{name: low, value: 0}, {name: high, value: 9}]
preemption:
  - {name: any, victims: 'true', grace_s: 30}
"""


def offer(pool: str, usd: float) -> Offer:
    return Offer(pool, "l4", 1, 24, "L4", "nvidia", 4, 16, 25, usd, usd / 2, True, 4)


def cloud(pool: str, why: str | None = None) -> PoolInfo:
    return PoolInfo(pool, True, unavailable=why)


def full_onprem_and_two_clouds(spill_down: str | None, aws_down: str | None) -> object:
    be = job("bj", criticality="best-effort", resources={"gpus": 1})
    facts = MeshSnapshot(
        (
            PoolFacts("onprem", "local", "", {}, ("H100",), 8, 1.0, free_gpus=0.0),
            PoolFacts("gcp-spill", "gcp", "us-central1", {}, ("L4",), 8, 1.0, free_gpus=8.0),
            PoolFacts("aws", "aws", "us-east-1", {}, ("L4",), 8, 1.0, free_gpus=8.0),
        )
    )
    engine = FromPolicyEngine(bind(policies(BURST), facts, NOW), {"bj": be}, {})
    snap = snapshot(
        [node("n")],
        [pending_of(be, engine)],
        [running("x", "n", list(range(8)))],
        pools=(PoolInfo("onprem", False), cloud("gcp-spill", spill_down), cloud("aws", aws_down)),
        offers=(offer("gcp-spill", 0.5), offer("aws", 0.8)),  # gcp-spill is the cheaper
    )
    return schedule(snap, engine)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("spill_down", "aws_down", "launched", "reason"),
    [
        pytest.param(None, None, "gcp-spill", "", id="both-up-the-cheaper-wins"),
        pytest.param("no credentials", None, "aws", "", id="the-cheaper-has-no-credentials"),
        pytest.param(
            "no credentials",
            "AuthFailure: refused",
            None,
            "aws: AuthFailure: refused; gcp-spill: no credentials",
            id="every-target-down-says-why",
        ),
    ],
)
def test_burst_skips_an_unavailable_pool(
    spill_down: str | None, aws_down: str | None, launched: str | None, reason: str
) -> None:
    plan = full_onprem_and_two_clouds(spill_down, aws_down)
    pools = [a.pool for a in plan.actions if isinstance(a, Provision)]  # type: ignore[attr-defined]
    assert pools == ([launched] if launched else [])
    decision = plan.decisions["bj"]  # type: ignore[attr-defined]
    if launched is None:
        assert (decision.status, decision.reason) == ("pending", reason)
        assert "no cloud node type fits" not in decision.summary()


def test_a_pool_the_job_may_not_use_now_is_not_why_it_waits() -> None:
    """A standard job (no burst rule applies) waits for on-prem GPUs: that gcp-spill has no
    credentials is not why, so its reason does not name it."""
    std = job("sj", criticality="standard", resources={"gpus": 1})
    facts = MeshSnapshot(
        (
            PoolFacts("onprem", "local", "", {}, ("H100",), 8, 1.0, free_gpus=0.0),
            PoolFacts("gcp-spill", "gcp", "us-central1", {}, ("L4",), 8, 1.0, free_gpus=8.0),
        )
    )
    engine = FromPolicyEngine(bind(policies(BURST), facts, NOW), {"sj": std}, {})
    snap = snapshot(
        [node("n")],
        [pending_of(std, engine)],
        [running("x", "n", list(range(8)))],
        pools=(PoolInfo("onprem", False), cloud("gcp-spill", "no credentials")),
        offers=(offer("gcp-spill", 0.5),),
    )
    decision = schedule(snap, engine).decisions["sj"]
    assert decision.status == "pending"
    assert "gcp-spill" not in decision.summary()


def test_placement_skips_an_unavailable_pool_and_says_why() -> None:
    nodes = [node("a1", pool="onprem-a"), node("b1", pool="onprem-b")]
    pools = (PoolInfo("onprem-a", False), PoolInfo("onprem-b", False, unavailable="not up"))
    fits_anywhere = pending("small", 1)
    only_b_fits = pending("big", 8, at=1.0)
    busy_a = running("busy", "a1", list(range(4)))
    snap = snapshot(nodes, [fits_anywhere, only_b_fits], [busy_a], pools=pools)
    plan = schedule(snap, Permissive())
    assert [(p.job_id, p.pool) for p in plan.placed()] == [("small", "onprem-a")]
    big = plan.decisions["big"]
    assert (big.status, big.reason) == ("pending", "onprem-b: not up")
    assert big.filtered["are in pool onprem-b, unavailable: not up"] == 1


def test_a_job_that_fits_only_an_unavailable_pool_is_pending_not_unschedulable() -> None:
    # onprem-a's nodes have 8 GPUs; onprem-b (not up) is not observed: nothing known of it
    pools = (PoolInfo("onprem-a", False), PoolInfo("onprem-b", False, unavailable="not up"))
    plan = schedule(
        snapshot([node("a1", pool="onprem-a")], [pending("huge", 16)], pools=pools), Permissive()
    )
    decision = plan.decisions["huge"]
    assert (decision.status, decision.reason) == ("pending", "onprem-b: not up")
    assert decision.notes[0] == "elsewhere: needs 16 GPUs per node; the largest node has 8"


def test_the_same_job_with_every_pool_available_is_unschedulable() -> None:
    pools = (PoolInfo("onprem-a", False), PoolInfo("onprem-b", False))
    plan = schedule(
        snapshot([node("a1", pool="onprem-a")], [pending("huge", 16)], pools=pools), Permissive()
    )
    assert plan.decisions["huge"].status == "unschedulable"


def test_no_victim_is_preempted_in_an_unavailable_pool() -> None:
    victims = [(running("v", "n", list(range(8)), priority=0), job("v", priority_class="low"))]
    high = job("h", priority_class="high", resources={"gpus": 8})
    engine = view(PREEMPT, [high], victims=victims)
    for why, preempted in ((None, ["v"]), ("dashboard at http://x does not answer", [])):
        snap = snapshot(
            [node("n")],
            [pending_of(high, engine)],
            [r for r, _ in victims],
            pools=(PoolInfo("onprem", False, unavailable=why),),
        )
        plan = schedule(snap, engine)
        assert [a.victim_job_id for a in plan.actions if isinstance(a, Preempt)] == preempted


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.sampled_from([1, 2, 4, 8]), min_size=1, max_size=6),
    st.lists(st.sampled_from([0.5, 1, 2, 4, 8]), min_size=1, max_size=8),
    st.sets(st.sampled_from(["p0", "p1", "c0"])),
)
def test_nothing_is_ever_placed_or_launched_in_an_unavailable_pool(
    sizes: list[int], asks: list[float], down: set[str]
) -> None:
    nodes = [node(f"n{i}", pool=f"p{i % 2}", gpus=g) for i, g in enumerate(sizes)]
    pools = tuple(
        PoolInfo(name, name.startswith("c"), unavailable="no credentials" if name in down else None)
        for name in ("p0", "p1", "c0")
    )
    jobs = [pending(f"j{k}", gpus, at=float(k)) for k, gpus in enumerate(asks)]
    plan = schedule(snapshot(nodes, jobs, pools=pools, offers=(offer("c0", 1.0),)), Permissive())
    for action in plan.actions:
        if isinstance(action, Place | Provision):
            assert action.pool not in down
    for decision in plan.decisions.values():  # a job the live pools cannot hold says why
        if decision.status == "unschedulable":
            assert not down  # every pool is eligible here: none may be unavailable
