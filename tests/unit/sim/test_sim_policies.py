"""The engine with real policies: burst to a cloud pool (provisioning delay, spend, idle
teardown) and priority preemption with a checkpoint in the grace. Times computed by hand."""

from __future__ import annotations

import textwrap

import pytest
from sim_helpers import config, job, mesh, node

from meshctl.files import load_text
from meshctl.model import Policy
from meshctl.policy import compile_policies
from meshctl.policy.compiled import Source
from meshctl.sim.engine import simulate

pytestmark = pytest.mark.unit


def policies(spec: str):
    text = "apiVersion: meshctl/v1\nkind: Policy\nmetadata: {name: p}\nspec:\n" + textwrap.indent(
        textwrap.dedent(spec), "  "
    )
    (loaded,) = load_text(text, "p.yaml")
    assert isinstance(loaded.document, Policy)
    return compile_policies([Source("p.yaml", loaded.document, loaded.lines)])


BURST = policies(
    """
    burst:
      - name: spill
        when: mesh.pools["onprem"].expected_wait_s > 60.0
        to: pool.cloud
        spot: true
    """
)

PRIORITIES = policies(
    """
    priority_classes:
      - {name: production, value: 1000}
      - {name: batch, value: 200}
    default_priority_class: {inference: production, batch: batch}
    preemption:
      - name: anything-over-best-effort
        victims: victim.criticality == "best-effort"
        grace_s: 30s
    """
)


def test_waiting_work_bursts_once_the_queue_has_waited_and_the_node_is_billed_until_idle() -> None:
    jobs = [job("a", 0, 1000), job("b", 0, 1000)]
    result = simulate(mesh(node("n1"), cloud=True), jobs, config(), BURST)
    by_id = {r.job.id: r for r in result.jobs}
    # b waits; the recheck at 300 s sees a 300 s wait (> 60): a 1-GPU spot node is launched,
    # joins at 400 s, b runs 400..1400; the node idles from 1400 and goes at 2000.
    assert (by_id["b"].first_start_s, by_id["b"].end_s) == (400, 1400)
    assert by_id["b"].pools == {"cloud"}
    assert result.totals.launches == 1
    assert result.totals.spend_usd["cloud"] == pytest.approx((2000 - 300) / 3600 * 1.5)
    assert (by_id["a"].first_start_s, by_id["a"].end_s) == (0, 1000)


def test_no_burst_rule_means_the_cloud_pool_stays_empty() -> None:
    jobs = [job("a", 0, 10), job("b", 0, 10)]
    result = simulate(mesh(node("n1"), cloud=True), jobs, config(), PRIORITIES)
    assert [(r.first_start_s, r.end_s) for r in result.jobs] == [(0, 10), (10, 20)]
    assert result.totals.launches == 0


def test_a_preempted_job_checkpoints_in_its_grace_and_resumes_where_it_stopped() -> None:
    victim = job("v", 0, 1000, criticality="best-effort")
    urgent = job("p", 100, 50, kind="inference")
    result = simulate(mesh(node("n1")), [victim, urgent], config(), PRIORITIES)
    by_id = {r.job.id: r for r in result.jobs}
    # p arrives at 100 and preempts v (grace 30 s): v stops at 130 having saved 130 s of
    # work, p runs 130..180, v resumes at 180 with 870 s left and ends at 1050.
    assert (by_id["p"].first_start_s, by_id["p"].end_s) == (130, 180)
    assert by_id["v"].end_s == pytest.approx(1050)
    assert by_id["v"].lost_gpu_s == pytest.approx(0)
    assert by_id["v"].preempted == 1
    assert result.totals.preemptions == 1


def test_a_gang_waiting_for_its_own_launch_is_not_rejected_when_others_take_the_cap() -> None:
    # g (4 nodes) launches 4 one-GPU nodes at the 300 s recheck; s arrives at 350 s, while
    # they boot and the pool's cap (4) is all in flight: g must wait for them, not be
    # rejected as "can never fit".
    jobs = [job("a", 0, 5000), job("g", 0, 1000, nodes=4), job("s", 350, 100)]
    result = simulate(mesh(node("n1"), cloud=True), jobs, config(), BURST)
    by_id = {r.job.id: r for r in result.jobs}
    assert by_id["g"].rejected is None
    assert by_id["g"].end_s is not None
    assert by_id["g"].pools == {"cloud"}


def test_an_idle_time_of_zero_still_lets_the_launched_node_take_its_job() -> None:
    jobs = [job("a", 0, 1000), job("b", 0, 1000)]
    cloud = mesh(node("n1"), cloud=True)
    zero = type(cloud)(
        cloud.nodes,
        cloud.pools,
        cloud.offers,
        {"cloud": type(cloud.clouds["cloud"])("cloud", provision_s=100.0, idle_s=0.0)},
        cloud.networks,
        cloud.configured,
    )
    result = simulate(zero, jobs, config(), BURST)
    by_id = {r.job.id: r for r in result.jobs}
    assert (by_id["b"].first_start_s, by_id["b"].end_s) == (400, 1400)
    assert result.totals.launches == 1
