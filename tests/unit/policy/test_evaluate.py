"""Evaluation: how rules decide pools, burst, priority and preemption, and never crash."""

from __future__ import annotations

import dataclasses

import pytest
from helpers import MESH, NOW, compiled, job, pool, verdict
from hypothesis import given, settings
from hypothesis import strategies as st

from meshctl.policy import MeshSnapshot, VictimFacts, bind

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("spec", "the_job", "eligible"),
    [
        pytest.param("pools: []", job(), ["onprem", "aws", "gcp"], id="no-rules-allow-all"),
        pytest.param(
            "pools: [{name: d, deny: pool.cloud}, {name: a, allow: 'true'}]",
            job(),
            ["onprem"],
            id="deny-wins-over-allow",
        ),
        pytest.param(
            "pools: [{name: a, when: 'job.criticality == \"critical\"', allow: '!pool.cloud'}]",
            job(criticality="critical"),
            ["onprem"],
            id="allow-restricts-the-jobs-it-selects",
        ),
        pytest.param(
            "pools: [{name: a, when: 'job.criticality == \"critical\"', allow: '!pool.cloud'}]",
            job(),
            ["onprem", "aws", "gcp"],
            id="allow-ignores-other-jobs",
        ),
        pytest.param(
            "pools: [{name: a, allow: 'pool.provider == \"aws\"'},"
            " {name: b, allow: 'pool.region.startsWith(\"europe-\")'}]",
            job(),
            ["aws", "gcp"],
            id="any-allow-admits",
        ),
        pytest.param(
            "pools: [{name: d, deny: 'pool.cloud && job.resources.gpus > 4.0'}]",
            job(resources={"gpus": 8}),
            ["onprem"],
            id="selector-over-pool-and-job",
        ),
    ],
)
def test_eligibility(spec, the_job, eligible):
    assert list(verdict(compiled(spec), the_job).eligible_pools) == eligible


def test_a_failing_deny_selector_denies_and_is_explained():
    policies = compiled("pools: [{name: d, deny: 'mesh.pools[\"nowhere\"].free_gpus > 0.0'}]")
    result = verdict(policies, job())
    assert result.eligible_pools == ()  # failing closed: see test_fail_closed.py
    (error,) = result.errors
    assert (error.rule, error.part, error.pools) == ("d", "deny", ("onprem", "aws", "gcp"))
    assert error.message.startswith("no key 'nowhere' in mesh.pools")


def test_a_non_boolean_result_is_an_error_not_a_match():
    # the checker rejects `pool.gpus`; a dyn value is known only when it runs
    result = verdict(compiled("pools: [{name: d, allow: 'dyn(pool.gpus)'}]"), job())
    assert result.eligible_pools == ()
    assert result.errors[0].message == "expected a boolean, got int 8"


BURST = """\
burst:
  - {name: cheap, when: 'job.criticality != "critical"', to: pool.cloud, spot: true,
     max_usd_per_hour: 30}
  - {name: aws-only, to: 'pool.provider == "aws"', spot: false, max_usd_per_hour: 50}
"""


def test_several_burst_rules_on_one_pool_take_the_most_restrictive_settings():
    burst = verdict(compiled(BURST), job(limits={"max_usd_per_hour": 40})).burst
    aws, gcp = burst.target("aws"), burst.target("gcp")
    assert aws is not None
    assert gcp is not None
    # aws: named by both rules: spot only if both allow (no), min(30, 50, job's 40) = 30
    assert (aws.spot, aws.max_usd_per_hour, aws.rules) == (False, 30, ("cheap", "aws-only"))
    # gcp: named by `cheap` only: spot yes, min(30, 40) = 30
    assert (gcp.spot, gcp.max_usd_per_hour) == (True, 30)


def test_cloud_pools_are_usable_only_as_burst_targets():
    result = verdict(compiled(BURST), job(criticality="critical"))
    assert result.usable_pools == ("onprem", "aws")


