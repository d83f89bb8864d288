"""`meshctl providers refresh` against the emulators: shapes (and AWS spot prices) from the
APIs laid over the catalog, on-demand prices kept, and a failed refresh leaves the file as it
was."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from meshctl.cli.app import app
from meshctl.files import load_one
from meshctl.model import Catalog
from tests.conftest import PROVIDERS
from tests.emulators.aws import MotoServer
from tests.emulators.gce import GceEmulator

pytestmark = pytest.mark.integration


@pytest.fixture
def catalogs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "providers"
    folder.mkdir()
    for name in ("aws.yaml", "gcp.yaml"):
        shutil.copy(PROVIDERS / name, folder / name)
    monkeypatch.setenv("MESHCTL_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    return folder


def test_aws_refresh_reads_shapes_and_spot_prices_and_keeps_list_prices(
    catalogs: Path, moto: MotoServer
) -> None:
    before = load_one(catalogs / "aws.yaml", Catalog)
    result = CliRunner().invoke(
        app,
        [
            "--providers",
            str(catalogs),
            "providers",
            "refresh",
            "aws",
            "--region",
            "us-east-1",
            "--endpoint-url",
            moto.endpoint,
        ],
    )
    assert result.exit_code == 0, result.output
    assert "wrote" in result.stdout
    after = load_one(catalogs / "aws.yaml", Catalog)
    g6 = after.instance_type("g6.xlarge")
    assert g6 is not None
    assert g6.prices["us-east-1"].spot_usd_per_hour is not None  # from the spot price history
    old = before.instance_type("g6.xlarge")
    assert old is not None
    assert (
        g6.prices["us-east-1"].on_demand_usd_per_hour
        == old.prices["us-east-1"].on_demand_usd_per_hour
    )
    assert (g6.accelerator.model, g6.accelerator.count) == ("L4", 1)


def test_gcp_refresh_reads_machine_types(catalogs: Path) -> None:
    with GceEmulator() as gce:
        result = CliRunner().invoke(
            app,
            [
                "--providers",
                str(catalogs),
                "providers",
                "refresh",
                "gcp",
                "--project",
                "meshctl-test",
                "--region",
                "us-central1",
                "--endpoint-url",
                gce.endpoint,
                "--dry-run",
            ],
        )
    assert result.exit_code == 0, result.output
    assert (catalogs / "gcp.yaml").read_text() == (PROVIDERS / "gcp.yaml").read_text()  # dry run


def test_a_refresh_that_fails_leaves_the_catalog_intact(catalogs: Path) -> None:
    before = (catalogs / "aws.yaml").read_text()
    result = CliRunner().invoke(
        app,
        [
            "--providers",
            str(catalogs),
            "providers",
            "refresh",
            "aws",
            "--region",
            "us-east-1",
            "--endpoint-url",
            "http://127.0.0.1:9",
        ],
    )
    assert result.exit_code == 1
    assert "is unchanged" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert (catalogs / "aws.yaml").read_text() == before
