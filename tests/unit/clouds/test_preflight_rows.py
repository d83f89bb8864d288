"""``meshctl pools check`` of a cloud pool whose credentials are missing: one row per setting a
real account needs and mesh.yaml lacks, then the credentials row with its fix, for GCP as for
AWS (issue 48: GCP showed one ``credentials`` row whose fix was "see the detail")."""

from __future__ import annotations

from pathlib import Path

import pytest

from meshctl.controller.runtime import preflight
from meshctl.model.mesh import GcpPool

pytestmark = pytest.mark.unit


def test_gcp_without_credentials_has_a_row_per_missing_setting(tmp_path: Path) -> None:
    missing_key = tmp_path / "no-key.json"
    pool = GcpPool.model_validate(
        {
            "name": "gcp-eu",
            "provider": "gcp",
            "project": "meshctl-demo",
            "region": "europe-west4",
            "credentials_file": str(missing_key),
            "node_types": [{"name": "g2-standard-8", "max_nodes": 1}],
        }
    )
    checks = preflight(pool, {})
    names = [c.name for c in checks]
    assert names == [
        "setting image",
        "setting head_node_type",
        "setting network",
        "setting subnetwork",
        "setting network_tags",
        "setting service_account",
        "credentials",
    ]
    assert all(c.result == "fail" for c in checks)
    assert all(c.fix and "see the detail" not in c.fix for c in checks)
    credentials = checks[-1]
    assert str(missing_key) in credentials.detail
    assert credentials.fix.startswith("set credentials_file in mesh.yaml to a key")
