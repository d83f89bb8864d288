"""The small helpers of the state package: home resolution and the migration splitter."""

from __future__ import annotations

from pathlib import Path

import pytest

from meshctl.state import MIGRATIONS, default_home
from meshctl.state.migrations import render
from meshctl.state.sqlite_dialect import SYNTAX, statements

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        pytest.param("/srv/mesh", Path("/srv/mesh"), id="env-set"),
        pytest.param("~/custom", Path.home() / "custom", id="env-with-tilde"),
        pytest.param("", Path.home() / ".meshctl", id="env-empty"),
        pytest.param(None, Path.home() / ".meshctl", id="env-unset"),
    ],
)
def test_default_home(monkeypatch: pytest.MonkeyPatch, env: str | None, expected: Path) -> None:
    if env is None:
        monkeypatch.delenv("MESHCTL_HOME", raising=False)
    else:
        monkeypatch.setenv("MESHCTL_HOME", env)
    assert default_home() == expected


@pytest.mark.parametrize(
    ("script", "expected"),
    [
        pytest.param("CREATE TABLE a (x);\nCREATE TABLE b (y);", 2, id="two"),
        pytest.param("INSERT INTO a VALUES ('x;y');", 1, id="semicolon-in-literal"),
        pytest.param(
            "CREATE TRIGGER t AFTER INSERT ON a BEGIN DELETE FROM b; DELETE FROM c; END;",
            1,
            id="trigger-body",
        ),
        pytest.param("  ;\n ; ", 0, id="empty"),
    ],
)
def test_statements_split(script: str, expected: int) -> None:
    assert len(list(statements(script))) == expected


def test_every_migration_step_splits_cleanly() -> None:
    assert all(list(statements(render(step, SYNTAX.types))) for step in MIGRATIONS)
