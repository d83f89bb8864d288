"""`meshctl policy validate|test|explain` through the CLI runner."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import EXAMPLES, ROOT

from meshctl.cli.app import app

pytestmark = pytest.mark.unit

MESH = ["--mesh", str(EXAMPLES / "mesh.yaml")]


@pytest.fixture
def policies(tmp_path: Path) -> Path:
    return Path(shutil.copytree(ROOT / "policies", tmp_path / "policies"))


def test_validate_reports_an_invalid_policy_with_exit_2(cli, policies: Path):
    burst = policies / "burst.yaml"
    burst.write_text(
        burst.read_text().replace('job.criticality == "best-effort"', "job.criticallity == 1")
    )
    result = cli.invoke(app, ["policy", "validate", str(policies)])
    assert result.exit_code == 2
    assert result.stderr.startswith(
        f"error: {burst}:11: spec.burst[0].when: job has no field 'criticallity'; did you mean"
        " 'criticality'?"
    )


def test_validate_reports_conflicts_between_files(cli, policies: Path):
    (policies / "zz-more.yaml").write_text(
        "apiVersion: meshctl/v1\nkind: Policy\nmetadata: {name: more}\n"
        "spec:\n  scoring: {packing: spread}\n"
    )
    result = cli.invoke(app, ["policy", "validate", str(policies)])
    assert result.exit_code == 2
    assert "scoring.packing is also set at" in result.stderr
    assert "onprem-first.yaml" in result.stderr


MULTI_LINE = (
    "apiVersion: meshctl/v1\nkind: Policy\nmetadata: {name: multi}\nspec:\n  pools:\n"
    '    - name: r\n      when: >-\n        job.kind == "train" &&\n'
    '        job.resources.gpus > "4"\n      deny: pool.cloud\n'
)


@pytest.mark.parametrize(
    "command",
    [
        pytest.param(["policy", "validate"], id="policy-validate"),
        pytest.param(["validate"], id="validate"),
    ],
)
def test_a_type_error_inside_a_multi_line_expression_names_its_own_line(cli, tmp_path, command):
    # the file's text, as read, reaches the checker: without it, the line is the key's (7)
    folder = tmp_path / "policies"
    folder.mkdir()
    (folder / "multi.yaml").write_text(MULTI_LINE)
    result = cli.invoke(app, [*command, str(folder)])
    assert result.exit_code == 2
    assert result.stderr.startswith(
        f"error: {folder / 'multi.yaml'}:9: spec.pools[0].when: type error at column 43:"
    )


def test_a_failing_case_exits_1_and_the_last_line_counts(cli, policies: Path):
    routing = policies / "tests" / "routing.yaml"
    routing.write_text(routing.read_text().replace("max_usd_per_hour: 60", "max_usd_per_hour: 61"))
    result = cli.invoke(app, [*MESH, "policy", "test", str(policies)])
    assert result.exit_code == 1
    assert "max_usd_per_hour: expected 61.0" in result.stdout
    assert result.stdout.splitlines()[-1] == "24 passed, 1 failed"


def test_no_cases_is_a_failure_not_a_pass(cli, policies: Path):
    shutil.rmtree(policies / "tests")
    result = cli.invoke(app, [*MESH, "policy", "test", str(policies)])
    assert result.exit_code == 1
    assert "no policy test cases found" in result.stderr


def test_explain_lists_every_rule_and_the_decision(cli, tmp_path: Path):
    state = tmp_path / "state.yaml"
    state.write_text(
        "apiVersion: meshctl/v1\nkind: MeshState\nmetadata: {name: busy}\n"
        f"spec:\n  mesh: {EXAMPLES / 'mesh.yaml'}\n"
        "  pools: {onprem: {expected_wait_s: 30m, free_gpus: 0}}\n"
    )
    result = cli.invoke(
        app,
        [
            "policy",
            "explain",
            str(EXAMPLES / "jobs" / "batch-embed.yaml"),
            "--mesh",
            str(state),
            "--policies",
            str(ROOT / "policies"),
            "-o",
            "json",
        ],
    )
    assert result.exit_code == 0, result.output
    verdict = json.loads(result.stdout)
    assert verdict["priority_class"] == "batch"
    assert [t["pool"] for t in verdict["burst"]["targets"]] == ["aws-burst", "gcp-burst"]
    rules = {t["rule"] for t in verdict["trace"]}
    assert {
        "critical-stays-strategic",
        "pii-stays-onprem",
        "best-effort-to-spot",
        "inference-over-training",
    } <= rules


def test_explain_table(cli):
    result = cli.invoke(
        app,
        [
            *MESH,
            "policy",
            "explain",
            str(EXAMPLES / "jobs" / "serve-pii.yaml"),
            "--policies",
            str(ROOT / "policies"),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "personal data (pii) stays on-prem" in result.stdout
    assert "Every rule evaluated" in result.stdout


SENSITIVE = """\
apiVersion: meshctl/v1
kind: Policy
metadata: {name: sensitive}
spec:
  pools:
    - name: sensitive-onprem
      when: job.labels.sensitivity != "public"
      deny: pool.cloud
