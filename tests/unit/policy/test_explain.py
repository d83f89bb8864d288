"""`explain` names the operand that decided, in source order, and deciding does not pay for it."""

from __future__ import annotations

import dataclasses

import pytest
from conftest import ROOT
from helpers import MESH, NOW, compiled, job, verdict

from meshctl.files.policies import read_policy_files
from meshctl.policy import MeshSnapshot, bind, compile_policies
from meshctl.policy import evaluate as evaluate_module

pytestmark = pytest.mark.unit


def busy(wait_s: float) -> MeshSnapshot:
    return MeshSnapshot(
        tuple(dataclasses.replace(p, expected_wait_s=wait_s) for p in MESH.pools), MESH.teams
    )


def detail(result, rule: str, part: str = "when", pool: str | None = None) -> str:
    return next(t.detail for t in result.trace if (t.rule, t.part, t.pool) == (rule, part, pool))


@pytest.mark.parametrize("wait_s", [0.0, 3600.0], ids=["mesh-operand-false", "mesh-operand-true"])
def test_the_shipped_burst_rule_blames_the_jobs_criticality_not_the_mesh(wait_s):
    # `job.criticality == "standard" && mesh.pools.filter(...).all(...)`: bind runs the mesh
    # operand first, but for a best-effort job the first operand is what is false
    policies = compile_policies(read_policy_files([ROOT / "policies"]).policies)
    onprem = dataclasses.replace(MESH.pools[0], name="onprem", expected_wait_s=wait_s)
    mesh = MeshSnapshot((onprem, *MESH.pools[1:]), MESH.teams)
    result = bind(policies, mesh, NOW).evaluate(job(criticality="best-effort"))
    assert detail(result, "standard-to-on-demand") == 'false: job.criticality == "standard"'


@pytest.mark.parametrize(
    ("when", "the_job", "wait_s", "expected"),
    [
        pytest.param(
            'mesh.pools["onprem"].expected_wait_s > 600.0 && job.kind == "train"',
            job(kind="train"),
            0.0,
            'false: mesh.pools["onprem"].expected_wait_s > 600.0',
            id="the-mesh-operand-when-it-is-the-false-one",
        ),
        pytest.param(
            'job.kind == "train" || job.team == "vision"',
            job(),
            0.0,
            'all false: `job.kind == "train"`; `job.team == "vision"`',
            id="or-lists-every-false-operand",
        ),
        pytest.param(
            'job.kind == "batch" && (job.team == "a" || job.team == "b")',
            job(),
            0.0,
            'all false: `job.team == "a"`; `job.team == "b"`',
            id="inside-a-parenthesised-or",
        ),
        pytest.param(
            'job.kind == "batch" && !(job.resources.gpus < 4.0) && job.team == "x"',
            job(resources={"gpus": 1}),
            0.0,
            "false: !(job.resources.gpus < 4.0)",
            id="the-first-false-of-three",
        ),
        pytest.param(
            'job.kind == "batch" && job.labels.x == "y"',
            job(),
            0.0,
            "no key 'x' in job.labels; test for it with has(job.labels.x) or \"x\" in"
            ' job.labels in `job.labels.x == "y"`',
            id="a-failure-names-its-operand",
        ),
    ],
)
def test_the_operand_that_decided(when, the_job, wait_s, expected):
    policies = compiled(f"pools: [{{name: r, when: '{when}', deny: pool.cloud}}]")
    assert detail(verdict(policies, the_job, busy(wait_s)), "r") == expected


def test_a_selector_names_its_false_operand_per_pool():
    policies = compiled("pools: [{name: r, allow: 'pool.cloud && pool.labels.tier == \"x\"'}]")
    result = verdict(policies, job())
    assert detail(result, "r", "allow", "onprem") == "false: pool.cloud"
    assert detail(result, "r", "allow", "aws") == 'false: pool.labels.tier == "x"'


def test_deciding_does_not_run_the_job_operands_a_false_mesh_operand_makes_moot(monkeypatch):
    policies = compiled(
        'burst: [{name: b, when: \'job.kind == "batch" && mesh.pools["onprem"]'
        ".expected_wait_s > 600.0', to: pool.cloud}]"
    )
    bound = bind(policies, busy(0.0), NOW)
    ran: list[str] = []
    original = evaluate_module.run

    def counting(expr, context):
        ran.append(expr.source)
        return original(expr, context)

    monkeypatch.setattr(evaluate_module, "run", counting)
    result = bound.evaluate(job())
    mesh_operand = 'mesh.pools["onprem"].expected_wait_s > 600.0'
    assert ran == [mesh_operand]  # false, once per binding: no job operand, no selector
    assert detail(result, "b") == f"false: {mesh_operand}"
    ran.clear()
    bound.evaluate(job(criticality="critical"))
    assert ran == []  # the next job: decided by the binding's answer


def test_of_two_failing_operands_the_first_in_source_order_is_named_with_its_own_failure():
    # bind ran the mesh operand first (it fails too); the job's operand comes first in the file
    policies = compiled(
        'pools: [{name: r, when: \'job.labels.x == "y" && mesh.pools["nowhere"].cloud\','
        " deny: pool.cloud}]"
    )
    result = verdict(policies, job())
    expected = (
        "no key 'x' in job.labels; test for it with has(job.labels.x) or \"x\" in job.labels"
        ' in `job.labels.x == "y"`'
    )
    assert detail(result, "r") == expected
    assert [e.message for e in result.errors] == [expected]
