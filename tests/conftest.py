"""Shared fixtures: paths to the project's own data, and a CLI runner."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
PROVIDERS = ROOT / "providers"


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    """A runner whose state home is a temporary directory (never the user's ~/.meshctl)."""
    monkeypatch.setenv("MESHCTL_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("MESHCTL_PROVIDERS", raising=False)
    return CliRunner()
