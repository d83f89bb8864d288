"""``open_store_at``: what a ``--store`` names opens the store it names, and psycopg is imported
only when a Postgres URL is opened."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from meshctl.errors import InvalidInput
from meshctl.state import SqliteStore, open_store_at

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("store", "expected"),
    [
        pytest.param(None, "home/state.db", id="nothing: the home's"),
        pytest.param("", "home/state.db", id="empty: the home's"),
        pytest.param("other.db", "other.db", id="a relative path"),
        pytest.param("sqlite://{tmp}/abs.db", "abs.db", id="sqlite:///PATH"),
        pytest.param("sqlite:///{tmp}/abs.db", "abs.db", id="sqlite:////PATH"),
        pytest.param("{tmp}/plain.db", "plain.db", id="an absolute path"),
    ],
)
def test_a_file_or_nothing_opens_sqlite(
    store: str | None, expected: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    named = None if store is None else store.format(tmp=tmp_path)
    with open_store_at(named, tmp_path / "home") as opened:
        assert isinstance(opened, SqliteStore)
        assert opened.path.resolve() == (tmp_path / expected).resolve()


@pytest.mark.parametrize(
    ("store", "message"),
    [
        pytest.param("mysql://u:secret@h/db", "got a mysql:// URL", id="another scheme"),
        pytest.param("sqlite:///", "expected a file after sqlite:///", id="no file"),
    ],
)
def test_anything_else_is_invalid_input(store: str, message: str, tmp_path: Path) -> None:
    with pytest.raises(InvalidInput) as info:
        open_store_at(store, tmp_path)
    assert message in str(info.value)
    assert "secret" not in str(info.value)
    assert not any(tmp_path.iterdir())


PROBE = """
import sys
from pathlib import Path
from meshctl.state import open_store_at
open_store_at(None, Path(sys.argv[1])).close()
print("psycopg" in sys.modules)
"""


def test_a_sqlite_store_never_imports_psycopg(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, str(tmp_path)], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "False"