"""


def test_explain_fails_closed_and_exits_1_with_one_error_line_per_failing_rule(cli, policies):
    (policies / "sensitive.yaml").write_text(SENSITIVE)
    args = ["policy", "explain", str(EXAMPLES / "jobs" / "batch-embed.yaml")]
    args += ["--policies", str(policies)]
    table = cli.invoke(app, [*MESH, *args])
    assert table.exit_code == 1
    assert table.stderr == (
        f"error: {policies / 'sensitive.yaml'}:7: pools rule sensitive-onprem: when could not"
        " be evaluated: no key 'sensitivity' in job.labels; test for it with"
        ' has(job.labels.sensitivity) or "sensitivity" in job.labels; failing closed: the deny'
        " applies to the pools it picks\n"
    )
    assert "could not be evaluated for this job; the engine failed closed" in table.stdout
    data = json.loads(cli.invoke(app, [*MESH, *args, "-o", "json"]).stdout)
    assert [(p["pool"], p["eligible"]) for p in data["pools"]] == [
        ("onprem", True),
        ("aws-burst", False),
        ("gcp-burst", False),
    ]
    assert data["errors"] == [
        {
            "section": "pools",
            "rule": "sensitive-onprem",
            "part": "when",
            "file": str(policies / "sensitive.yaml"),
            "line": 7,
            "pools": [],
            "message": "no key 'sensitivity' in job.labels; test for it with"
            ' has(job.labels.sensitivity) or "sensitivity" in job.labels',
            "effect": "the deny applies to the pools it picks",
        }
    ]


def test_policy_test_json_says_where_each_case_is(cli, policies):
    result = cli.invoke(app, [*MESH, "policy", "test", str(policies), "-o", "json"])
    assert result.exit_code == 0, result.output
    first = json.loads(result.stdout)[0]
    assert (Path(first["file"]).name, first["line"], first["passed"]) == ("priority.yaml", 8, True)


UNGUARDED_LABEL = (
    "apiVersion: meshctl/v1\nkind: Policy\nmetadata: {name: labels}\nspec:\n  pools:\n"
    "    - name: restricted-onprem\n"
    '      when: job.labels["data-class"] == "restricted"\n'
    "      deny: pool.cloud\n"
)
TWO_TYPE_ERRORS = (
    "apiVersion: meshctl/v1\nkind: Policy\nmetadata: {name: types}\nspec:\n  pools:\n"
    "    - name: big-northern\n"
    '      when: job.resources.gpus > "4" && job.team.startswith("n")\n'
    "      deny: pool.cloud\n"
)


def test_validate_warns_of_an_unguarded_label_and_exits_0(cli, tmp_path):
    folder = tmp_path / "policies"
    folder.mkdir()
    (folder / "labels.yaml").write_text(UNGUARDED_LABEL)
    result = cli.invoke(app, ["policy", "validate", str(folder)])
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines() == [
        f"warning: {folder / 'labels.yaml'}:7: spec.pools[0].when: rule 'restricted-onprem':"
        ' job.labels["data-class"] is not guarded: the rule fails closed wherever job.labels'
        ' has no key "data-class"; write `"data-class" in job.labels &&'
        ' job.labels["data-class"] == "restricted"`'
    ]
    assert "1 valid policy file(s)" in result.stdout


def test_validate_reports_every_type_error_of_an_expression_and_exits_2(cli, tmp_path):
    folder = tmp_path / "policies"
    folder.mkdir()
    (folder / "types.yaml").write_text(TWO_TYPE_ERRORS)
    result = cli.invoke(app, ["policy", "validate", str(folder)])
    assert result.exit_code == 2
    where = f"error: {folder / 'types.yaml'}:7: spec.pools[0].when: type error at column"
    text = '`job.resources.gpus > "4" && job.team.startswith("n")`'
    assert result.stderr.splitlines() == [
        f"{where} 20: '>' cannot compare double with string; write 4 without quotes for a"
        f" number in {text}",
        f"{where} 38: a string has no method 'startswith'; did you mean 'startsWith'? in {text}",
    ]
