"""Pools and providers that policies, tests and mesh moments name are checked against the mesh."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest
from conftest import EXAMPLES, ROOT
from helpers import sources

from meshctl.app.context import AppContext
from meshctl.cli.app import app
from meshctl.files import load_text
from meshctl.model import MeshState, PolicyTest
from meshctl.policy.expr import parse
from meshctl.policy.names import (
    MeshNames,
    moment_problems,
    policy_problems,
    policy_test_problems,
    pool_literals,
)
from meshctl.problems import InvalidFileError

pytestmark = pytest.mark.unit

MESH = MeshNames(
    frozenset({"onprem", "aws-burst", "gcp-burst"}), frozenset({"local", "aws", "gcp"})
)
KNOWN = "expected a pool of the mesh (aws-burst, gcp-burst, onprem), got"


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        pytest.param(
            "pools: [{name: r, deny: 'pool.name == \"aws-brust\"'}]",
            [
                f"p0.yaml:5: spec.pools[0].deny: column 14: {KNOWN} 'aws-brust'; did you mean"
                " 'aws-burst'?"
            ],
            id="selector-equality",
        ),
        pytest.param(
            "pools: [{name: r, allow: '\"onprem\" != pool.name'}]",
            [],
            id="known-pool-either-side",
        ),
        pytest.param(
            'burst: [{name: b, to: \'pool.name in ["aws-burst", "gcp-brust"]\'}]',
            [
                f"p0.yaml:5: spec.burst[0].to: column 28: {KNOWN} 'gcp-brust'; did you mean"
                " 'gcp-burst'?"
            ],
            id="selector-in-list",
        ),
        pytest.param(
            "burst: [{name: b, when: 'mesh.pools[\"on-prem\"].expected_wait_s > 60.0',"
            " to: pool.cloud}]",
            [
                f"p0.yaml:5: spec.burst[0].when: column 12: {KNOWN} 'on-prem'; did you mean"
                " 'onprem'?"
            ],
            id="mesh-pools-index",
        ),
        pytest.param(
            "pools: [{name: r, when: 'mesh.pools.onprem2.free_gpus < 1.0', deny: pool.cloud}]",
            [
                f"p0.yaml:5: spec.pools[0].when: column 12: {KNOWN} 'onprem2'; did you mean"
                " 'onprem'?"
            ],
            id="mesh-pools-field",
        ),
        pytest.param(
            "pools: [{name: r, when: 'has(mesh.pools.lab) && \"lab2\" in mesh.pools',"
            " deny: pool.cloud}]",
            [],
            id="asking-whether-a-pool-exists-is-fine",
        ),
        pytest.param(
            "pools: [{name: r, when: 'job.labels.pool == \"x\"', deny: 'pool.region == \"x\"'}]",
            [],
            id="other-strings-are-not-pools",
        ),
        pytest.param(
            "pools: [{name: r, deny: 'mesh.pools.exists(pool, pool == \"elsewhere\")'}]",
            [],
            id="a-bound-variable-shadows-pool",
        ),
        pytest.param(
            "preemption: [{name: p, victims: 'victim.pool == \"gpu-b\"'}]",
            [f"p0.yaml:5: spec.preemption[0].victims: column 16: {KNOWN} 'gpu-b'"],
            id="victim-pool",
        ),
        pytest.param(
            "budgets: [{name: b, scope: {pool: aws-brust}, usd_per_month: 10},"
            " {name: c, scope: {provider: ray}, usd_per_month: 10}]",
            [
                f"p0.yaml:5: spec.budgets[0].scope.pool: {KNOWN} 'aws-brust'; did you mean"
                " 'aws-burst'?",
                "p0.yaml:5: spec.budgets[1].scope.provider: expected a provider the mesh has"
                " pools of (aws, gcp, local), got 'ray'",
            ],
            id="budget-scopes",
        ),
        pytest.param(
            "scoring: {pool_preference: [onprem, gcp-burts]}",
            [
                f"p0.yaml:5: spec.scoring.pool_preference[1]: {KNOWN} 'gcp-burts'; did you mean"
                " 'gcp-burst'?"
            ],
            id="pool-preference",
        ),
    ],
)
def test_policies_name_pools_the_mesh_has(spec: str, expected: list[str]) -> None:
    assert [str(p) for p in policy_problems(sources(spec), MESH)] == expected


def test_a_pool_inside_a_multi_line_expression_points_at_its_line() -> None:
    spec = textwrap.dedent(
        """\
        burst:
          - name: b
            when: >-
              job.kind == "batch" &&
              mesh.pools["onprme"].expected_wait_s > 600.0
            to: pool.cloud
        """
    )
    (problem,) = policy_problems(sources(spec), MESH)
    assert (problem.line, problem.field) == (9, "spec.burst[0].when")


def test_pool_literals_are_found_in_source_order() -> None:
    tree = parse('pool.name == "b" || mesh.pools["a"].cloud || pool.name in ["c", "d"]')
    assert [name for _, name in pool_literals(tree, selects=True)] == ["b", "a", "c", "d"]
    assert [name for _, name in pool_literals(tree, selects=False)] == ["a"]


TEST = """\
apiVersion: meshctl/v1
kind: PolicyTest
metadata: {name: t}
spec:
  state: {pools: {on-prem: {free_gpus: 0}}}
  cases:
    - name: c
      state: {pools: {aws-burst: {expected_wait_s: 1m}, gpc-burst: {queued_jobs: 1}}}
      victim: {pool: onprme}
      expect:
        eligible: [onprem, aws-brust]
        preempt: false
