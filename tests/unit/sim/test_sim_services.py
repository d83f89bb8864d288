"""Services in the simulator's event engine: replicas placed one by one through the lifecycle,
borrowing from elastic training and giving back, as the controller does (the differential
check compares the two; these are the engine's own hand-computed cases)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from meshctl.lifecycle.serving import ServeSpec
from meshctl.policy.compiled import PolicySet
from meshctl.sim.core.engine import Engine, Result, SimMesh
from meshctl.sim.core.inference import SimServe, Surge, Traffic
from meshctl.sim.core.services import surge_to_serving
from meshctl.sim.core.workload import SimJob
from tests.differential.scenario import Scenario
from tests.differential.table import PRIORITIES, service
from tests.unit.sim.sim_helpers import config, mesh, node

pytestmark = pytest.mark.unit


def policies(text: str = PRIORITIES) -> PolicySet:
    found = Scenario("policies", (), policies=text).policy_set()
    assert found is not None
    return found


def elastic(job_id: str, arrival: float, duration: float, nodes: int, least: int) -> SimJob:
    return SimJob(job_id, arrival, duration, 1, nodes, "train", "standard", "t",
                  name=job_id, elastic_min=least)  # fmt: skip


def three_nodes() -> SimMesh:
    return mesh(node("n1"), node("n2"), node("n3"))


def run(
    jobs: list[SimJob], mesh_: SimMesh | None = None, text: str = PRIORITIES, **changes: Any
) -> tuple[Engine, Result]:
    engine = Engine(mesh_ or three_nodes(), jobs, config(tick_s=10.0, record=True, **changes),
                    policies(text))  # fmt: skip
    return engine, engine.run()


def starts(result: Result, prefix: str) -> list[tuple[float, tuple[str, ...]]]:
    from meshctl.lifecycle import Start

    return [
        (t, tuple(a.node for a in action.allocations))
        for t, action in result.actions
        if isinstance(action, Start) and action.job_id.startswith(prefix)
    ]


def test_a_surge_borrows_a_node_of_elastic_training_and_gives_it_back() -> None:
    # s: one replica of 1 GPU; e: elastic on two 1-GPU nodes (least one). The surge doubles
    # s's traffic at 300 s for 600 s: 30 s above target, s wants a second replica, which
    # borrows one of e's nodes (e checkpoints for 30 s); 120 s after the surge, the borrowed
    # replica goes, the loan closes and e grows back onto both nodes
    s = service("s", 0, 1.0, surges=((300, 600, 2.0),), gpus=1)
    engine, result = run([s, elastic("e", 20, 3000, nodes=2, least=1)])
    assert starts(result, "s/") == [(0.0, ("n1",)), (370.0, ("n2",))]
    assert [x[0] for x in starts(result, "e")] == [20.0, 370.0, 1060.0]
    (loan,) = engine.state.loans
    assert (loan.lender, loan.borrower, loan.node) == ("e", "s/r1", "n2")
    assert (loan.opened_at_s, loan.closed_at_s) == (330.0, 1020.0)
    served = engine.services.served["s"]
    assert surge_to_serving(served) == [370.0 + served.serve.start_s - 300.0]
    assert list(served.replicas.placed) == ["s/r0"]  # the borrowed one went first
    # e ran on two nodes, then one while lending (half as fast), then two again: its work
    # is all done, and it ended later than 20 + 3000 s by what the loan cost it
    (training,) = [r for r in result.jobs if r.job.id == "e"]
    assert training.resized == 2
    assert training.progress_s == pytest.approx(3000.0)
    assert training.end_s is not None
    assert training.end_s > 3020.0


def test_a_critical_job_the_policy_does_not_let_services_take_is_never_shrunk() -> None:
    # the policy lets high take only low: a critical-class training job is neither shrunk
    # nor preempted, so the surge's second replica waits
    text = PRIORITIES.replace("{name: low, value: 100}", "{name: low, value: 100}\n"
                              "  - {name: critical, value: 5000}")  # fmt: skip
    job = replace(elastic("e", 20, 3000, nodes=2, least=1), priority_class="critical")
    s = service("s", 0, 1.0, surges=((300, 600, 2.0),), gpus=1)
    engine, result = run([s, job], text=text)
    assert starts(result, "s/") == [(0.0, ("n1",))]
    assert engine.state.loans == []
    assert result.totals.resizes == 0
    assert result.totals.preemptions == 0


def test_a_replica_on_a_failed_node_goes_and_is_placed_again() -> None:
    s = service("s", 0, 1.0, gpus=1)
    _, result = run([s, SimJob("b", 0, 900, 1, 1, "batch", "standard", "t")],
                         injected_failures=((200.0, "n1", 100.0),))  # fmt: skip
    # r0 on n1; n1 fails at 200: the cycle then (a node failing comes first at one instant)
    # drops r0 and places r1 on a free node (b holds n2)
    assert starts(result, "s/") == [(0.0, ("n1",)), (200.0, ("n3",))]


def test_replicas_never_go_to_a_cloud_pool() -> None:
    # on-prem is full: the first replica waits; no launch is made for it and no replica is
    # placed on a cloud node even when one is up for another job
    cloudy = mesh(node("n1"), cloud=True)
    s = service("s", 10, 1.0, gpus=1)
    burst = (
        "burst:\n  - {name: spill, when: 'true', to: pool.cloud}\n"
        + PRIORITIES.split("preemption:")[0]
    )
    b = SimJob("b", 0, 2000, 1, 1, "batch", "standard", "t")
    c = SimJob("c", 5, 2000, 1, 1, "batch", "standard", "t")
    engine, result = run([b, s, c], mesh_=cloudy, text=burst)
    assert all(
        engine.state.cluster.nodes.get(a) is None or not a.startswith("cloud")
        for _, nodes in starts(result, "s/")
        for a in nodes
    )
    assert starts(result, "s/") == [(2000.0, ("n1",))]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rps=st.sampled_from([0.5, 1.0, 2.0]),
    factor=st.sampled_from([1.5, 2.0, 3.0]),
    start=st.integers(0, 100).map(lambda x: x * 10.0),
    length=st.integers(6, 90).map(lambda x: x * 10.0),
    least=st.integers(1, 2),
)
def test_gpu_seconds_of_replicas_add_up(
    rps: float, factor: float, start: float, length: float, least: int
) -> None:
    """Conservation: what the replicas serve is at most what they hold; what they hold is
    their count over time (never more than the service's most on the pool's GPUs); every
    loan closes and the lender ends with its work done."""
    spec = ServeSpec(least, 3, 1.0, 30.0, 60.0)
    traffic = Traffic(rps, trough=1.0, surges=(Surge(start, length, factor),))
    s = SimJob("s", 0, 0, 1, 1, "inference", "standard", "t", name="s", priority_class="high",
               serve=SimServe(spec, 1.0, traffic))  # fmt: skip
    e = elastic("e", 0, 4000, nodes=2, least=1)
    four = mesh(node("n1"), node("n2"), node("n3"), node("n4"))
    engine, result = run([s, e], mesh_=four, until_s=100_000.0)
    served = engine.services.served["s"]
    span = result.end_s
    assert served.serving_gpu_s <= served.held_gpu_s + 1e-6
    assert least * (span - 10.0) - 1e-6 <= served.held_gpu_s <= 3 * span + 1e-6
    assert all(not x.open for x in engine.state.loans)
    (training,) = [r for r in result.jobs if r.job.id == "e"]
    assert training.end_s is not None
    assert training.progress_s == pytest.approx(4000.0, rel=1e-6)