def test_burst_to_a_denied_pool_is_blocked_with_the_reason():
    policies = compiled(BURST, "pools: [{name: no-aws, deny: 'pool.provider == \"aws\"'}]")
    burst = verdict(policies, job()).burst
    assert [t.pool for t in burst.targets] == ["gcp"]
    assert burst.blocked == (("aws", "not eligible: denied by no-aws"),)


PRIORITY = """\
priority_classes: [{name: prod, value: 100}, {name: low, value: 1}]
default_priority_class: {inference: prod, batch: low}
preemption:
  - {name: serve-first, when: 'job.kind == "inference"', victims: 'victim.kind == "batch"',
     grace_s: 1m, min_runtime_s: 5m}
"""


@pytest.mark.parametrize(
    ("the_job", "klass", "value", "problem"),
    [
        pytest.param(job(kind="inference"), "prod", 100, None, id="kind-default"),
        pytest.param(job(kind="batch", priority_class="prod"), "prod", 100, None, id="named"),
        pytest.param(job(kind="train"), None, 0, None, id="no-class"),
        pytest.param(
            job(kind="batch", priority_class="gold"),
            "gold",
            0,
            "priority class 'gold' is not defined (defined: low, prod)",
            id="undefined",
        ),
    ],
)
def test_priority(the_job, klass, value, problem):
    result = verdict(compiled(PRIORITY), the_job)
    assert (result.priority_class, result.priority, result.priority_problem) == (
        klass,
        value,
        problem,
    )


@pytest.mark.parametrize(
    ("victim_kind", "runtime_s", "allowed", "reason"),
    [
        pytest.param("batch", 600.0, True, "allowed by serve-first", id="allowed"),
        pytest.param("batch", 60.0, False, "victim ran 60 s < 300 s", id="too-fresh"),
        pytest.param(
            "inference", 600.0, False, "victim priority 100 >= preemptor's 100", id="equal-priority"
        ),
    ],
)
def test_may_preempt(victim_kind, runtime_s, allowed, reason):
    bound = bind(compiled(PRIORITY), MESH, NOW)
    victim_job = job(kind=victim_kind)
    _, priority, _ = bound.priority_of(victim_job)
    decided = bound.may_preempt(
        job(kind="inference"), VictimFacts(victim_job, priority, "onprem", runtime_s, 0.0)
    )
    assert (decided.allowed, decided.reason) == (allowed, reason)


def test_pool_only_selectors_are_evaluated_once_per_pool_per_binding():
    policies = compiled(
        "pools: [{name: d, deny: pool.cloud},"
        " {name: e, deny: 'pool.cloud && job.kind == \"train\"'}]"
    )
    bound = bind(policies, MESH, NOW)
    bound.evaluate(job())  # asked when first needed, then kept for every other job
    pool_only, mixed = (r.selector for r in policies.pool_rules)
    cached = {expr_id for expr_id, _ in bound._pool_only}
    assert id(pool_only) in cached
    assert id(mixed) not in cached


# --- invariants ------------------------------------------------------------------------------

DENY = [
    "pool.cloud",
    "!pool.cloud",
    'pool.provider == "aws"',
    'pool.labels.tier == "burst"',
    'job.kind == "train" && pool.cloud',
    "false",
]
WHEN = [
    "true",
    'job.kind == "batch"',
    'job.criticality == "critical"',
    "job.resources.gpus > 2.0",
    'mesh.pools["onprem"].expected_wait_s > 600.0',
]


@st.composite
def rule_sets(draw: st.DrawFn) -> str:
    rules = []
    for i in range(draw(st.integers(0, 5))):
        effect = draw(st.sampled_from(["allow", "deny"]))
        rules.append(
            f"{{name: r{i}, when: '{draw(st.sampled_from(WHEN))}',"
            f" {effect}: '{draw(st.sampled_from(DENY))}'}}"
        )
    burst = [
        f"{{name: b{i}, when: '{draw(st.sampled_from(WHEN))}',"
        f" to: '{draw(st.sampled_from(DENY))}'}}"
        for i in range(draw(st.integers(0, 2)))
    ]
    return f"pools: [{', '.join(rules)}]\nburst: [{', '.join(burst)}]"


