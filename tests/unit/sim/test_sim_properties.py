"""Invariants of the engine over random small workloads, failures and fabrics (Hypothesis):
GPU-seconds are conserved, every job's work is done exactly once, the same seed gives the
same run."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sim_helpers import job, mesh, node

from meshctl.sim.core.engine import SimConfig, simulate
from meshctl.sim.core.failures import Checkpoints, FailureModel
from meshctl.sim.core.network import Network
from meshctl.sim.core.report import build_report

pytestmark = pytest.mark.unit

MESH = mesh(
    node("n1", gpus=2, rack="r1"),
    node("n2", gpus=2, rack="r1"),
    node("n3", gpus=2, rack="r2"),
    network=Network("fat-tree", oversubscription=2.0, comm_fraction=0.4),
)

jobs_st = st.lists(
    st.tuples(
        st.floats(0, 5_000),  # arrival
        st.floats(1, 3_000),  # duration
        st.sampled_from([(0.5, 1), (1, 1), (2, 1), (2, 2), (2, 3)]),  # (GPUs per node, nodes)
    ),
    min_size=1,
    max_size=25,
)
failures_st = st.lists(
    st.tuples(st.floats(0, 8_000), st.sampled_from(["n1", "n2", "n3"]), st.floats(1, 2_000)),
    max_size=6,
)
checkpoints_st = st.builds(
    Checkpoints,
    st.one_of(st.none(), st.floats(50, 1_000)),
    st.floats(0, 30),
    st.floats(0, 120),
)


def _jobs(drawn, max_restarts: int = 10_000):
    """Jobs requeued after however many failures (the work-once property needs every job
    to finish; max_restarts has a property of its own)."""
    return [
        replace(job(f"j{i:02d}", a, d, gpus=g, nodes=n), max_restarts=max_restarts)
        for i, (a, d, (g, n)) in enumerate(drawn)
    ]


@settings(max_examples=60, deadline=None)
@given(jobs_st, failures_st, checkpoints_st, st.sampled_from([0.0, 30.0]))
def test_gpu_seconds_are_conserved_and_every_job_does_its_work_once(
    drawn, failures, checkpoints, cycle_s
) -> None:
    config = SimConfig(
        cycle_s=cycle_s,
        checkpoints=checkpoints,
        injected_failures=tuple(failures),
        failures=FailureModel("test", node_mtbf_s=5_000.0, repair_mean_s=600, repair_median_s=300),
    )
    result = simulate(MESH, _jobs(drawn), config)
    for r in result.jobs:
        assert r.end_s is not None, f"{r.job.id} never finished"
        parts = r.useful_gpu_s + r.slowdown_gpu_s + r.checkpoint_gpu_s + r.restart_gpu_s
        assert r.held_gpu_s == pytest.approx(parts + r.lost_gpu_s, rel=1e-9, abs=1e-6)
        assert r.useful_gpu_s == pytest.approx(r.job.work_gpu_s, rel=1e-9, abs=1e-6)
        assert r.lost_gpu_s >= -1e-9
    busy = result.totals.onprem_busy_gpu_s
    assert busy == pytest.approx(sum(r.held_gpu_s for r in result.jobs), rel=1e-9, abs=1e-6)


@settings(max_examples=40, deadline=None)
@given(jobs_st, failures_st)
def test_with_no_overheads_gpu_seconds_used_are_the_work_plus_the_work_lost(
    drawn, failures
) -> None:
    flat = mesh(node("n1", gpus=2), node("n2", gpus=2), node("n3", gpus=2))
    config = SimConfig(
        checkpoints=Checkpoints(interval_s=200.0, cost_s=0.0, restart_s=0.0),
        injected_failures=tuple(failures),
    )
    result = simulate(flat, _jobs(drawn), config)
    used = result.totals.onprem_busy_gpu_s
    work = sum(r.job.work_gpu_s for r in result.jobs)
    lost = sum(r.lost_gpu_s for r in result.jobs)
    assert used == pytest.approx(work + lost, rel=1e-9, abs=1e-6)


def _report(seed: int) -> str:
    jobs = [job(f"j{i}", i * 37.0, 500.0 + 13 * i, gpus=1 + i % 2) for i in range(40)]
    config = SimConfig(
        seed=seed,
        cycle_s=30.0,
        failures=FailureModel("test", node_mtbf_s=3_000.0, repair_mean_s=900, repair_median_s=300),
        checkpoints=Checkpoints(None, 20.0, 60.0),
    )
    return json.dumps(build_report(simulate(MESH, jobs, config), {"seed": seed}), sort_keys=True)


def test_the_same_seed_gives_a_byte_identical_report_and_another_seed_does_not() -> None:
    assert _report(7) == _report(7)
    assert _report(7) != _report(8)


@settings(max_examples=40, deadline=None)
@given(jobs_st, failures_st, st.integers(0, 2))
def test_a_job_fails_for_good_exactly_when_its_failures_pass_max_restarts(
    drawn, failures, max_restarts
) -> None:
    config = SimConfig(
        checkpoints=Checkpoints(interval_s=200.0, cost_s=0.0, restart_s=0.0),
        injected_failures=tuple(failures),
        failures=FailureModel("test", node_mtbf_s=4_000.0, repair_mean_s=600, repair_median_s=300),
    )
    result = simulate(MESH, _jobs(drawn, max_restarts), config)
    for r in result.jobs:
        if r.failed_reason is not None:
            assert r.end_s is None
            assert r.failures == max_restarts + 1, r.failed_reason
            assert r.failed_reason.endswith(f"max_restarts {max_restarts}")
        else:
            assert r.end_s is not None
            assert r.failures <= max_restarts
        parts = r.useful_gpu_s + r.slowdown_gpu_s + r.checkpoint_gpu_s + r.restart_gpu_s
        assert r.held_gpu_s == pytest.approx(parts + r.lost_gpu_s, rel=1e-9, abs=1e-6)
