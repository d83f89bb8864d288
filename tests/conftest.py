"""Shared fixtures: paths to the project's own data, and a CLI runner."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
PROVIDERS = ROOT / "providers"


def onprem_policies(folder: Path) -> Path:
    """The shipped policies copied to ``folder``, less what names the shipped mesh's cloud pools
    (the budgets of aws and gcp, the pool preference): policies naming a pool or provider a
    mesh does not have are refused, and many tests run a mesh of on-prem pools only."""
    import shutil

    shutil.copytree(ROOT / "policies", folder)
    (folder / "budgets.yaml").unlink()
    preference = folder / "onprem-first.yaml"
    text = preference.read_text()
    assert "[onprem, gcp-burst, aws-burst]" in text
    preference.write_text(text.replace("[onprem, gcp-burst, aws-burst]", "[]"))
    return folder


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    """A runner whose state home is a temporary directory (never the user's ~/.meshctl)."""
    monkeypatch.setenv("MESHCTL_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("MESHCTL_PROVIDERS", raising=False)
    return CliRunner()


TIERS = ("unit", "integration", "e2e")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test belongs to exactly one tier, so `make unit` and `make integration` see all."""
    for item in items:
        tiers = [t for t in TIERS if item.get_closest_marker(t)]
        if len(tiers) != 1:
            raise pytest.UsageError(
                f"{item.nodeid}: expected one tier marker of {TIERS}, got {tiers}"
            )
