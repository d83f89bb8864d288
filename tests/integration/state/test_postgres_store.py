"""``PostgresStore`` against a real server: its migrations, reconnecting, log appends that
commit in seq order, the password kept out of messages, ``open_store_at``.

The server is the run's throwaway one (``tests/pgserver.py``); ``pg_url`` is an empty database.
"""

from __future__ import annotations

import multiprocessing
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pgserver import PgServer

from meshctl.errors import InvalidInput
from meshctl.state import (
    MIGRATIONS,
    ConflictError,
    Event,
    JobRecord,
    JobState,
    StoreError,
    open_store_at,
)
from meshctl.state.migrations import render
from meshctl.state.postgres_dialect import PostgresStore, redact, schema_version
from meshctl.state.sqlite_dialect import SYNTAX as SQLITE

pytestmark = pytest.mark.integration

JOB = JobRecord("j1", "train", "ml", JobState.PENDING, 1, {"counter": 0}, None, 1.0, 1.0)


@contextmanager
def _raw(url: str) -> Iterator[psycopg.Connection[tuple[Any, ...]]]:
    with psycopg.connect(url, autocommit=True) as conn:
        yield conn


def _version(url: str) -> int:
    with _raw(url) as conn:
        return schema_version(conn)


def _pg_shape(url: str) -> tuple[dict[str, set[tuple[str, bool]]], dict[str, list[str]]]:
    """Tables (their columns, each with NOT NULL) and indexes (their columns) of a database."""
    with _raw(url) as conn:
        tables: dict[str, set[tuple[str, bool]]] = {}
        for table, column, nullable in conn.execute(
            "SELECT table_name, column_name, is_nullable FROM information_schema.columns "
            "WHERE table_schema = 'public' AND table_name <> 'meshctl_schema'"
        ):
            tables.setdefault(table, set()).add((column, nullable == "NO"))
        indexes = dict(
            conn.execute(
                "SELECT ic.relname, array_agg(a.attname::text ORDER BY k.n) FROM pg_index x "
                "JOIN pg_class ic ON ic.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid "
                "JOIN pg_namespace ns ON ns.oid = t.relnamespace "
                "CROSS JOIN LATERAL unnest(x.indkey) WITH ORDINALITY AS k(attnum, n) "
                "JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = k.attnum "
                "WHERE ns.nspname = 'public' AND NOT x.indisprimary "
                "AND t.relname <> 'meshctl_schema' GROUP BY ic.relname"
            ).fetchall()
        )
    return tables, indexes


def _sqlite_shape(steps: int) -> tuple[dict[str, set[tuple[str, bool]]], dict[str, list[str]]]:
    conn = sqlite3.connect(":memory:")
    try:
        for script in MIGRATIONS[:steps]:
            conn.executescript(render(script, SQLITE.types))
        names = conn.execute("SELECT type, name FROM sqlite_master").fetchall()
        tables = {
            name: {(c[1], bool(c[3] or c[5])) for c in conn.execute(f"PRAGMA table_info({name})")}
            for kind, name in names
            if kind == "table" and not name.startswith("sqlite_")
        }
        indexes = {
            name: [c[2] for c in conn.execute(f"PRAGMA index_info({name})")]
            for kind, name in names
            if kind == "index" and not name.startswith("sqlite_")
        }
    finally:
        conn.close()
    return tables, indexes


# --- schema versions --------------------------------------------------------------------------


def test_every_step_means_what_the_sqlite_step_means(postgres: PgServer, pg_url: str) -> None:
    """After each step, the same tables, columns (and which are NOT NULL) and indexes."""
    for steps in range(1, len(MIGRATIONS) + 1):
        PostgresStore(postgres.clean(pg_url), migrations=MIGRATIONS[:steps]).close()
        assert _pg_shape(pg_url) == _sqlite_shape(steps), f"after step {steps}"


def test_a_fresh_database_gets_every_step(pg_url: str) -> None:
    PostgresStore(pg_url).close()
    assert _version(pg_url) == len(MIGRATIONS)
    tables, indexes = _pg_shape(pg_url)
    assert set(tables) == {
        "jobs", "attempts", "pools", "nodes", "instances", "loans", "events", "decisions",
        "users", "tokens", "audit", "leases", "packages",
    }  # fmt: skip
    assert {"jobs_state", "nodes_pool", "events_job_id", "jobs_owner"} <= set(indexes)


def test_an_older_database_is_migrated_and_keeps_its_data(pg_url: str) -> None:
    PostgresStore(pg_url, migrations=MIGRATIONS[:1]).close()
    with _raw(pg_url) as conn:  # a row as the first schema had it (no owner)
        conn.execute(
            "INSERT INTO jobs VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, 1)",
            (JOB.id, JOB.name, JOB.team, JOB.state.value, JOB.priority, '{"counter":0}',
             JOB.pool, JOB.submitted_at_s, JOB.updated_at_s),
        )  # fmt: skip
    assert _version(pg_url) == 1
    with PostgresStore(pg_url) as store:
        assert store.get(JobRecord, "j1") == replace(JOB, version=1)
        assert store.list(JobRecord, owner="") == [replace(JOB, version=1)]
    assert _version(pg_url) == len(MIGRATIONS)


