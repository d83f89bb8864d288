"""What commands say to people (issue 48, point 5): ``warning:`` only for warnings, plain
information as a plain line on stderr."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from meshctl.cli.app import app

pytestmark = pytest.mark.unit


def test_admin_users_add_prints_the_token_without_a_warning(cli: Any) -> None:
    result = cli.invoke(app, ["admin", "users", "add", "ana", "--team", "analytics"])
    assert result.exit_code == 0, result.output
    assert "warning" not in result.stderr
    assert result.stderr == "ana (user; analytics): their API token, shown this once:\n"
    token = result.stdout.strip()
    assert token and "\n" not in token


def test_server_says_where_it_serves_without_a_warning(
    cli: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import meshctl.server.server as server

    def started(settings: Any, listen: Any, workers: int, on_ready: Any = None) -> None:
        on_ready()  # what serve does once its settings are in place, before uvicorn runs

    monkeypatch.setattr(server, "serve", started)
    result = cli.invoke(app, ["server", "--port", "8799"])
    assert result.exit_code == 0, result.output
    assert result.stderr == "serving http://127.0.0.1:8799 (1 process)\n"
