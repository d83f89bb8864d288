"""Invariants of every plan, over random meshes and queues (Hypothesis)."""

from __future__ import annotations

from collections import defaultdict

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from policy_helpers import job, pending_of, view
from sched_helpers import node, pending, running, snapshot

from meshctl.model.policy import TeamQuota
from meshctl.scheduler import Evict, Permissive, Place, Preempt, schedule

pytestmark = pytest.mark.unit

EPS = 1e-9
HEALTH = ["ready", "ready", "ready", "cordoned", "draining", "unhealthy"]


@st.composite
def meshes(draw: st.DrawFn):
    nodes, run = [], []
    for i in range(draw(st.integers(1, 8))):
        gpus = draw(st.sampled_from([1, 2, 4, 8]))
        nodes.append(
            node(
                f"n{i}",
                gpus=gpus,
                cpus=draw(st.sampled_from([8, 64])),
                rack=f"r{i % 3}",
                health=draw(st.sampled_from(HEALTH)),
            )
        )
        used = draw(st.integers(0, gpus))
        if used:
            run.append(
                running(
                    f"r{i}",
                    f"n{i}",
                    list(range(used)),
                    team=draw(st.sampled_from("abc")),
                    priority=draw(st.integers(0, 5)),
                    end=draw(st.sampled_from([None, 1100.0, 5000.0])),
                )
            )
    jobs = [
        pending(
            f"j{k}",
            draw(st.sampled_from([0.25, 0.5, 1, 2, 4, 8])),
            nodes=draw(st.sampled_from([1, 1, 1, 2, 3])),
            team=draw(st.sampled_from("abc")),
            priority=draw(st.integers(0, 5)),
            at=float(k),
            runtime=draw(st.sampled_from([None, 60.0, 3600.0])),
            cpus=draw(st.sampled_from([1, 4, 16])),
            topology=draw(st.sampled_from([None, "rack"])),
            required=draw(st.booleans()),
        )
        for k in range(draw(st.integers(0, 14)))
    ]
    jobs = [j for j in jobs if not (0 < j.request.gpus < 1 and j.request.nodes > 1)]
    return nodes, run, jobs


def check_plan(snap, plan) -> None:
    nodes = {n.name: n for n in snap.nodes}
    free = {n.name: list(n.gpu_free) for n in snap.nodes}
    cpus = {n.name: n.cpus_free for n in snap.nodes}
    memory = {n.name: n.memory_gib_free for n in snap.nodes}
    requests = {p.job_id: p.request for p in snap.pending}
    for place in (a for a in plan.actions if isinstance(a, Place)):
        names = [a.node for a in place.allocations]
        assert len(names) == len(set(names)) == requests[place.job_id].nodes  # gangs: all N
        for alloc in place.allocations:
            assert nodes[alloc.node].health == "ready"  # never cordoned, draining, unhealthy
            for i in alloc.gpu_indices:
                free[alloc.node][i] -= alloc.gpu_share
            cpus[alloc.node] -= alloc.cpus
            memory[alloc.node] -= alloc.memory_gib
    for name in nodes:  # no node over-committed, on any GPU or dimension
        assert min(free[name], default=0) >= -EPS
        assert cpus[name] >= -EPS
        assert memory[name] >= -EPS


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(meshes(), st.sampled_from(["binpack", "spread"]))
def test_no_overcommit_no_bad_node_gangs_whole_and_deterministic(mesh, packing):
    nodes, run, jobs = mesh
    snap = snapshot(nodes, jobs, run)
    plan = schedule(snap, Permissive(packing=packing))
    check_plan(snap, plan)
    assert schedule(snap, Permissive(packing=packing)).actions == plan.actions
    assert set(plan.decisions) == {j.job_id for j in jobs}


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(meshes())
def test_quotas_hold_except_within_borrowing_limits(mesh):
    nodes, run, jobs = mesh
    quotas = {
        "a": TeamQuota(team="a", cohort="c", gpus=3, borrowing_limit_gpus=2),
        "b": TeamQuota(team="b", cohort="c", gpus=3),
        "c": TeamQuota(team="c", gpus=2),
    }
    snap = snapshot(nodes, jobs, run)
    plan = schedule(snap, Permissive(quotas=quotas))
    evicted = {a.job_id for a in plan.actions if isinstance(a, Evict)}
    before: dict[str, float] = defaultdict(float)
    for r in run:
        if r.job_id not in evicted:  # an evicted job's GPUs are given back
            before[r.team] += r.gpus
    after = dict(before)
    team = {j.job_id: j.team for j in jobs}
    for place in plan.placed():
        after[team[place.job_id]] = after.get(team[place.job_id], 0.0) + sum(
            len(a.gpu_indices) * a.gpu_share for a in place.allocations
        )
    ceiling = {"a": 3 + 2, "b": 3 + 3, "c": 2}  # nominal + the most it may borrow
    for name, used in after.items():
        if used > before[name] + EPS:  # the cycle gave it something
            assert used <= ceiling[name] + EPS


PREEMPT = """\
priority_classes: [{name: p0, value: 0}, {name: p5, value: 5}, {name: p9, value: 9}]
preemption:
  - {name: any, victims: 'true', grace_s: 30}
"""


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.sampled_from(["p0", "p5", "p9"]), min_size=1, max_size=4),
    st.lists(st.sampled_from(["p0", "p5", "p9"]), min_size=1, max_size=4),
)
def test_only_lower_priority_is_preempted(victim_classes, job_classes):
    values = {"p0": 0, "p5": 5, "p9": 9}
    victims = [
        (running(f"v{i}", "n", [i], priority=values[c]), job(f"v{i}", priority_class=c))
        for i, c in enumerate(victim_classes)
    ]
    jobs = [
        job(f"j{i}", priority_class=c, resources={"gpus": 8}) for i, c in enumerate(job_classes)
    ]
    engine = view(PREEMPT, jobs, victims=victims)
    pend = [pending_of(j, engine, at=float(i)) for i, j in enumerate(jobs)]
    plan = schedule(snapshot([node("n")], pend, [r for r, _ in victims]), engine)
    priority = {p.job_id: p.priority for p in pend} | {r.job_id: r.priority for r, _ in victims}
    for action in plan.actions:
        if isinstance(action, Preempt):
            assert priority[action.victim_job_id] < priority[action.for_job_id]
    preempted = [a.victim_job_id for a in plan.actions if isinstance(a, Preempt)]
    assert len(preempted) == len(set(preempted))  # a victim is preempted once
