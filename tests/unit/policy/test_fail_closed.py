"""A rule that fails at run time never widens what a job may use: the engine fails closed."""

from __future__ import annotations

import dataclasses

import pytest
from helpers import MESH, NOW, compiled, job, verdict

from meshctl.policy import MeshSnapshot, VictimFacts, bind
from meshctl.policy.verdict import RuleError
from meshctl.scheduler import (
    FromPolicyEngine,
    Node,
    Offer,
    Pending,
    PoolInfo,
    Provision,
    Request,
    Running,
    Snapshot,
    schedule,
)
from meshctl.scheduler.snapshot import Allocation

pytestmark = pytest.mark.unit

# The rule of the bug report: a job without the label must not count as "public".
SENSITIVE = """\
pools:
  - name: sensitive-onprem
    when: job.labels.sensitivity != "public"
    deny: pool.cloud
burst:
  - name: spill
    when: mesh.pools["onprem"].expected_wait_s > 600.0
    to: pool.cloud
    spot: true
"""
BUSY = MeshSnapshot(
    tuple(
        dataclasses.replace(p, expected_wait_s=1800.0, free_gpus=0.0 if not p.cloud else 8.0)
        for p in MESH.pools
    ),
    MESH.teams,
)


def labelled(sensitivity: str | None = None, **spec: object):
    the_job = job(criticality="best-effort", resources={"gpus": 1}, **spec)
    if sensitivity is None:
        return the_job
    meta = the_job.metadata.model_copy(update={"labels": {"sensitivity": sensitivity}})
    return the_job.model_copy(update={"metadata": meta})


def test_an_unlabelled_job_stays_on_prem_when_the_sensitivity_rule_fails():
    result = verdict(compiled(SENSITIVE), labelled(), BUSY)
    assert result.eligible_pools == ("onprem",)
    assert result.usable_pools == ("onprem",)
    assert result.burst.targets == ()
    aws = next(p for p in result.pools if p.pool == "aws")
    assert aws.reason == (
        "denied: rule sensitive-onprem could not be evaluated (no key 'sensitivity' in"
        " job.labels); failing closed"
    )
    (error,) = result.errors
    assert error == RuleError(
        "pools",
        "sensitive-onprem",
        "p0.yaml",
        7,
        "when",
        (),
        "no key 'sensitivity' in job.labels; test for it with has(job.labels.sensitivity) or"
        ' "sensitivity" in job.labels',
        "the deny applies to the pools it picks",
    )
    when = next(t for t in result.trace if t.rule == "sensitive-onprem" and t.part == "when")
    assert when.outcome == "error"


def test_a_verdicts_errors_are_worked_out_once_however_often_they_are_read():
    # the controller reads them for every queued job every cycle; each working-out re-runs CEL
    result = verdict(compiled(SENSITIVE), labelled(), BUSY)
    first = result.errors
    assert len(first) == 1
    assert result.errors is first


def test_a_public_job_still_bursts_under_the_same_rule():
    # the other side of the test above: the rule does not simply block everything
    result = verdict(compiled(SENSITIVE), labelled("public"), BUSY)
    assert [t.pool for t in result.burst.targets] == ["aws", "gcp"]
    assert result.errors == ()


def _saturated(pending: Pending) -> Snapshot:
    gpus = (1.0,) * 8
    on_prem = Node(
        "n0", "onprem", gpus, 80, "H100", "nvidia", 64, 64, 512, 512, 400, 400,
        {"rack": "r0", "switch": "s0"}, "ready", frozenset(), 1.0,
    )  # fmt: skip
    full = dataclasses.replace(on_prem, gpu_free=(0.0,) * 8)
    busy = Running(
        "busy", "t", 0, "onprem", (Allocation("n0", tuple(range(8)), 1.0, 1, 4, 0.0),),
        Request(8, 0, frozenset(), None, 1, 4, 0, 1, None, False, frozenset()), 0.0, None, None,
    )  # fmt: skip
    offer = Offer("aws", "g6.xlarge", 1, 24, "L4", "nvidia", 4, 16, 25, 0.8, 0.35, True, 4)
    pools = (PoolInfo("onprem", False, 1800.0), PoolInfo("aws", True), PoolInfo("gcp", True))
    return Snapshot(1000.0, (full,), pools, (busy,), (pending,), (offer,))


@pytest.mark.parametrize(
    ("sensitivity", "bursts"),
    [
        pytest.param(None, False, id="unlabelled-waits-on-prem"),
        pytest.param("public", True, id="public-bursts"),
    ],
)
def test_the_scheduler_keeps_an_unlabelled_job_off_the_cloud(sensitivity, bursts):
    the_job = labelled(sensitivity)
    engine = FromPolicyEngine(bind(compiled(SENSITIVE), BUSY, NOW), {"j": the_job}, {})
    verdict_ = engine.verdict("j")
    assert verdict_ is not None
    pending = Pending("j", "t", verdict_.priority, Request.of(the_job), 0.0, None)
    plan = schedule(_saturated(pending), engine)
    provisions = [a for a in plan.actions if isinstance(a, Provision)]
    assert bool(provisions) == bursts
    if not bursts:
        assert plan.decisions["j"].status == "pending"
        assert not any(getattr(a, "job_id", None) == "j" for a in plan.actions)