def test_a_failed_step_rolls_back_only_itself(pg_url: str) -> None:
    PostgresStore(pg_url).close()
    extra = "CREATE TABLE extra (x TEXT);"
    broken = (*MIGRATIONS, extra, "CREATE TABLE half (x TEXT); CREATE TABLE broken (;")
    with pytest.raises(StoreError, match=rf"migration step {len(MIGRATIONS) + 2} failed"):
        PostgresStore(pg_url, migrations=broken)
    assert _version(pg_url) == len(MIGRATIONS) + 1  # the good step stays applied
    tables, _ = _pg_shape(pg_url)
    assert "extra" in tables
    assert "half" not in tables  # the failed step's first statement was rolled back
    with PostgresStore(pg_url, migrations=(*MIGRATIONS, extra)) as store:
        assert store.list(JobRecord) == []


def test_a_newer_database_is_refused(pg_url: str) -> None:
    PostgresStore(pg_url).close()
    newer = len(MIGRATIONS) + 3
    with _raw(pg_url) as conn:
        conn.execute("UPDATE meshctl_schema SET version = %s", (newer,))
    with pytest.raises(StoreError) as info:
        PostgresStore(pg_url)
    assert str(info.value) == (
        f"state store {redact(pg_url)} schema version {newer} is newer than this meshctl "
        f"({len(MIGRATIONS)}); upgrade meshctl"
    )
    assert _version(pg_url) == newer


def _open(url: str, barrier: Any) -> None:
    barrier.wait(timeout=60)
    PostgresStore(url).close()


def test_processes_opening_a_new_database_together_all_open_it(pg_url: str) -> None:
    """The migration lock: without it, two would create the same tables at once."""
    with _processes(_open, [(pg_url,)] * 4):
        pass
    assert _version(pg_url) == len(MIGRATIONS)


@contextmanager
def _processes(target: Any, arg_sets: list[tuple[Any, ...]]) -> Iterator[list[Any]]:
    """``target(*args, barrier)`` in one spawned process per arg set, all at once; each must
    exit 0 by the end of the block."""
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(len(arg_sets))
    procs = [ctx.Process(target=target, args=(*args, barrier)) for args in arg_sets]
    for proc in procs:
        proc.start()
    try:
        yield procs
    finally:
        for proc in procs:
            proc.join(timeout=120)
    assert [p.exitcode for p in procs] == [0] * len(procs)


# --- log appends commit in seq order ----------------------------------------------------------

WRITERS, WRITES, PER_WRITE = 3, 40, 5


def _write_batches(url: str, tag: str, barrier: Any) -> None:
    """Update one job ``WRITES`` times, each write appending ``PER_WRITE`` events."""
    with PostgresStore(url) as store:
        job = store.create(replace(JOB, id=tag))
        barrier.wait(timeout=60)
        for i in range(WRITES):
            events = [Event(1.0, "t", tag, f"{tag}-{i}-{k}") for k in range(PER_WRITE)]
            job = store.update(job, expected_version=job.version, events=events)


def test_a_tailing_reader_sees_every_entry_once(pg_url: str) -> None:
    """Writers in processes append while a reader tails with ``after_seq``: with seqs committed
    out of order, the reader would step past an entry that commits later and never see it."""
    tags = "abcdefgh"[:WRITERS]
    expected = {f"{t}-{i}-{k}" for t in tags for i in range(WRITES) for k in range(PER_WRITE)}
    seen: list[str] = []
    with PostgresStore(pg_url) as reader:
        with _processes(_write_batches, [(pg_url, tag) for tag in tags]) as procs:
            last, deadline = 0, time.monotonic() + 120
            while len(seen) < len(expected) and time.monotonic() < deadline:
                done = all(p.exitcode is not None for p in procs)
                found = reader.events(after_seq=last)
                if done and not found:
                    break  # the writers are done, nothing is left: what was missed stays missed
                seen.extend(e.message for e in found)
                last = found[-1].seq if found else last
        in_order = [e.message for e in reader.events()]
    assert len(seen) == len(set(seen))
    assert set(seen) == expected, f"missed {len(expected - set(seen))} entries"
    assert seen == in_order


# --- connections ------------------------------------------------------------------------------


def _kill_store_connections(postgres: PgServer, url: str) -> int:
    database = url.rsplit("/", 1)[1]
    rows = postgres.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        f"WHERE application_name = 'meshctl' AND datname = '{database}'"
    )
    return len(rows)


def test_a_killed_connection_is_replaced_on_the_next_call(postgres: PgServer, pg_url: str) -> None:
    with PostgresStore(pg_url) as store:
        created = store.create(JOB)
        assert _kill_store_connections(postgres, pg_url) == 1
        assert store.get(JobRecord, "j1") == created  # a read: tried again on a new connection
        assert _kill_store_connections(postgres, pg_url) == 1
        updated = store.update(JOB, expected_version=1)  # BEGIN failed: nothing was written
        assert store.get(JobRecord, "j1") == updated


