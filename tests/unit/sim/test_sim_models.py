"""The simulator's models, case by case: the checkpoint timeline, Young/Daly, the fabric's
slowdown, failure presets, and the workload transforms and class rules."""

from __future__ import annotations

import math
import random

import pytest

from meshctl.lifecycle.checkpointing import young_daly
from meshctl.sim.core import workload as wl
from meshctl.sim.core.failures import LLAMA3, Checkpoints, FailureModel, Segment, from_fault_trace
from meshctl.sim.core.network import Network, crossing, slowdown
from meshctl.sim.core.report import percentile

pytestmark = pytest.mark.unit

SEG = Segment(restart_s=10.0, compute_s=250.0, interval_s=100.0, cost_s=5.0)


@pytest.mark.parametrize(
    ("elapsed", "saved", "computed"),
    [
        pytest.param(5.0, (0.0, 0), (0.0, 0), id="still-restarting"),
        pytest.param(60.0, (0.0, 0), (50.0, 0), id="first-round-computing"),
        pytest.param(112.0, (0.0, 0), (100.0, 0), id="writing-the-first-checkpoint"),
        pytest.param(115.0, (100.0, 1), (100.0, 1), id="first-checkpoint-done"),
        pytest.param(220.0, (200.0, 2), (200.0, 2), id="second-checkpoint-done"),
        pytest.param(260.0, (200.0, 2), (240.0, 2), id="last-round-no-checkpoint-after-it"),
        pytest.param(270.0, (200.0, 2), (250.0, 2), id="all-computed"),
    ],
)
def test_a_segment_knows_what_is_saved_and_what_is_computed(elapsed, saved, computed) -> None:
    assert SEG.saved_at(elapsed) == saved
    assert SEG.computed_at(elapsed) == computed


def test_a_segment_writes_no_checkpoint_after_its_last_round() -> None:
    assert SEG.checkpoints == 2  # rounds at 100, 200; the last 50 s end the job
    assert SEG.wall_s == 10 + 250 + 2 * 5
    assert Segment(0, 200, 100, 5).checkpoints == 1
    assert Segment(0, 200, math.inf, 5).checkpoints == 0


@pytest.mark.parametrize(
    ("cost", "mtbf", "expected"),
    [
        pytest.param(60.0, 86_400.0, math.sqrt(2 * 60 * 86_400), id="one-day-mtbf"),
        pytest.param(0.0, 86_400.0, 1.0, id="free-checkpoints-clamped-to-1s"),
        pytest.param(600.0, 1e9, 6 * 3600.0, id="rare-failures-clamped-to-6h"),
    ],
)
def test_young_daly(cost, mtbf, expected) -> None:
    assert young_daly(cost, mtbf) == pytest.approx(expected)


def test_the_interval_follows_the_jobs_mtbf_which_shrinks_with_its_nodes() -> None:
    c = Checkpoints(interval_s=None, cost_s=50.0)
    assert c.interval_for(1, 40_000.0) == pytest.approx(young_daly(50.0, 40_000.0))
    assert c.interval_for(4, 40_000.0) == pytest.approx(young_daly(50.0, 10_000.0))
    assert c.interval_for(4, None) == math.inf
    assert Checkpoints(interval_s=600.0).interval_for(4, 1.0) == 600.0


@pytest.mark.parametrize(
    ("domains", "expected"),
    [
        pytest.param(["a"], 0.0, id="one-node"),
        pytest.param(["a", "a", "a"], 0.0, id="one-domain"),
        pytest.param(["a", "b"], 0.5, id="two-domains-evenly"),
        pytest.param(["a", "a", "a", "b"], 1 - (0.75**2 + 0.25**2), id="three-and-one"),
    ],
)
def test_crossing(domains, expected) -> None:
    assert crossing(domains) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("network", "labels", "expected"),
    [
        pytest.param(None, [{"rack": "a"}, {"rack": "b"}], 1.0, id="no-fabric-model"),
        pytest.param(Network("fat-tree", 2.0, 0.5), [{"rack": "a"}], 1.0, id="single-node"),
        pytest.param(
            Network("fat-tree", 2.0, 0.5),
            [{"rack": "a", "switch": "s"}, {"rack": "b", "switch": "s"}],
            1 + 0.5 * 0.5 * 1.0,
            id="fat-tree-across-leaves",
        ),
        pytest.param(
            Network("dragonfly+", 2.0, 0.5),
            [{"rack": "a", "switch": "s"}, {"rack": "b", "switch": "s"}],
            1.0,
            id="dragonfly-inside-one-group",
        ),
        pytest.param(
            Network("dragonfly+", 4.0, 0.5),
            [{"rack": "a", "switch": "s"}, {"rack": "b", "switch": "t"}],
            1 + 0.5 * 0.5 * 3.0,
            id="dragonfly-across-groups",
        ),
        pytest.param(
            Network("fat-tree", 1.0, 0.5), [{"rack": "a"}, {"rack": "b"}], 1.0, id="non-blocking"
        ),
    ],
)
def test_slowdown(network, labels, expected) -> None:
    assert slowdown(network, labels) == pytest.approx(expected)


def test_failure_presets() -> None:
    assert LLAMA3.node_mtbf_s / 86_400 == pytest.approx(54 * 16_384 / 8 / 419 / 1)
    trace = from_fault_trace("t", nodes=10, days=100, repairs_s=(3.0, 1.0, 2.0))
    assert trace.node_mtbf_s == pytest.approx(10 * 100 * 86_400 / 3)
    assert trace.repair_samples_s == (1.0, 2.0, 3.0)
    assert trace.repair_s(random.Random(1)) in (1.0, 2.0, 3.0)
    with pytest.raises(ValueError, match="no faults"):
        from_fault_trace("t", 10, 100, ())
    fitted = FailureModel("f", 1.0, repair_median_s=100.0, repair_mean_s=400.0)
    draws = sorted(fitted.repair_s(random.Random(i)) for i in range(2001))
    assert draws[1000] == pytest.approx(100.0, rel=0.15)  # the median holds


