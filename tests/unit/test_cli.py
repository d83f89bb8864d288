"""The CLI through typer's runner: exit codes, output formats, and nothing written on error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from meshctl.cli.app import app

pytestmark = pytest.mark.unit


def test_init_scaffolds_a_mesh_that_validates(cli, tmp_path: Path):
    target = tmp_path / "mesh"
    result = cli.invoke(app, ["init", str(target)])
    assert result.exit_code == 0, result.output
    assert {p.relative_to(target).as_posix() for p in target.rglob("*") if p.is_file()} >= {
        "mesh.yaml",
        "providers/aws.yaml",
        "providers/gcp.yaml",
        "policies/README.md",
        "jobs/train-resnet.yaml",
        "programs/train.py",
    }
    checked = cli.invoke(app, ["validate", str(target), "-o", "json"])
    assert checked.exit_code == 0, checked.output
    kinds = sorted(row["kind"] for row in json.loads(checked.stdout))
    assert kinds == [
        "Catalog",
        "Catalog",
        "Job",
        "Job",
        "Job",
        "Job",
        "Mesh",
        *["Policy"] * 6,
        *["PolicyTest"] * 3,
    ]


def test_init_refuses_to_overwrite_and_writes_nothing(cli, tmp_path: Path):
    (tmp_path / "mesh.yaml").write_text("mine\n")
    result = cli.invoke(app, ["init", str(tmp_path)])
    assert result.exit_code == 2
    assert "mesh.yaml already exist; nothing was written" in result.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["mesh.yaml"]
    assert (tmp_path / "mesh.yaml").read_text() == "mine\n"


def test_init_force_overwrites(cli, tmp_path: Path):
    (tmp_path / "mesh.yaml").write_text("mine\n")
    assert cli.invoke(app, ["init", str(tmp_path), "--force"]).exit_code == 0
    assert "kind: Mesh" in (tmp_path / "mesh.yaml").read_text()


def test_validate_reports_problems_on_stderr_with_exit_2(cli, tmp_path: Path):
    bad = tmp_path / "job.yaml"
    bad.write_text("apiVersion: meshctl/v1\nkind: Job\nmetadata: {name: j}\nspec: {kind: batch}\n")
    result = cli.invoke(app, ["validate", str(bad)])
    assert result.exit_code == 2
    assert result.stderr == (
        f"error: {bad}:4: spec: needs an entrypoint (the command to run), a train section"
        " or a serve section\n"
    )
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(
            ["schema", "Pool"],
            "kind: expected one of Accelerators, Catalog, Job, Mesh, MeshState, Policy,"
            " PolicyTest, got 'Pool'",
            id="schema-unknown-kind",
        ),
        pytest.param(
            ["providers", "list", "-p", "azure"],
            "--provider: expected one of aws, gcp, got azure",
            id="unknown-provider",
        ),
        pytest.param(
            ["providers", "prices", "--region", "mars-1"],
            "--region: expected a region priced in the catalogs",
            id="unknown-region",
        ),
        pytest.param(["providers", "list", "-o", "xml"], "'xml' is not one of", id="bad-output"),
        pytest.param(["validate"], "Missing argument", id="missing-argument"),
    ],
)
def test_invalid_requests_exit_2_with_one_line(cli, args, message):
    result = cli.invoke(app, args)
    assert result.exit_code == 2
    assert message in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("kind", ["Mesh", "job", "CATALOG"])
def test_schema_is_a_json_schema_requiring_the_header(cli, kind):
    result = cli.invoke(app, ["schema", kind])
    assert result.exit_code == 0
    schema = json.loads(result.stdout)
    assert schema["$schema"].startswith("https://json-schema.org/")
    assert schema["required"][:2] == ["apiVersion", "kind"]
    assert schema["additionalProperties"] is False


def test_schema_as_a_table_is_refused(cli):
    result = cli.invoke(app, ["schema", "Job", "-o", "table"])
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == "error: --output: a schema is printed as json or yaml, got table\n"


def test_schema_yaml_output(cli):
    result = cli.invoke(app, ["schema", "Job", "-o", "yaml"])
    assert yaml.safe_load(result.stdout)["title"] == "Job"


def test_providers_list_filters_by_gpu(cli):
    result = cli.invoke(app, ["providers", "list", "--gpu", "h100", "-o", "json"])
    rows = json.loads(result.stdout)
    assert rows
    assert {r["accelerator"] for r in rows} == {"H100"}
    assert {"p5.48xlarge", "a3-highgpu-8g"} <= {r["node_type"] for r in rows}


def test_providers_heads_lists_the_head_types_and_marks_uncertain_prices(cli):
    rows = json.loads(cli.invoke(app, ["providers", "heads", "-p", "aws", "-o", "json"]).stdout)
    east = [(r["node_type"], p) for r in rows for p in r["prices"] if p["region"] == "us-east-1"]
    assert east == [
        ("m7i.large", {"region": "us-east-1", "on_demand_usd_per_hour": 0.1008,
                       "price_uncertain": False}),
        ("m7i.xlarge", {"region": "us-east-1", "on_demand_usd_per_hour": 0.2016,
                        "price_uncertain": False}),
    ]  # fmt: skip
    marked = {p["region"] for r in rows for p in r["prices"] if p["price_uncertain"]}
    assert marked == {"eu-central-1", "eu-north-1", "eu-west-1"}
    table = cli.invoke(app, ["providers", "heads", "-p", "aws"]).stdout
    assert "eu-west-1 ~0.1124" in table
    assert "us-east-1 0.1008" in table


def test_providers_prices_are_sorted_by_gpu_hour(cli):
    result = cli.invoke(
        app, ["providers", "prices", "-p", "aws", "--region", "us-east-1", "-o", "yaml"]
    )
    rows = yaml.safe_load(result.stdout)
    per_gpu = [r["on_demand_usd_per_gpu_hour"] for r in rows]
    assert per_gpu == sorted(per_gpu)
    assert {r["region"] for r in rows} == {"us-east-1"}


def test_providers_table_shows_source_date(cli):
    result = cli.invoke(app, ["providers", "prices", "--gpu", "H200"])
    assert result.exit_code == 0
    assert "p5en.48xlarge" in result.stdout
    assert "list prices as of" in result.stdout


def test_pools_list_uses_the_mesh_and_catalogs_beside_it(cli, tmp_path: Path):
    assert cli.invoke(app, ["init", str(tmp_path)]).exit_code == 0
    result = cli.invoke(app, ["--mesh", str(tmp_path / "mesh.yaml"), "pools", "list", "-o", "json"])
    assert result.exit_code == 0, result.output
    assert [(r["pool"], r["provider"]) for r in json.loads(result.stdout)] == [
        ("onprem", "local"),
        ("aws-burst", "aws"),
        ("gcp-burst", "gcp"),
    ]


def test_pools_show_unknown_pool(cli):
    result = cli.invoke(app, ["pools", "show", "nope"])
    assert result.exit_code == 2
    assert "pool: expected one of onprem, aws-burst, gcp-burst, got 'nope'" in result.stderr


def test_an_invalid_mesh_stops_pools_list(cli, tmp_path: Path):
    mesh = tmp_path / "mesh.yaml"
    mesh.write_text("apiVersion: meshctl/v1\nkind: Mesh\nmetadata: {name: m}\nspec: {pools: []}\n")
    result = cli.invoke(app, ["--mesh", str(mesh), "pools", "list"])
    assert result.exit_code == 2
    assert result.stderr.startswith(f"error: {mesh}:4: spec.pools: ")


def test_validate_checks_a_mesh_against_catalogs_validated_with_it(cli, tmp_path: Path):
    assert cli.invoke(app, ["init", str(tmp_path)]).exit_code == 0
    aws = tmp_path / "providers" / "aws.yaml"
    aws.write_text(aws.read_text().replace("name: g6.xlarge", "name: g6.xlarge-retired"))
    result = cli.invoke(app, ["validate", str(tmp_path)])
    assert result.exit_code == 2
    assert "node_types[0].name: expected an instance type of the aws catalog, got 'g6.xlarge'" in (
        result.stderr
    )


def test_validate_compiles_policies_it_is_given(cli, tmp_path: Path):
    policy = tmp_path / "p.yaml"
    policy.write_text(
        "apiVersion: meshctl/v1\nkind: Policy\nmetadata: {name: p}\n"
        "spec:\n  pools: [{name: a, deny: 'pool.cloudy'}]\n"
    )
    result = cli.invoke(app, ["validate", str(policy)])
    assert result.exit_code == 2
    assert result.stderr == (
        f"error: {policy}:5: spec.pools[0].deny: pool has no field 'cloudy';"
        " did you mean 'cloud'? in `pool.cloudy`\n"
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(
            ["--providers", "/nonexistent", "providers", "list"],
            "--providers: expected a directory of catalogs",
            id="providers-not-a-dir",
        ),
        pytest.param(["init", "/proc/meshctl-cannot-write"], "cannot write", id="init-unwritable"),
    ],
)
def test_bad_places_are_one_line_errors(cli, args, message):
    result = cli.invoke(app, args)
    assert result.exit_code == 2
    assert message in result.stderr
    assert "Traceback" not in result.output


def test_an_empty_policy_folder_is_an_error(cli, tmp_path: Path):
    result = cli.invoke(app, ["policy", "validate", str(tmp_path)])
    assert result.exit_code == 2
    assert result.stderr == f"error: {tmp_path}: no policy files here (expected *.yaml)\n"


CLOCKS = [
    pytest.param("Europe/Berlin", 1_700_000_000, "23:13:20", id="winter time, UTC+1"),
    pytest.param("Europe/Berlin", 1_690_000_000.75, "06:26:40", id="summer time, a fraction cut"),
    pytest.param("America/St_Johns", 1_700_000_000, "18:43:20", id="a half-hour zone"),
]


@pytest.mark.parametrize(("zone", "at_s", "shown"), CLOCKS)
def test_a_moment_reads_as_local_time_from_seconds_or_from_its_json(
    monkeypatch: pytest.MonkeyPatch, zone: str, at_s: float, shown: str
) -> None:
    """Tables show the local time of day, whether a command holds the seconds or the ISO time
    its ``-o json`` row says (``jsondata.timestamp``)."""
    import time

    from meshctl.cli import render
    from meshctl.jsondata import timestamp

    monkeypatch.setenv("TZ", zone)
    time.tzset()
    try:
        assert render.clock(at_s) == shown
        assert render.clock_of(timestamp(at_s)) == shown
    finally:
        monkeypatch.undo()
        time.tzset()
