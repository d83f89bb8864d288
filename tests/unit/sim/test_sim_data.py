"""The simulator's data model (``meshctl.sim.core.data``): stalls, reads, egress and hits computed
by hand, and the engine's GPU-seconds still adding up with a stall in them."""

from __future__ import annotations

from dataclasses import replace

import pytest

from meshctl.sim.core.data import DataModel, NodeCaches, SimData
from meshctl.sim.core.engine import simulate
from meshctl.sim.core.workload import SimJob
from tests.unit.sim.sim_helpers import config, job, mesh, node

pytestmark = pytest.mark.unit

D = SimData("team/model", 100.0)  # 100 GiB
MODEL = DataModel(cache_gib=250.0, central_gibps=1.0, peer_gibps=4.0)


def test_a_node_fetches_from_central_then_hits_and_its_peer_reads_from_it() -> None:
    c = NodeCaches(MODEL)
    assert c.start(D, "onprem", ["n0"], 1, 0.0) == 100.0  # 100 GiB at 1 GiB/s
    c.stop(D, ["n0"])
    assert c.start(D, "onprem", ["n1"], 1, 50.0) == 100.0  # n0's copy is not whole till 100
    assert c.start(D, "onprem", ["n2"], 1, 120.0) == 25.0  # from a peer, at 4 GiB/s
    assert c.start(D, "onprem", ["n0"], 1, 130.0) == 0.0  # a hit
    s = c.stats
    assert (s.central_gib, s.peer_gib, s.lookups, s.hits) == (200.0, 100.0, 4, 1)
    assert s.stall_gpu_s == 225.0


def test_a_gang_stalls_for_its_slowest_node() -> None:
    c = NodeCaches(MODEL)
    c.start(D, "onprem", ["n0"], 1, 0.0)
    assert c.start(D, "onprem", ["n0", "n1"], 2, 200.0) == 25.0  # n0 hits, n1 from n0
    assert c.stats.stall_gpu_s == 100.0 + 2 * 25.0


def test_a_copy_on_its_way_is_waited_for_not_fetched_twice() -> None:
    c = NodeCaches(MODEL)
    c.start(D, "onprem", ["n0"], 1, 0.0)
    assert c.start(D, "onprem", ["n0"], 1, 40.0) == 60.0
    assert c.stats.central_gib == 100.0


def test_eviction_is_least_recently_used_and_spares_what_a_job_reads() -> None:
    a, b, e = SimData("a", 100.0), SimData("b", 100.0), SimData("e", 100.0)
    c = NodeCaches(MODEL)  # room for two
    c.start(a, "onprem", ["n0"], 1, 0.0)  # a stays read
    c.start(b, "onprem", ["n0"], 1, 10.0)
    c.stop(b, ["n0"])
    c.start(e, "onprem", ["n0"], 1, 20.0)  # b goes, though a is older: a job reads a
    assert set(c.held["n0"]) == {"a", "e"}
    c.start(SimData("huge", 300.0), "onprem", ["n0"], 1, 30.0)  # never fits: not kept
    assert set(c.held["n0"]) == {"a", "e"}


def test_a_cloud_node_pays_egress_and_a_lost_node_loses_its_cache() -> None:
    c = NodeCaches(replace(MODEL, egress_usd_per_gib={"cloud": 0.09}))
    c.start(D, "cloud", ["i-1"], 1, 0.0)
    assert (c.stats.egress_gib, c.stats.egress_usd) == (100.0, pytest.approx(9.0))
    c.start(D, "onprem", ["n0"], 1, 0.0)  # on-prem: no egress
    assert c.stats.egress_gib == 100.0
    c.lose("onprem", "n0")
    assert c.start(D, "onprem", ["n1"], 1, 500.0) == 100.0  # no peer left: central


def test_without_a_cache_every_attempt_reads_from_central() -> None:
    c = NodeCaches(replace(MODEL, cache=False))
    for t in (0.0, 200.0):
        assert c.start(D, "onprem", ["n0"], 1, t) == 100.0
    assert (c.stats.central_gib, c.stats.hits) == (200.0, 0)


def _with(j: SimJob) -> SimJob:
    return replace(j, data=D)


@pytest.mark.parametrize(
    ("cache", "ends", "stall_gpu_s", "central", "peer", "hits"),
    [
        (True, {"a": (0, 200), "b": (150, 275), "c": (300, 400)}, 125.0, 100.0, 100.0, 1),
        (False, {"a": (0, 200), "b": (150, 350), "c": (300, 500)}, 300.0, 300.0, 0.0, 0),
    ],
    ids=["a cache: central once, a peer once, a hit", "no cache: central every time"],
)
def test_the_engine_adds_each_attempts_stall_and_keeps_gpu_seconds_adding_up(
    cache: bool,
    ends: dict[str, tuple[float, float]],
    stall_gpu_s: float,
    central: float,
    peer: float,
    hits: int,
) -> None:
    """a (100 s of work) stalls 100 s fetching from central on n0; b comes while a runs and
    goes to n1, which reads n0's whole copy (25 s); c comes when both are free and finds it
    on its node."""
    jobs = [_with(job("a", 0, 100)), _with(job("b", 150, 100)), _with(job("c", 300, 100))]
    result = simulate(mesh(node("n0"), node("n1")), jobs, config(data=replace(MODEL, cache=cache)))
    got = {r.job.id: (r.first_start_s, r.end_s) for r in result.jobs}
    assert got == ends
    assert result.data is not None
    d = result.data
    assert (d.stall_gpu_s, d.central_gib, d.peer_gib, d.hits) == (stall_gpu_s, central, peer, hits)
    for r in result.jobs:
        parts = r.useful_gpu_s + r.slowdown_gpu_s + r.checkpoint_gpu_s + r.restart_gpu_s
        assert r.held_gpu_s == pytest.approx(parts + r.data_stall_gpu_s + r.lost_gpu_s)
    assert sum(r.data_stall_gpu_s for r in result.jobs) == pytest.approx(stall_gpu_s)


def test_the_scheduler_sees_the_simulated_caches_a_job_goes_where_its_data_is() -> None:
    """n0 is the cheaper node. x (no data) takes it at 0, so a (data) runs on n1 and leaves
    its copy there (from 1 s); c comes when both are free and goes to n1 (a hit: no stall): locality
    (weight 0.5) outweighs n0's lower price (cost score 1/11 higher, weight 1). Without the
    caches in the scheduler's view c would go to n0 (a peer fetch: 25 s)."""
    n1 = replace(node("n1"), usd_per_gpu_hour=1.1)
    jobs = [job("x", 0, 50), _with(job("a", 1, 100)), _with(job("c", 300, 100))]
    result = simulate(mesh(node("n0"), n1), jobs, config(data=MODEL))
    stalls = {r.job.id: r.data_stall_gpu_s for r in result.jobs}
    assert stalls == {"x": 0.0, "a": 100.0, "c": 0.0}
    assert result.data is not None
    assert result.data.hits == 1


def test_a_job_file_carries_its_dataset_for_the_scheduler() -> None:
    from meshctl.model import Job
    from meshctl.scheduler.request import Request
    from meshctl.sim.core.workload import job_document, with_data

    [j] = with_data([job("a", 0, 100, gpus=4)], gib_per_gpu=50.0, home="aws")
    assert j.data is not None
    assert j.data.key.startswith("s3://")
    request = Request.of(Job.model_validate(job_document(j, 4, 32, "switch")))
    assert [(d.location, d.size_gib, d.home) for d in request.data] == [(j.data.key, 200.0, "aws")]