PRIORITY = """\
priority_classes: [{name: high, value: 10}, {name: low, value: 1}]
default_priority_class: {inference: high, batch: low}
"""


# Each rule reads a label the job does not have (a run-time failure), or a pool label only
# some pools have. MESH: onprem (strategic, no zone), aws (zone a), gcp (no zone).
ZONED = MeshSnapshot(
    tuple(
        dataclasses.replace(p, labels={**p.labels, "zone": "a"}) if p.name == "aws" else p
        for p in BUSY.pools
    ),
    MESH.teams,
)


@pytest.mark.parametrize(
    ("spec", "eligible", "targets", "part", "pools"),
    [
        pytest.param(
            "pools: [{name: r, when: 'job.labels.x == \"y\"', deny: pool.cloud}]",
            ["onprem"],
            [],
            "when",
            [],
            id="deny-when-fails-the-deny-applies",
        ),
        pytest.param(
            "pools: [{name: r, deny: 'pool.labels.zone != \"a\"'}]",
            ["aws"],
            [],
            "deny",
            ["onprem", "gcp"],
            id="deny-selector-fails-the-pool-is-denied",
        ),
        pytest.param(
            "pools: [{name: r, when: 'job.labels.x == \"y\"', allow: '!pool.cloud'}]",
            ["onprem"],
            [],
            "when",
            [],
            id="allow-when-fails-the-allow-restricts",
        ),
        pytest.param(
            "pools: [{name: r, allow: 'pool.labels.zone == \"a\"'}]",
            ["aws"],
            [],
            "allow",
            ["onprem", "gcp"],
            id="allow-selector-fails-the-pool-is-not-picked",
        ),
        pytest.param(
            "burst: [{name: r, when: 'job.labels.x == \"y\"', to: pool.cloud}]",
            ["onprem", "aws", "gcp"],
            [],
            "when",
            [],
            id="burst-when-fails-no-burst",
        ),
        pytest.param(
            "burst: [{name: r, to: 'pool.cloud && pool.labels.zone == \"a\"'}]",
            ["onprem", "aws", "gcp"],
            ["aws"],
            "to",
            ["gcp"],
            id="burst-target-fails-not-a-target",
        ),
    ],
)
def test_a_failing_pool_or_burst_rule_never_widens_what_a_job_may_use(
    spec, eligible, targets, part, pools
):
    result = verdict(compiled(spec), labelled(), ZONED)
    assert list(result.eligible_pools) == eligible
    assert [t.pool for t in result.burst.targets] == targets
    (error,) = result.errors
    assert (error.rule, error.part, list(error.pools)) == ("r", part, pools)


@pytest.mark.parametrize(
    ("rule", "rights", "allowed", "part"),
    [
        pytest.param(
            "{name: r, when: 'job.labels.x == \"y\"', victims: 'true'}",
            False,
            False,
            "when",
            id="preemption-when-fails-no-right",
        ),
        pytest.param(
            "{name: r, victims: 'victim.labels.x == \"y\"'}",
            True,
            False,
            "victims",
            id="victims-fails-the-victim-is-not-taken",
        ),
    ],
)
def test_a_failing_preemption_rule_gives_no_right(rule, rights, allowed, part):
    bound = bind(compiled(PRIORITY + f"preemption: [{rule}]"), MESH, NOW)
    preemptor = job(kind="inference")
    assert bound.evaluate(preemptor).preemption.allowed is rights
    victim = VictimFacts(job(kind="batch"), 1, "onprem", 3600.0, 0.0)
    decided = bound.may_preempt(preemptor, victim)
    assert decided.allowed is allowed
    errors = bound.evaluate(preemptor).errors if part == "when" else decided.errors
    assert [(e.rule, e.part) for e in errors] == [("r", part)]


def test_a_failure_absorbed_by_a_false_operand_is_no_failure():
    # CEL's &&: `false && error` is false; the engine splits the operands but agrees
    spec = (
        "pools: [{name: r, when: 'job.kind == \"train\" && job.labels.x == \"y\"', deny: 'true'}]"
    )
    result = verdict(compiled(spec), labelled())
    assert result.eligible_pools == ("onprem", "aws", "gcp")
    assert result.errors == ()


def test_a_failing_mesh_operand_is_a_failure_unless_a_job_operand_is_false():
    # the mesh operand runs once at bind and fails (no pool "nowhere"); the job's decides
    spec = (
        'pools: [{name: r, when: \'mesh.pools["nowhere"].free_gpus > 0.0 &&'
        " job.kind == \"train\"', deny: 'true'}]"
    )
    policies = compiled(spec)
    assert verdict(policies, job(kind="batch")).eligible_pools == ("onprem", "aws", "gcp")
    failing = verdict(policies, job(kind="train"))
    assert failing.eligible_pools == ()
    assert [e.part for e in failing.errors] == ["when"]