"""


def test_policy_tests_name_pools_the_mesh_has() -> None:
    (loaded,) = load_text(TEST, "t.yaml")
    assert isinstance(loaded.document, PolicyTest)
    problems = policy_test_problems("t.yaml", loaded.document, loaded.line_of, MESH)
    assert [(p.line, p.field, p.message.rpartition("got ")[2]) for p in problems] == [
        (5, "spec.state.pools.on-prem", "'on-prem'; did you mean 'onprem'?"),
        (8, "spec.cases[0].state.pools.gpc-burst", "'gpc-burst'; did you mean 'gcp-burst'?"),
        (11, "spec.cases[0].expect.eligible[1]", "'aws-brust'; did you mean 'aws-burst'?"),
        (9, "spec.cases[0].victim.pool", "'onprme'; did you mean 'onprem'?"),
    ]


def test_a_mesh_state_names_pools_the_mesh_has() -> None:
    text = (
        "apiVersion: meshctl/v1\nkind: MeshState\nmetadata: {name: s}\n"
        "spec:\n  pools:\n    onprem: {free_gpus: 1}\n    aws: {free_gpus: 2}\n"
    )
    (loaded,) = load_text(text, "s.yaml")
    assert isinstance(loaded.document, MeshState)
    (problem,) = moment_problems("s.yaml", loaded.document.spec, loaded.line_of, ("spec",), MESH)
    assert str(problem) == f"s.yaml:7: spec.pools.aws: {KNOWN} 'aws'"


# --- through the commands ----------------------------------------------------------------------


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A folder as `meshctl init` lays it out: mesh.yaml, policies/ and their tests."""
    shutil.copy(EXAMPLES / "mesh.yaml", tmp_path / "mesh.yaml")
    shutil.copytree(ROOT / "policies", tmp_path / "policies")
    return tmp_path


def _misname(project: Path) -> Path:
    first = project / "policies" / "onprem-first.yaml"
    first.write_text(first.read_text().replace("[onprem, gcp-burst,", "[onprem, gcp-brust,"))
    return first


def test_policy_validate_rejects_an_unknown_pool_with_exit_2(cli, project: Path) -> None:
    first = _misname(project)
    result = cli.invoke(app, ["policy", "validate", str(project / "policies")])
    assert result.exit_code == 2
    assert result.stderr == (
        f"error: {first}:16: spec.scoring.pool_preference[1]: {KNOWN} 'gcp-brust'; did you"
        " mean 'gcp-burst'?\n"
    )


def test_policy_test_rejects_an_unknown_pool_in_a_case(cli, project: Path) -> None:
    routing = project / "policies" / "tests" / "routing.yaml"
    routing.write_text(
        routing.read_text().replace("burst_pools: [aws-burst,", "burst_pools: [aws,")
    )
    result = cli.invoke(app, ["policy", "test", str(project / "policies")])
    assert result.exit_code == 2
    assert f"spec.cases[2].expect.burst_pools[0]: {KNOWN} 'aws'" in result.stderr


def test_meshctl_validate_checks_names_when_a_mesh_is_given(cli, project: Path) -> None:
    _misname(project)
    alone = cli.invoke(app, ["validate", str(project / "policies" / "onprem-first.yaml")])
    assert alone.exit_code == 0, alone.output  # no mesh among the files: names unchecked
    together = cli.invoke(app, ["validate", str(project)])
    assert together.exit_code == 2
    assert "'gcp-brust'; did you mean 'gcp-burst'?" in together.stderr


def test_files_given_together_name_the_pools_and_providers_of_all_their_meshes():
    (onprem,) = load_text((EXAMPLES / "mesh.yaml").read_text(), "a.yaml")
    (lab,) = load_text(
        "apiVersion: meshctl/v1\nkind: Mesh\nmetadata: {name: lab}\nspec:\n  pools:\n"
        "    - {name: lab, provider: local, nodes: [{name: n, cpus: 1, memory_gib: 1GiB}]}\n",
        "b.yaml",
    )
    together = MeshNames.of(onprem.document, lab.document)  # type: ignore[arg-type]
    assert together.pools == {"onprem", "aws-burst", "gcp-burst", "lab"}
    assert together.providers == {"local", "aws", "gcp"}
    assert MeshNames.of(lab.document).pools == {"lab"}  # type: ignore[arg-type]


def test_the_policy_set_commands_use_is_checked_against_the_mesh(project: Path) -> None:
    # `up`, `submit` and the controller compile their policies through AppContext.policy_set
    context = AppContext(project / "home", project / "mesh.yaml", None)
    assert context.policy_set(project / "policies").pool_preference[0] == "onprem"
    _misname(project)
    with pytest.raises(InvalidFileError, match="'gcp-brust'; did you mean 'gcp-burst'"):
        context.policy_set(project / "policies")


def test_the_shipped_examples_are_checked_against_the_mesh_they_are_written_for(tmp_path):
    # a mesh with no policies of its own falls back on the shipped examples, which name the
    # embedded default mesh's pools; they are checked against that mesh, not refused for this
    from meshctl.files.shipped import data_dir

    (tmp_path / "mesh.yaml").write_text(
        "apiVersion: meshctl/v1\nkind: Mesh\nmetadata: {name: lab}\nspec:\n  pools:\n"
        "    - {name: lab, provider: local, nodes: [{name: n, cpus: 1, memory_gib: 1GiB}]}\n"
    )
    context = AppContext(tmp_path / "home", tmp_path / "mesh.yaml", None)
    shipped = Path(str(data_dir("policies")))
    assert context.policy_set(shipped).pool_preference == ("onprem", "gcp-burst", "aws-burst")
    copied = Path(shutil.copytree(shipped, tmp_path / "policies"))
    with pytest.raises(InvalidFileError, match="expected a pool of the mesh \\(lab\\)"):
        context.policy_set(copied)
