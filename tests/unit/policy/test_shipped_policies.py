"""The shipped policies (policies/, the simulator's examples, what `meshctl init` writes)
validate with no warning, and every case in policies/tests passes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import EXAMPLES, ROOT

from meshctl.cli.app import app

pytestmark = pytest.mark.unit

SIM = EXAMPLES / "sim" / "policies"
# each set of policy files that ships, as `policy validate` is given it
SHIPPED = [
    pytest.param([ROOT / "policies"], 6, id="policies"),
    pytest.param([SIM / "common", SIM / "burst.yaml"], 2, id="sim-burst"),
    pytest.param([SIM / "common", SIM / "onprem-only.yaml"], 2, id="sim-onprem-only"),
]


@pytest.mark.parametrize(("paths", "count"), SHIPPED)
def test_shipped_policies_validate_with_no_warning(cli, paths: list[Path], count: int):
    result = cli.invoke(app, ["policy", "validate", *map(str, paths)])
    assert result.exit_code == 0, result.output
    assert f"{count} valid policy file(s)" in result.stdout
    assert result.stderr == ""


def test_the_scaffold_validates_with_no_warning(cli, tmp_path: Path):
    assert cli.invoke(app, ["init", str(tmp_path)]).exit_code == 0
    result = cli.invoke(app, ["policy", "validate", str(tmp_path / "policies")])
    assert result.exit_code == 0, result.output
    assert result.stderr == ""


def test_the_scaffold_readme_points_at_docs_that_ship(cli, tmp_path: Path):
    assert cli.invoke(app, ["init", str(tmp_path)]).exit_code == 0
    readme = (tmp_path / "policies" / "README.md").read_text()
    assert "section 4" not in readme
    assert "docs/" not in readme  # docs/ is in the source only, not in the installed package
    named = set(re.findall(r"`(meshctl/[\w/]+\.md)`", readme))
    assert named == {"meshctl/policy/README.md"}  # inside the package: it ships in the wheel
    assert all((ROOT / path).is_file() for path in named)


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
