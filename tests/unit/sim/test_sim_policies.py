"""The engine with real policies: burst to a cloud pool (provisioning delay, spend, idle
teardown) and priority preemption with a checkpoint in the grace. Times computed by hand."""

from __future__ import annotations

import textwrap
from dataclasses import replace

import pytest
from sim_helpers import config, job, mesh, node

from meshctl.files import load_text
from meshctl.model import Policy
from meshctl.policy import compile_policies
from meshctl.policy.compiled import Source
from meshctl.sim.core.engine import simulate

pytestmark = pytest.mark.unit


def policies(spec: str):
    text = "apiVersion: meshctl/v1\nkind: Policy\nmetadata: {name: p}\nspec:\n" + textwrap.indent(
        textwrap.dedent(spec), "  "
    )
    (loaded,) = load_text(text, "p.yaml")
    assert isinstance(loaded.document, Policy)
    return compile_policies([Source("p.yaml", loaded.document, loaded.lines)])


BURST_TEXT = """
burst:
  - name: spill
    when: mesh.pools["onprem"].expected_wait_s > 60.0
    to: pool.cloud
    spot: true
"""
BURST = policies(BURST_TEXT)

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


def test_work_behind_a_job_of_unknown_runtime_bursts_at_once_and_is_billed_until_idle() -> None:
    jobs = [job("a", 0, 1000), job("b", 0, 1000)]
    result = simulate(mesh(node("n1"), cloud=True), jobs, config(), BURST)
    by_id = {r.job.id: r for r in result.jobs}
    # At 0 both wait for the only on-prem GPU and neither's runtime is known (none declared,
    # no history): b's expected wait is unbounded (> 60), so a 1-GPU spot node is launched
    # at 0, joins at 100, b runs 100..1100; the node idles from 1100 and goes at 1700.
    assert (by_id["b"].first_start_s, by_id["b"].end_s) == (100, 1100)
    assert by_id["b"].pools == {"cloud"}
    assert result.totals.launches == 1
    assert result.totals.spend_usd["cloud"] == pytest.approx(1700 / 3600 * 1.5)
    assert (by_id["a"].first_start_s, by_id["a"].end_s) == (0, 1000)


def test_a_short_known_wait_keeps_the_work_on_prem() -> None:
    # a declares 50 s: b's forecast wait at 0 is 50 s (< 60), so it does not burst and runs
    # on-prem when a ends.
    short = replace(job("a", 0, 50), max_runtime_s=50.0)
    result = simulate(mesh(node("n1"), cloud=True), [short, job("b", 0, 1000)], config(), BURST)
    by_id = {r.job.id: r for r in result.jobs}
    assert (by_id["b"].first_start_s, by_id["b"].end_s) == (50, 1050)
    assert by_id["b"].pools == {"onprem"}
    assert result.totals.launches == 0


@pytest.mark.parametrize(
    ("unknown", "arrives", "launched"),
    [
        ("", 20, 20),
        ("forecast: {unknown_runtime_s: 30s}", 20, 70),
        ("forecast: {unknown_runtime_s: 30s}", 200, 200),
    ],
    ids=[
        "a job that just started is taken to run 2 h more: b bursts as it comes",
        "the policies say 30 s: b's wait is 30 s until a has run past 60 s",
        "a has run 200 s, longer than 30 s: it runs as long again, b's wait is 200 s",
    ],
)
def test_a_job_of_unknown_runtime_runs_the_policies_rule_or_as_long_again(
    unknown: str, arrives: int, launched: int
) -> None:
    # a starts at 0 (nothing known of it); b arrives later and bursts once its forecast
    # wait passes the gate's 60 s (a waiting job looked at every 10 s); the node joins 100 s
    # after its launch
    rules = policies(BURST_TEXT + unknown + "\n")
    jobs = [job("a", 0, 1000), job("b", arrives, 100)]
    result = simulate(mesh(node("n1"), cloud=True), jobs, config(recheck_s=10.0), rules)
    by_id = {r.job.id: r for r in result.jobs}
    assert by_id["b"].pools == {"cloud"}
    assert by_id["b"].first_start_s == launched + 100


def test_a_long_known_wait_bursts() -> None:
    # a declares 1000 s: b's forecast wait at 0 is 1000 s (> 60): it bursts at once.
    long = replace(job("a", 0, 1000), max_runtime_s=1000.0)
    result = simulate(mesh(node("n1"), cloud=True), [long, job("b", 0, 1000)], config(), BURST)
    assert {r.job.id: r for r in result.jobs}["b"].pools == {"cloud"}


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
    # p arrives at 100 and preempts v (grace 30 s): v is asked to checkpoint at once and
    # saves the 100 s it has done (a checkpoint costs nothing here), stops at 130; p runs
    # 130..180, v resumes at 180 with 900 s left and ends at 1080. What it ran in its grace
    # after the checkpoint is lost.
    assert (by_id["p"].first_start_s, by_id["p"].end_s) == (130, 180)
    assert by_id["v"].end_s == pytest.approx(1080)
    assert by_id["v"].lost_gpu_s == pytest.approx(30)
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
    assert (by_id["b"].first_start_s, by_id["b"].end_s) == (100, 1100)
    assert result.totals.launches == 1
