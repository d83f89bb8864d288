"""``CycleContext.for_job``: the cycle's context for one job carries every field of the
cycle's but the job's own (usable pools, what unavailable pools tell, its runtime)."""

from __future__ import annotations

import dataclasses

import pytest

from meshctl.scheduler.framework import CycleContext, Rejection

pytestmark = pytest.mark.unit


def _cycle() -> CycleContext:
    return CycleContext(
        now_s=123.0,
        usable_pools=frozenset({"a"}),
        max_usd_per_gpu_hour=4.5,
        pool_wait_s={"a": 60.0},
        workload=((8.0, 32.0, frozenset()), 1.0),  # type: ignore[arg-type]
        unavailable={"b": Rejection("availability", "down")},
        egress_usd_per_gib={"a": {"aws": 0.09}},
        runtime_s=10.0,
    )


def test_every_field_but_the_jobs_own_is_the_cycles() -> None:
    base = _cycle()
    job = base.for_job(frozenset({"c"}), runtime_s=99.0)
    own = {"usable_pools", "unavailable", "runtime_s"}
    for f in dataclasses.fields(CycleContext):
        if f.name not in own:
            assert getattr(job, f.name) is getattr(base, f.name), f.name
    assert (job.usable_pools, job.runtime_s) == (frozenset({"c"}), 99.0)
    assert job.unavailable is base.unavailable  # kept unless given


def test_it_equals_replace() -> None:
    base, told = _cycle(), {"d": Rejection("availability", "no credentials")}
    assert base.for_job(frozenset({"c"}), told, 5.0) == dataclasses.replace(
        base, usable_pools=frozenset({"c"}), unavailable=told, runtime_s=5.0
    )