def test_the_store_reconnects_after_a_server_restart(postgres: PgServer, pg_url: str) -> None:
    with PostgresStore(pg_url, connect_timeout_s=2) as store:
        store.create(JOB)
        postgres.stop("fast")
        try:
            with pytest.raises(StoreError, match="cannot open state store") as info:
                store.get(JobRecord, "j1")
            assert postgres.password not in str(info.value)
            assert redact(pg_url) in str(info.value)
        finally:
            postgres.start()
        assert store.get(JobRecord, "j1") == replace(JOB, version=1)
        assert store.append_event(Event(1.0, "t", "j1", "after")).seq == 1


@pytest.mark.parametrize("where", ["user", "query"])
def test_a_wrong_password_is_never_shown(postgres: PgServer, where: str) -> None:
    secret = "Wr0ng%2Fpass"  # also as decoded: Wr0ng/pass
    good = postgres.url()
    if where == "user":
        url = good.replace(postgres.password, secret)
    else:
        url = good.replace(f":{postgres.password}@", "@") + f"?password={secret}"
    with pytest.raises(StoreError, match="cannot open state store") as info:
        PostgresStore(url)
    message = str(info.value)
    assert "password authentication failed" in message
    assert "***" in message
    for shown in (secret, "Wr0ng/pass", postgres.password):
        assert shown not in message
    assert info.value.__cause__ is None  # no chained error to print the URL as given


REDACT_CASES = [
    pytest.param("postgresql://u:p%40ss@h:5432/db", "postgresql://u:***@h:5432/db", id="user"),
    pytest.param("postgresql://u@h/db?password=x&sslmode=require",
                 "postgresql://u@h/db?password=***&sslmode=require", id="query"),
    pytest.param("postgres://h/db", "postgres://h/db", id="none"),
]  # fmt: skip


@pytest.mark.parametrize(("url", "shown"), REDACT_CASES)
def test_redact(url: str, shown: str) -> None:
    assert redact(url) == shown


def _hold_row(url: str, locked: threading.Event, release: threading.Event) -> None:
    with _raw(url) as conn, conn.transaction():
        conn.execute("UPDATE jobs SET name = 'held' WHERE id = 'j1'")
        locked.set()
        release.wait(timeout=60)


def test_a_write_held_by_a_row_lock_past_busy_timeout_fails(pg_url: str) -> None:
    with PostgresStore(pg_url, busy_timeout_s=0.2) as store:
        store.create(JOB)
        locked, release = threading.Event(), threading.Event()
        holder = threading.Thread(target=_hold_row, args=(pg_url, locked, release))
        holder.start()
        try:
            assert locked.wait(timeout=30)
            with pytest.raises(StoreError, match="locked past busy_timeout_s"):
                store.update(JOB, expected_version=1, events=[Event(1.0, "t", "j1", "no")])
        finally:
            release.set()
            holder.join()
        assert store.events() == []
        assert store.update(JOB, expected_version=1).version == 2


def test_a_nul_character_is_a_store_error_and_nothing_is_written(pg_url: str) -> None:
    """Postgres text cannot hold NUL (SQLite's can); JSON payloads escape it and are fine."""
    with PostgresStore(pg_url) as store:
        with pytest.raises(StoreError):
            store.create(replace(JOB, name="a\x00b"), events=[Event(1.0, "t", "j1", "x")])
        assert store.get(JobRecord, "j1") is None
        assert store.events() == []
        assert store.create(replace(JOB, spec={"s": "a\x00b"})).spec == {"s": "a\x00b"}


def test_data_survives_close_and_reopen(pg_url: str) -> None:
    with PostgresStore(pg_url) as store:
        job = store.create(JOB, events=[Event(1.0, "made", "j1", "m", {"k": [1]})])
        events = store.events()
    with PostgresStore(pg_url) as store:
        assert store.get(JobRecord, "j1") == job
        assert store.events() == events
        with pytest.raises(ConflictError):
            store.create(JOB)
        assert store.append_event(Event(9.0, "later", None, "m")).seq > events[-1].seq


# --- open_store_at ----------------------------------------------------------------------------


@pytest.mark.parametrize("scheme", ["postgresql://", "postgres://"])
def test_open_store_at_opens_a_postgres_url(pg_url: str, scheme: str, tmp_path: Path) -> None:
    url = pg_url.replace("postgresql://", scheme)
    with open_store_at(url, tmp_path / "home") as store:
        assert isinstance(store, PostgresStore)
        assert store.url == redact(url)
        store.create(JOB)
    assert not (tmp_path / "home").exists()
    with PostgresStore(pg_url) as store:
        assert store.get(JobRecord, "j1") is not None


def test_open_store_at_refuses_another_scheme(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match=r"expected a postgresql:// URL.*got a mysql:// URL"):
        open_store_at("mysql://u:secret@h/db", tmp_path)