JOBS = [wl.TraceJob(f"t{i}", 3600.0 * i, 100.0 + i, float(1 + i % 3)) for i in range(48)]


def test_window_scale_and_replicate() -> None:
    day = wl.window(JOBS, 86_400.0, 1)
    assert [j.arrival_s for j in day] == [3600.0 * i for i in range(24)]
    assert [j.name for j in day][:2] == ["t24", "t25"]
    assert [j.arrival_s for j in wl.scale_arrivals(day, 2.0)][:3] == [0, 1800, 3600]
    copies = wl.replicate(day[:2], 3)
    assert [j.name for j in copies] == ["t24~0", "t24~1", "t24~2", "t25~0", "t25~1", "t25~2"]
    with pytest.raises(ValueError, match=">= 1"):
        wl.replicate(day, 0)
    with pytest.raises(ValueError, match="> 0"):
        wl.scale_arrivals(day, 0)


@pytest.mark.parametrize(
    ("gpus", "expected"),
    [
        pytest.param(0.5, (0.5, 1), id="a-share-of-one-gpu"),
        pytest.param(8, (8, 1), id="a-full-node"),
        pytest.param(12, (8.0, 2), id="rounded-up-to-whole-nodes"),
        pytest.param(64, (8.0, 8), id="a-gang"),
    ],
)
def test_shape(gpus, expected) -> None:
    assert wl.shape(gpus, 8) == expected


def test_classes_are_seeded_and_follow_the_rules() -> None:
    jobs = [*JOBS, wl.TraceJob("big", 0.0, 50.0, 64.0)]
    a, b = wl.classify(jobs, 3), wl.classify(jobs, 3)
    assert a == b
    assert a != wl.classify(jobs, 4)
    big = next(j for j in a if j.id == "big")
    assert (big.kind, big.criticality, big.nodes) == ("train", "critical", 8)
    assert {j.kind for j in a if j.duration_s <= 3600 and j.nodes == 1} <= {"inference", "batch"}


def test_synthetic_is_seeded_and_shaped() -> None:
    spec = wl.Synthetic(jobs_per_hour=100)
    jobs = wl.synthetic(spec, 2, seed=1)
    assert jobs == wl.synthetic(spec, 2, seed=1)
    assert 4000 < len(jobs) < 5600  # 4,800 expected
    assert all(0 <= j.arrival_s < 2 * 86_400 for j in jobs)
    assert sum(1 for j in jobs if j.gpus == 1) / len(jobs) == pytest.approx(0.8, abs=0.03)


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        pytest.param([], 50, 0.0, id="empty"),
        pytest.param([5.0], 99, 5.0, id="one"),
        pytest.param([1.0, 2.0, 3.0, 4.0], 50, 2.5, id="between-ranks"),
        pytest.param([float(i) for i in range(101)], 99, 99.0, id="p99"),
    ],
)
def test_percentile(values, q, expected) -> None:
    assert percentile(values, q) == pytest.approx(expected)


# --- a cloud pool's own head -------------------------------------------------------------------


def _fleet(head: bool):
    from meshctl.lifecycle.clusters import HeadOffer
    from meshctl.scheduler import Offer
    from meshctl.sim.core.fleet import CloudPool, Fleet

    offer = Offer("aws", "g6.xlarge", 1, 24.0, "L4", "nvidia", 4, 16, 10, 0.8, 0.3, True, 4)
    own = HeadOffer("aws", "m7i.large", 0.1) if head else None
    return Fleet({"aws": CloudPool("aws", idle_s=60.0, head=own)}, [offer], 1, 0.0)


@pytest.mark.parametrize(
    ("head", "types", "live"),
    [(True, ["m7i.large", "g6.xlarge", "g6.xlarge"], 2), (False, ["g6.xlarge"] * 2, 2)],
    ids=["its own head first, outside the pool's count", "the first worker is the head"],
)  # fmt: skip
def test_a_launch_that_starts_a_cluster_starts_its_head(head, types, live):
    from meshctl.lifecycle import Launch

    fleet = _fleet(head)
    made = fleet.launch(Launch("j", "aws", "g6.xlarge", 2, True, 0.6), "t", 0.0)
    assert [
        i.offer.node_type if i.offer else "m7i.large" for i in fleet.instances.values()
    ] == types
    assert len(made) == 2  # the job's workers: what joins as nodes
    assert fleet.live_per_pool["aws"] == live
    fleet.launch(Launch("k", "aws", "g6.xlarge", 1, True, 0.3), "t", 10.0)  # it runs: no head
    assert len(fleet.instances) == len(types) + 1


def test_the_own_head_is_billed_and_left_alone_once_its_workers_are_gone():
    from meshctl.lifecycle import Launch

    fleet = _fleet(head=True)
    [worker] = fleet.launch(Launch("j", "aws", "g6.xlarge", 1, True, 0.3), "t", 0.0)
    assert fleet.head_alone("aws") is None
    fleet.terminate(worker, 3600.0)  # taken back after an hour
    head = fleet.head_alone("aws")
    assert head is not None
    assert head.offer is None
    assert [t.instance_id for t in fleet.idle("aws", 3600.0, set())] == [head.id]  # idle since up
    by_pool, by_team = fleet.spend(3600.0)
    assert by_pool["aws"] == pytest.approx(0.3 + 0.1)  # the worker's hour and the head's
    assert by_team == {"t": pytest.approx(0.4)}
