"""What one cycle charges as it decides: pool caps, budgets, quotas, nominations, evictions."""

from __future__ import annotations

from dataclasses import replace

import pytest
from policy_helpers import job, pending_of, view
from sched_helpers import node, pending, running, snapshot

from meshctl.model.policy import TeamQuota
from meshctl.scheduler import Offer, Permissive, PoolInfo, Preempt, Provision, schedule

pytestmark = pytest.mark.unit

BURST = """\
burst:
  - {name: spill, when: 'mesh.pools["onprem"].expected_wait_s > 600.0', to: pool.cloud}
"""


def offer(name: str, gpus: int, usd: float, cap: int = 8, vendor: str = "nvidia") -> Offer:
    return Offer(
        "aws", name, gpus, 80, "H100", vendor, 8 * gpus, 64 * gpus, 100, usd, None, False, cap
    )


def burst_plan(jobs, pools, offers, quotas=None):
    engine = view(BURST, jobs, waits={"onprem": 1200.0})
    if quotas:
        engine.quotas = quotas
    pend = [pending_of(j, engine, at=float(i)) for i, j in enumerate(jobs)]
    snap = snapshot(
        [node("n")], pend, [running("x", "n", list(range(8)))], pools=pools, offers=offers
    )
    return schedule(snap, engine)


def launches(plan) -> list[tuple[str, str, int]]:
    return [(a.job_id, a.node_type, a.count) for a in plan.actions if isinstance(a, Provision)]


def test_the_pools_node_cap_holds_across_node_types():
    # aws may launch 4 nodes in all; each type alone allows 8
    jobs = [
        job("big", resources={"gpus": 8, "nodes": 3}),
        job("small", resources={"gpus": 1, "nodes": 2}),
    ]
    plan = burst_plan(
        jobs, (PoolInfo("aws", True, max_new_nodes=4),), (offer("p8", 8, 10.0), offer("p1", 1, 1.0))
    )
    assert launches(plan) == [("big", "p8", 3)]
    assert "the pool may launch only 1 more nodes" in plan.decisions["small"].summary()


def test_the_budget_is_charged_for_every_launch():
    # 15 USD/h left: the first 10 USD/h launch fits, the second no longer does
    jobs = [job(f"j{i}", resources={"gpus": 8}) for i in range(3)]
    plan = burst_plan(
        jobs, (PoolInfo("aws", True, budget_usd_per_hour=15.0),), (offer("p8", 8, 10.0),)
    )
    assert launches(plan) == [("j0", "p8", 1)]


def test_capacity_being_launched_counts_against_the_quota():
    jobs = [job(f"j{i}", team="a", resources={"gpus": 8}) for i in range(3)]
    plan = burst_plan(jobs, (), (offer("p8", 8, 10.0),), {"a": TeamQuota(team="a", gpus=8)})
    assert launches(plan) == [("j0", "p8", 1)]
    assert plan.decisions["j1"].reason == "team a over quota: 16 GPUs > 8 + 0 borrowable"


def test_an_offer_of_another_gpu_vendor_is_never_launched():
    amd = job("amd", resources={"gpus": 1, "accelerator": {"vendor": "amd"}})
    plan = burst_plan([amd], (), (offer("p1", 1, 1.0),))
    assert plan.actions == []
    assert plan.decisions["amd"].status == "unschedulable"


def test_a_node_freed_for_two_jobs_serves_both():
    # last cycle, a and b each preempted half of n; now n is free and nominated for both
    jobs = [
        replace(pending("a", 4), nominated=("n",)),
        replace(pending("b", 4, at=1.0), nominated=("n",)),
    ]
    plan = schedule(
        snapshot([node("n"), node("m")], jobs, [running("z", "m", list(range(8)))]), Permissive()
    )
    assert {p.job_id: p.allocations[0].node for p in plan.placed()} == {"a": "n", "b": "n"}
    assert not [x for x in plan.actions if isinstance(x, Preempt)]


def test_an_evicted_job_frees_its_other_nodes_and_is_not_a_victim():
    # gang g holds GPU 0 of "sick" and all of "ok"; "sick" fails
    on_ok = running("g", "ok", list(range(8))).allocations
    gang = running("g", "sick", [0])
    gang = replace(gang, allocations=(*gang.allocations, *on_ok))
    plan = schedule(
        snapshot(
            [node("sick", health="unhealthy"), node("ok")],
            [pending("serve", 8, priority=9)],
            [gang],
        ),
        Permissive(),
    )
    assert [type(a).__name__ for a in plan.actions] == ["Evict", "Place"]
    assert plan.placed()[0].allocations[0].node == "ok"


def test_team_usage_from_a_mesh_moment_counts():
    # a MeshState says team a already uses 3 GPUs that no running job here shows
    snap = replace(snapshot([node("n")], [pending("j", 2, team="a")]), team_usage={"a": (3.0, 0.0)})
    plan = schedule(snap, Permissive(quotas={"a": TeamQuota(team="a", gpus=4)}))
    assert plan.decisions["j"].reason == "team a over quota: 5 GPUs > 4 + 0 borrowable"


def test_gpu_memory_quota():
    quotas = {"a": TeamQuota(team="a", gpus=8, gpu_memory_gib=40)}
    plan = schedule(
        snapshot([node("n")], [pending("j", 1, team="a", gpu_memory=80)]), Permissive(quotas=quotas)
    )
    assert plan.decisions["j"].reason == "team a over its GPU memory quota: 80 GiB > 40"
