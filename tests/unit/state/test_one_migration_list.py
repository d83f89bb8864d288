"""One list of migrations: each step, filled in with a dialect's types, is the step that
dialect had before the lists were one (``tests/released_migrations.py``, verbatim), so a
database at any released version goes on with the same next step."""

from __future__ import annotations

import pytest
from released_migrations import POSTGRES_STEPS, SQLITE_STEPS

from meshctl.state import MIGRATIONS
from meshctl.state.dialect import Syntax
from meshctl.state.migrations import render
from meshctl.state.postgres_dialect import SYNTAX as POSTGRES
from meshctl.state.sqlite_dialect import SYNTAX as SQLITE

pytestmark = pytest.mark.unit

DIALECTS = [
    pytest.param(SQLITE, SQLITE_STEPS, id="sqlite"),
    pytest.param(POSTGRES, POSTGRES_STEPS, id="postgres"),
]


def _words(sql: str) -> str:
    """The SQL with its layout dropped: the same words, one space between."""
    return " ".join(sql.split())


@pytest.mark.parametrize(("syntax", "released"), DIALECTS)
def test_every_step_is_the_released_step_of_each_dialect(
    syntax: Syntax, released: tuple[str, ...]
) -> None:
    assert len(MIGRATIONS) == len(released)
    for number, (step, was) in enumerate(zip(MIGRATIONS, released, strict=True), 1):
        assert _words(render(step, syntax.types)) == _words(was), f"step {number}"


@pytest.mark.parametrize("syntax", [SQLITE, POSTGRES], ids=["sqlite", "postgres"])
def test_a_step_without_a_type_name_is_the_same_everywhere(syntax: Syntax) -> None:
    plain = "CREATE INDEX jobs_name ON jobs (name); ALTER TABLE t ADD COLUMN d TEXT DEFAULT '{}';"
    assert render(plain, syntax.types) == plain
    assert render("SELECT $$1", syntax.types) == "SELECT $1"


def test_a_type_name_no_dialect_knows_is_an_error() -> None:
    with pytest.raises(KeyError, match="money"):
        render("CREATE TABLE t (x $money);", SQLITE.types)
