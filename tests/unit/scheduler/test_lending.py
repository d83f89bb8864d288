"""Elastic jobs lend nodes to higher-priority work instead of being preempted, never below
their least, and grow back onto free nodes of their pool when the loans are closed."""

from __future__ import annotations

import dataclasses

import pytest
from policy_helpers import job, pending_of, view
from sched_helpers import node, pending, req, running, snapshot

from meshctl.scheduler import (
    Allocation,
    Grow,
    Pending,
    Permissive,
    Preempt,
    Running,
    Shrink,
    schedule,
)

pytestmark = pytest.mark.unit

POLICY = """\
priority_classes: [{name: serve, value: 100}, {name: train, value: 10}, {name: low, value: 1}]
default_priority_class: {inference: serve, train: train, batch: low}
preemption:
  - {name: surge, when: 'job.kind == "inference"', victims: 'victim.elastic', grace_s: 30}
"""
ANY = (
    POLICY
    + """\
  - {name: surge-any, when: 'job.kind == "inference"', victims: 'victim.kind == "batch"',
     grace_s: 5}
"""
)


def elastic(job_id: str, nodes: list[str], least: int, priority: int = 10) -> Running:
    """One worker of one GPU on each of ``nodes`` (one-GPU nodes)."""
    allocs = tuple(Allocation(n, (0,), 1.0, 1.0, 4.0, 0.0) for n in nodes)
    request = req(1, len(nodes))
    return Running(job_id, "t", priority, "onprem", allocs, request, 0.0, 900.0, elastic_min=least)


def one_gpu_nodes(count: int) -> list:
    return [node(f"n{i}", gpus=1) for i in range(count)]


TRAIN = job(
    "tr",
    kind="train",
    entrypoint=None,
    train={"loop": "m:f", "workers": {"min": 1, "max": 3}},
    resources={"gpus": 1},
)
BATCH = job("b", kind="batch", resources={"gpus": 1})


def serve(name: str):
    return job(name, kind="inference", resources={"gpus": 1})


def test_a_replica_borrows_a_node_of_an_elastic_job_rather_than_preempting_it():
    train = elastic("tr", ["n0", "n1", "n2"], least=1)
    replica = serve("s")
    engine = view(POLICY, [replica], victims=[(train, TRAIN)])
    plan = schedule(snapshot(one_gpu_nodes(3), [pending_of(replica, engine)], [train]), engine)
    assert len(plan.actions) == 1
    (shrink,) = plan.actions
    assert isinstance(shrink, Shrink)
    assert (shrink.victim_job_id, shrink.for_job_id, shrink.grace_s, shrink.rule) == (
        "tr", "s", 30.0, "surge",
    )  # fmt: skip
    assert plan.decisions["s"].status == "preempting"
    assert "tr lending" in plan.decisions["s"].reason


def test_lending_stops_at_the_least_and_never_preempts_the_lender():
    # three replicas want three nodes; the elastic job (min 1) lends two; the third waits
    train = elastic("tr", ["n0", "n1", "n2"], least=1)
    replicas = [serve(f"s{i}") for i in range(3)]
    engine = view(POLICY, replicas, victims=[(train, TRAIN)])
    pend = [
        dataclasses.replace(pending_of(r, engine), submitted_at_s=i) for i, r in enumerate(replicas)
    ]
    plan = schedule(snapshot(one_gpu_nodes(3), pend, [train]), engine)
    shrinks = [a for a in plan.actions if isinstance(a, Shrink)]
    assert [s.for_job_id for s in shrinks] == ["s0", "s1"]
    assert len({s.node for s in shrinks}) == 2
    assert not [a for a in plan.actions if isinstance(a, Preempt)]
    assert plan.decisions["s2"].status == "pending"


def test_loans_come_before_preempting_a_job_for_good():
    # n0 runs a batch job (low priority, cheap to lose); n1, n2 run the elastic job: still lent
    batch = running("b", "n0", [0], priority=1, checkpoint=999.0)
    train = elastic("tr", ["n1", "n2"], least=1)
    replica = serve("s")
    engine = view(ANY, [replica], victims=[(train, TRAIN), (batch, BATCH)])
    plan = schedule(
        snapshot(one_gpu_nodes(3), [pending_of(replica, engine)], [batch, train]), engine
    )
    assert [type(a) for a in plan.actions] == [Shrink]


def test_a_job_at_its_least_is_preempted_only_where_policy_allows_it():
    train = elastic("tr", ["n0"], least=1)
    replica = serve("s")
    engine = view(POLICY, [replica], victims=[(train, TRAIN)])
    plan = schedule(snapshot(one_gpu_nodes(1), [pending_of(replica, engine)], [train]), engine)
    # victim.elastic allows taking it, and it cannot lend: it is preempted whole
    assert [type(a) for a in plan.actions] == [Preempt]
    critical = job("c", kind="train", entrypoint=None, resources={"gpus": 1}, train={"loop": "m:f"},
                   criticality="critical")  # fmt: skip
    fixed = running("c", "n0", [0], priority=10)
    engine = view(POLICY, [replica], victims=[(fixed, critical)])
    plan = schedule(snapshot(one_gpu_nodes(1), [pending_of(replica, engine)], [fixed]), engine)
    assert plan.actions == []  # not elastic: the policy forbids taking it
    assert plan.decisions["s"].status == "pending"


def test_a_job_below_its_size_grows_onto_free_nodes_of_its_pool_ahead_of_lower_priority():
    train = elastic("tr", ["n0"], least=1)
    grow = Pending("tr", "t", 10, req(1, 2), 0.0, None, grows_in="onprem", holds=("n0",))
    low = pending("low", 1, priority=1)
    plan = schedule(snapshot([*one_gpu_nodes(2), node("x", pool="other", gpus=1)],
                             [low, grow], [train]), Permissive())  # fmt: skip
    grows = [a for a in plan.actions if isinstance(a, Grow)]
    assert len(grows) == 1
    assert [a.node for a in grows[0].allocations] == ["n1"]
    assert "tr" not in plan.decisions  # a running job: no decision of its own
    placed = [a for a in plan.placed() if a.job_id == "low"]
    assert [a.allocations[0].node for a in placed] == ["x"]  # n1 went to the growth


def test_a_growth_takes_what_is_free_and_never_preempts():
    train = elastic("tr", ["n0"], least=1)
    other = running("o", "n2", [0], priority=1)
    grow = Pending("tr", "t", 10, req(1, 2), 0.0, None, grows_in="onprem", holds=("n0",))
    plan = schedule(snapshot(one_gpu_nodes(3), [grow], [train, other]), Permissive())
    (action,) = plan.actions
    assert isinstance(action, Grow)
    assert [a.node for a in action.allocations] == ["n1"]
