"""The engine against cases computed by hand: FIFO on a 2-node pool, failures that lose exactly
the work since the last checkpoint, preemption with a checkpoint in the grace, bursting to a
cloud pool with provisioning delay, spend and idle teardown."""

from __future__ import annotations

import pytest
from sim_helpers import config, job, mesh, node

from meshctl.sim.core.engine import simulate
from meshctl.sim.core.failures import Checkpoints
from meshctl.sim.core.network import Network

pytestmark = pytest.mark.unit

TWO = mesh(node("n1"), node("n2"))


def ends(result) -> dict[str, tuple[float | None, float | None]]:
    return {r.job.id: (r.first_start_s, r.end_s) for r in result.jobs}


FIFO = [
    pytest.param(
        [job("a", 0, 100), job("b", 0, 50)],
        {"a": (0, 100), "b": (0, 50)},
        id="two-jobs-two-nodes-start-at-once",
    ),
    pytest.param(
        [job("a", 0, 100), job("b", 0, 50), job("c", 10, 30)],
        {"a": (0, 100), "b": (0, 50), "c": (50, 80)},
        id="third-waits-for-the-first-node-to-free",
    ),
    pytest.param(
        [job("a", 0, 100), job("b", 0, 50), job("c", 10, 30), job("d", 20, 40)],
        {"a": (0, 100), "b": (0, 50), "c": (50, 80), "d": (80, 120)},
        id="waiting-jobs-start-in-arrival-order",
    ),
    pytest.param(
        [job("a", 0, 100), job("g", 5, 50, nodes=2), job("b", 10, 20)],
        {"a": (0, 100), "g": (100, 150), "b": (10, 30)},
        id="a-gang-waits-for-both-nodes-a-small-job-runs-on-the-free-one",
    ),
    pytest.param(
        [job("a", 0, 100, gpus=2)],
        {"a": (None, None)},
        id="more-gpus-than-a-node-has-is-rejected",
    ),
]


@pytest.mark.parametrize(("jobs", "expected"), FIFO)
def test_fifo_on_two_nodes_ends_when_computed_by_hand(jobs, expected) -> None:
    assert ends(simulate(TWO, jobs, config())) == expected


def test_a_rejected_job_says_why() -> None:
    (result,) = simulate(TWO, [job("big", 0, 10, gpus=2)], config()).jobs
    assert result.rejected
    assert result.rejected == "needs 2 GPUs per node; the largest node has 1"


def test_a_cycle_interval_delays_starts_to_the_next_cycle() -> None:
    result = simulate(TWO, [job("a", 0, 100), job("b", 30, 10)], config(cycle_s=60.0))
    assert ends(result) == {"a": (0, 100), "b": (60, 70)}


# A failure at ``fail_at`` on the job's node: the job keeps the work of its last finished
# checkpoint, restarts at once on the other node (restart cost ``restart``), and ends at
# fail_at + restart + remaining compute + the checkpoints it still writes.
FAILURES = [
    # interval, cost, restart, fail_at, lost GPU-s, end
    pytest.param(
        100.0, 0.0, 0.0, 250.0, 50.0, 250 + 800, id="every-100s-free-fail-at-250-loses-50"
    ),
    pytest.param(
        100.0, 0.0, 0.0, 200.0, 0.0, 200 + 800, id="fail-right-after-a-checkpoint-loses-0"
    ),
    # rounds of 100 s compute + 10 s writing: checkpoints finish at 110, 220; at 250 the job
    # has 200 s saved and loses 30 s; 800 s left = 8 rounds, 7 checkpoints: 800 + 70 + restart 5
    pytest.param(100.0, 10.0, 5.0, 250.0, 30.0, 250 + 5 + 800 + 70, id="costly-checkpoints"),
    # failing while a checkpoint is being written loses the round and the partial write
    pytest.param(100.0, 10.0, 0.0, 215.0, 105.0, 215 + 900 + 80, id="fail-mid-checkpoint"),
    pytest.param(None, 0.0, 0.0, 250.0, 250.0, 250 + 1000, id="no-checkpoints-lose-everything"),
]


@pytest.mark.parametrize(("interval", "cost", "restart", "fail_at", "lost", "end"), FAILURES)
def test_a_failure_loses_exactly_the_work_since_the_last_checkpoint(
    interval, cost, restart, fail_at, lost, end
) -> None:
    cfg = config(
        checkpoints=Checkpoints(interval, cost, restart),
        injected_failures=((fail_at, "n1", 10_000.0),),
    )
    (result,) = simulate(mesh(node("n1"), node("n2")), [job("a", 0, 1000)], cfg).jobs
    assert result.lost_gpu_s == pytest.approx(lost)
    assert result.end_s == pytest.approx(end)
    assert result.failed == 1
    assert result.attempts == 2
    assert result.useful_gpu_s == pytest.approx(1000)


def test_a_failed_node_comes_back_after_its_repair() -> None:
    cfg = config(injected_failures=((10.0, "n1", 100.0),))
    result = simulate(mesh(node("n1")), [job("a", 0, 50)], cfg)
    # n1 is the only node: the job waits for the repair at 110, then runs 50 s from scratch
    assert ends(result) == {"a": (0, 160)}
    assert result.totals.node_failures == 1


def test_a_multi_node_job_across_racks_is_slowed_by_the_oversubscribed_fabric() -> None:
    fabric = Network("fat-tree", oversubscription=3.0, comm_fraction=0.5)
    two_racks = mesh(node("n1", rack="r1"), node("n2", rack="r2"), network=fabric)
    (result,) = simulate(two_racks, [job("g", 0, 100, nodes=2)], config()).jobs
    # crossing = 1 - (1/2^2 + 1/2^2) = 0.5; slowdown = 1 + 0.5 * 0.5 * (3 - 1) = 1.5
    assert result.end_s == pytest.approx(150)
    assert result.slowdown_gpu_s == pytest.approx(100)  # 50 s x 2 GPUs
    one_rack = mesh(node("n1", rack="r1"), node("n2", rack="r1"), network=fabric)
    assert simulate(one_rack, [job("g", 0, 100, nodes=2)], config()).jobs[0].end_s == 100


def test_an_injected_failure_replaces_the_models_next_one_for_that_node() -> None:
    from meshctl.sim.core.failures import FailureModel

    rare = FailureModel("rare", node_mtbf_s=1e12, repair_median_s=10, repair_mean_s=10)
    cfg = config(failures=rare, injected_failures=((10.0, "n1", 100.0),))
    result = simulate(mesh(node("n1"), node("n2")), [job("a", 0, 50_000)], cfg)
    assert result.totals.node_failures == 1
