"""Uncertain prices and shape figures are data in the catalogs (not only prose in the notes),
and a refresh keeps them: the APIs publish no list prices, so only the figures an API gave
lose their marker."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from meshctl.catalog import refresh as rf
from meshctl.files import load_one
from meshctl.model import Catalog
from tests.conftest import PROVIDERS

pytestmark = pytest.mark.unit

GCP = load_one(PROVIDERS / "gcp.yaml", Catalog)
AWS = load_one(PROVIDERS / "aws.yaml", Catalog)


def uncertain_prices(catalog: Catalog) -> set[tuple[str, str]]:
    return {
        (t.name, region)
        for t in catalog.spec.instance_types
        for region, price in t.prices.items()
        if price.uncertain
    }


MARKED = [
    pytest.param("a2-highgpu-1g", "europe-west4", True, id="a2 in europe-west4: an SKU anomaly"),
    pytest.param("a2-highgpu-1g", "us-central1", False, id="a2 in us-central1: agrees"),
    pytest.param("a2-ultragpu-8g", "us-east4", True, id="a2-ultragpu: all prices"),
    pytest.param("a3-highgpu-8g", "us-central1", True, id="a3-8g in us-central1: half price"),
    pytest.param("a3-highgpu-8g", "us-east4", False, id="a3-8g in us-east4: in line"),
    pytest.param("a3-highgpu-1g", "us-east4", True, id="a3-1g: no plain on-demand"),
    pytest.param("g2-standard-8", "us-central1", False, id="g2: derived by the exact rule"),
]


@pytest.mark.parametrize(("name", "region", "uncertain"), MARKED)
def test_the_shipped_catalogs_mark_what_their_notes_call_uncertain(
    name: str, region: str, uncertain: bool
) -> None:
    assert GCP.price_uncertain(name, region) is uncertain


def test_aws_prices_are_certain_and_the_nic_figures_the_notes_doubt_are_marked() -> None:
    """The G families' NIC figures are remembered, Inferentia2's come from one source only,
    and trn1.2xlarge's two sources disagree."""
    assert uncertain_prices(AWS) == set()
    nic = {t.name for t in AWS.spec.instance_types if "nic_gbps" in t.uncertain}
    doubted = {t.name for t in AWS.spec.instance_types if t.family in ("g5", "g6", "g6e", "inf2")}
    assert nic == doubted | {"trn1.2xlarge"}


def spot_before() -> float | None:
    ultra = GCP.instance_type("a2-ultragpu-1g")
    assert ultra is not None
    return ultra.prices["us-central1"].spot_usd_per_hour


def test_a_refresh_keeps_the_markers_through_the_file(tmp_path: Path) -> None:
    fresh = rf.Refresh(
        shapes=[rf.Shape("a2-ultragpu-1g", 12, 170, "A100", 1)],  # no NIC figure from GCE
        spot={("a2-ultragpu-1g", "us-central1"): 1.5},
    )
    merged, changes = rf.merge(GCP, fresh, dt.date(2027, 1, 1), "test")
    assert [c for c in changes if "spot" in c] == [
        f"a2-ultragpu-1g: spot in us-central1 {spot_before()} -> 1.5"
    ]
    path = tmp_path / "gcp.yaml"
    rf.write(merged, path, "test")
    after = load_one(path, Catalog)
    assert uncertain_prices(after) == uncertain_prices(GCP)
    ultra = after.instance_type("a2-ultragpu-1g")
    assert ultra is not None
    assert ultra.uncertain == ["nic_gbps"]
    assert after.spec.egress == GCP.spec.egress  # no API gives egress prices: kept, dated


def test_a_figure_the_api_gives_is_no_longer_uncertain() -> None:
    fresh = rf.Refresh(shapes=[rf.Shape("g6.xlarge", 4, 16, "L4", 1, 22.0, 10.0)])
    merged, _ = rf.merge(AWS, fresh, dt.date(2027, 1, 1), "test")
    g6 = merged.instance_type("g6.xlarge")
    assert g6 is not None
    assert (g6.nic_gbps, g6.uncertain) == (10.0, [])
    other = merged.instance_type("g5.xlarge")
    assert other is not None
    assert other.uncertain == ["nic_gbps"]  # not in this refresh: kept
