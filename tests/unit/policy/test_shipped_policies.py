"""The example policies in policies/ validate, and every case in policies/tests passes."""

from __future__ import annotations

import pytest
from conftest import ROOT

from meshctl.cli.app import app

pytestmark = pytest.mark.unit


def test_shipped_policies_validate(cli):
    result = cli.invoke(app, ["policy", "validate", str(ROOT / "policies")])
    assert result.exit_code == 0, result.output
    assert "6 valid policy file(s)" in result.stdout


def test_shipped_policy_tests_pass(cli):
    result = cli.invoke(
        app,
        ["--mesh", str(ROOT / "examples" / "mesh.yaml"), "policy", "test", str(ROOT / "policies")],
    )
    assert result.exit_code == 0, result.output
    last = result.stdout.strip().splitlines()[-1]
    passed, failed = (int(part.split()[0]) for part in last.split(", "))
    assert failed == 0
    assert passed >= 24
