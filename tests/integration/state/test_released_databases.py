"""Databases made by the meshctl that kept two lists of migrations (one per database, up to
commit 23ff4e3) open with today's store, at every version they can be at, and upgrade to the
schema a new database gets: no step run twice (a table made again would fail), none skipped
(the schema would differ), their data kept. The old steps are ``tests/released_migrations.py``,
applied as that meshctl applied them, the number of steps recorded where it recorded it
(SQLite: ``PRAGMA user_version``; Postgres: the table ``meshctl_schema``)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pgserver import PgServer
from released_migrations import POSTGRES_STEPS, POSTGRES_VERSION_TABLE, SQLITE_STEPS

from meshctl.state import MIGRATIONS, Event, JobRecord, JobState, SqliteStore
from meshctl.state.postgres_dialect import PostgresStore, schema_version

pytestmark = pytest.mark.integration

JOB = JobRecord("j1", "train", "ml", JobState.PENDING, 1, {"counter": 0}, None, 1.0, 1.0)
VERSIONS = range(len(SQLITE_STEPS) + 1)
# A job and an event as the first schema holds them (columns named: any later schema takes them).
INSERT_JOB = (
    "INSERT INTO jobs (id, name, team, state, priority, spec, pool, submitted_at_s, "
    "updated_at_s, version) VALUES ('j1', 'train', 'ml', 'pending', 1, '{\"counter\":0}', NULL, "
    "1.0, 1.0, 1)"
)
INSERT_EVENT = (
    "INSERT INTO events (at_s, kind, job_id, message, data) VALUES (1.0, 'made', 'j1', 'm', '{}')"
)


def test_the_released_lists_are_as_long_as_today_s() -> None:
    assert len(SQLITE_STEPS) == len(POSTGRES_STEPS) == len(MIGRATIONS)


def _check_data(store: SqliteStore | PostgresStore, version: int) -> None:
    """What the released schema held is read back, and the logs go on after it."""
    if version == 0:
        assert store.get(JobRecord, "j1") is None
        return
    assert store.get(JobRecord, "j1") == replace(JOB, version=1)
    assert [e.message for e in store.events()] == ["m"]
    assert store.append_event(Event(2.0, "later", "j1", "n")).seq > store.events()[0].seq
    assert store.update(JOB, expected_version=1).version == 2


# --- SQLite ------------------------------------------------------------------------------------


def _released_sqlite(path: Path, version: int) -> None:
    """A file as the released meshctl left it after ``version`` steps."""
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("PRAGMA journal_mode = WAL")
        for number, step in enumerate(SQLITE_STEPS[:version], 1):
            conn.executescript(f"BEGIN IMMEDIATE; {step} PRAGMA user_version = {number}; COMMIT;")
        if version:
            conn.execute(INSERT_JOB)
            conn.execute(INSERT_EVENT)


def _sqlite_schema(path: Path) -> tuple[int, dict[tuple[str, str], str]]:
    """The file's version and each table's and index's SQL, its layout dropped."""
    with closing(sqlite3.connect(path)) as conn:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        rows = conn.execute("SELECT type, name, sql FROM sqlite_master").fetchall()
    return version, {(kind, name): " ".join(str(sql).split()) for kind, name, sql in rows}


@pytest.mark.parametrize("version", VERSIONS)
def test_a_released_sqlite_file_opens_and_upgrades(tmp_path: Path, version: int) -> None:
    released, fresh, upgraded = tmp_path / "all.db", tmp_path / "new.db", tmp_path / "state.db"
    _released_sqlite(released, len(SQLITE_STEPS))
    SqliteStore(fresh).close()
    _released_sqlite(upgraded, version)
    assert _sqlite_schema(upgraded)[0] == version
    with SqliteStore(upgraded) as store:
        _check_data(store, version)
    assert _sqlite_schema(upgraded) == _sqlite_schema(released) == _sqlite_schema(fresh)
    assert _sqlite_schema(upgraded)[0] == len(MIGRATIONS)


# --- Postgres ----------------------------------------------------------------------------------


@contextmanager
def _raw(url: str) -> Iterator[psycopg.Connection[tuple[Any, ...]]]:
    with psycopg.connect(url, autocommit=True) as conn:
        yield conn


def _released_postgres(url: str, version: int) -> None:
    """A database as the released meshctl left it after ``version`` steps."""
    if version == 0:
        return  # it made nothing before its first step
    with _raw(url) as conn:
        with conn.transaction():
            conn.execute(POSTGRES_VERSION_TABLE)
        for number, step in enumerate(POSTGRES_STEPS[:version], 1):
            with conn.transaction():
                conn.execute(step)
                conn.execute("UPDATE meshctl_schema SET version = %s", (number,))
        conn.execute(INSERT_JOB)
        conn.execute(INSERT_EVENT)


COLUMNS = (
    "SELECT table_name, column_name, ordinal_position, data_type, is_nullable, column_default, "
    "collation_name, is_identity, identity_generation FROM information_schema.columns "
    "WHERE table_schema = 'public'"
)
INDEXES = "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'public'"
CONSTRAINTS = (
    "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) FROM pg_constraint "
    "WHERE connamespace = 'public'::regnamespace"
)


def _pg_schema(url: str) -> tuple[int, set[tuple[Any, ...]], set[tuple[Any, ...]], set[Any]]:
    """The database's version, columns (with type, nullability, default, collation, identity),
    indexes and constraints."""
    with _raw(url) as conn:
        return (
            schema_version(conn),
            set(conn.execute(COLUMNS).fetchall()),
            set(conn.execute(INDEXES).fetchall()),
            set(conn.execute(CONSTRAINTS).fetchall()),
        )


@pytest.fixture(scope="module")
def schemas(postgres: PgServer) -> dict[str, Any]:
    """The schema of a database the released steps made in full, and of a new one."""
    released, fresh = postgres.database(), postgres.database()
    _released_postgres(released, len(POSTGRES_STEPS))
    PostgresStore(fresh).close()
    return {"released": _pg_schema(released), "fresh": _pg_schema(fresh)}


@pytest.mark.parametrize("version", VERSIONS)
def test_a_released_postgres_database_opens_and_upgrades(
    pg_url: str, schemas: dict[str, Any], version: int
) -> None:
    _released_postgres(pg_url, version)
    assert _pg_schema(pg_url)[0] == version
    with PostgresStore(pg_url) as store:
        _check_data(store, version)
    upgraded = _pg_schema(pg_url)
    assert upgraded == schemas["released"] == schemas["fresh"]
    assert upgraded[0] == len(MIGRATIONS)
