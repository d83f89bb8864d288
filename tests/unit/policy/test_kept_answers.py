"""Answers kept between bindings (``KeptAnswers``) never change a verdict: after any run of
meshes (pools relabelled, grown, shrunk, moved to another provider, their free GPUs
changing), a binding that reuses the kept answers decides every job as a fresh binding does:
selectors that read only the pool, those that read the mesh too, and operands that read only
the job (several job files, each decided at every binding)."""

from __future__ import annotations

import pytest
from helpers import MESH, NOW, compiled, job, pool
from hypothesis import given, settings
from hypothesis import strategies as st

from meshctl.policy import MeshSnapshot, bind
from meshctl.policy.evaluate import KeptAnswers

pytestmark = pytest.mark.unit

POLICIES = compiled(
    """
    pools:
      - name: critical-stays-strategic
        when: job.criticality == "critical"
        allow: '!pool.cloud && has(pool.labels.tier) && pool.labels.tier == "strategic"'
      - name: no-small-pools
        deny: pool.gpus < 4
      - name: room-left
        when: job.criticality == "standard"
        allow: mesh.pools[pool.name].free_gpus > 2.0
    burst:
      - name: spill
        when: job.criticality != "critical"
        to: pool.cloud && pool.labels.tier == "burst"
    """
)
JOBS = [job(criticality=c) for c in ("critical", "standard", "best-effort")]
NAMES = ("onprem", "aws", "gcp")


@st.composite
def meshes(draw: st.DrawFn) -> MeshSnapshot:
    """Each pool with a tier label or none, some GPUs and free GPUs, on-prem or a cloud."""
    pools = []
    for name in NAMES:
        tier = draw(st.sampled_from([None, "strategic", "burst"]))
        pools.append(
            pool(
                name,
                draw(st.sampled_from(["local", "aws", "gcp"])),
                labels={} if tier is None else {"tier": tier},
                gpus=draw(st.integers(0, 16)),
                free_gpus=float(draw(st.integers(0, 16))),
            )
        )
    return MeshSnapshot(tuple(pools))


@settings(max_examples=120, deadline=None)
@given(st.lists(meshes(), min_size=1, max_size=8))
def test_kept_answers_decide_as_a_fresh_binding(runs: list[MeshSnapshot]) -> None:
    kept = KeptAnswers()
    for mesh in runs:
        reused = bind(POLICIES, mesh, NOW, kept)
        for the_job in JOBS:  # the reference: a binding of its own for each job
            a, b = reused.evaluate(the_job), bind(POLICIES, mesh, NOW).evaluate(the_job)
            assert (a.pools, a.burst, a.errors) == (b.pools, b.burst, b.errors)
            assert [row[:6] for row in a.trace_rows] == [row[:6] for row in b.trace_rows]


def test_a_pool_that_changed_is_asked_again() -> None:
    kept = KeptAnswers()
    before = bind(POLICIES, MESH, NOW, kept).evaluate(JOBS[2])
    relabelled = MeshSnapshot(tuple(pool(p.name, p.provider) for p in MESH.pools))
    after = bind(POLICIES, relabelled, NOW, kept).evaluate(JOBS[2])
    assert before.burst.allowed
    assert not after.burst.allowed  # no pool is tier: burst any more