@settings(max_examples=60, deadline=None)
@given(
    spec=rule_sets(),
    kind=st.sampled_from(["batch", "train", "inference"]),
    gpus=st.sampled_from([1, 4, 8]),
    wait=st.sampled_from([0.0, 900.0]),
)
def test_invariants_of_every_verdict(spec, kind, gpus, wait):
    pools = tuple(dataclasses.replace(p, expected_wait_s=wait) for p in MESH.pools)
    result = verdict(
        compiled(spec), job(kind=kind, resources={"gpus": gpus}), MeshSnapshot(pools, MESH.teams)
    )
    denied_by = {t.pool for t in result.trace if t.part == "deny" and t.outcome == "matched"}
    assert denied_by.isdisjoint(result.eligible_pools)  # a matching deny always wins
    assert set(result.usable_pools) <= set(result.eligible_pools)
    targets = {t.pool for t in result.burst.targets}
    assert targets <= set(result.eligible_pools)
    for p in result.pools:  # a cloud pool is usable exactly when it is a burst target
        if p.pool != "onprem":
            assert p.usable == (p.pool in targets)
    assert not result.errors


def test_snapshot_pools_without_state_are_idle():
    assert pool("x").free_gpus == 8.0


ORDERED = """\
priority_classes: [{name: serve, value: 100}, {name: train, value: 1}]
default_priority_class: {inference: serve, train: train}
preemption:
  - {name: slow, victims: 'victim.priority_class == "train"', grace_s: 2m, min_runtime_s: 10m}
  - {name: quick, victims: 'victim.criticality == "best-effort"', grace_s: 30s}
"""


@pytest.mark.parametrize("reverse", [False, True], ids=["as-written", "reversed"])
def test_preemption_does_not_depend_on_rule_order(reverse):
    # the victim ran 5 minutes: `slow` (by the kind's default class) refuses it, `quick` allows
    spec = ORDERED
    if reverse:
        head, rules = spec.split("preemption:\n")
        spec = head + "preemption:\n" + "\n".join(reversed(rules.rstrip().splitlines())) + "\n"
    bound = bind(compiled(spec), MESH, NOW)
    victim_job = job(kind="train", criticality="best-effort")
    decided = bound.may_preempt(
        job(kind="inference"), VictimFacts(victim_job, 1, "onprem", 300.0, 0.0)
    )
    assert (decided.allowed, decided.rule, decided.grace_s) == (True, "quick", 30.0)


def test_a_victims_class_defaults_by_its_kind():
    bound = bind(compiled(ORDERED), MESH, NOW)
    decided = bound.may_preempt(
        job(kind="inference"), VictimFacts(job(kind="train"), 1, "onprem", 3600.0, 0.0)
    )
    assert (decided.allowed, decided.rule) == (True, "slow")


RUNTIME_RULE = """\
priority_classes: [{name: prod, value: 100}, {name: low, value: 1}]
default_priority_class: {inference: prod, batch: low}
preemption:
  - {name: stale, victims: 'victim.kind == "batch" && victim.since_checkpoint_s > 100.0'}
  - {name: any-batch, when: 'job.team == "serve"', victims: 'victim.kind == "batch"'}
"""


def test_victims_of_one_job_file_are_asked_again_when_the_rule_reads_their_runtime():
    # One job file, many victims: `stale` reads since_checkpoint_s, so it is evaluated for
    # each victim, never answered from the first; `any-batch` reads only the job file.
    bound = bind(compiled(RUNTIME_RULE), MESH, NOW)
    batch, preemptor = job(kind="batch"), job(kind="inference")
    fresh = VictimFacts(batch, 1, "onprem", 600.0, 50.0)
    stale = VictimFacts(batch, 1, "onprem", 600.0, 500.0)
    assert not bound.may_preempt(preemptor, fresh).allowed
    assert bound.may_preempt(preemptor, stale).allowed
    assert not bound.may_preempt(preemptor, fresh).allowed
    server = job(kind="inference", team="serve")
    assert bound.may_preempt(server, fresh).rule == "any-batch"
    assert bound.may_preempt(server, stale).allowed
    assert not bound.may_preempt(preemptor, fresh).allowed  # the job map follows the preemptor
