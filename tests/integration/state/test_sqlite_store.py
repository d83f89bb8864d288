"""``SqliteStore`` against real files: WAL, migrations, several processes, reopening."""

from __future__ import annotations

import json
import multiprocessing
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from meshctl.state import (
    MIGRATIONS,
    AttemptRecord,
    ConflictError,
    Decision,
    Event,
    InstanceRecord,
    JobRecord,
    JobState,
    NodeRecord,
    PoolRecord,
    Record,
    SqliteStore,
    StoreError,
    open_store,
)

pytestmark = pytest.mark.integration

JOB = JobRecord("j1", "train", "ml", JobState.PENDING, 1, {"counter": 0}, None, 1.0, 1.0)


@contextmanager
def _raw(path: Path) -> Iterator[sqlite3.Connection]:
    """A plain autocommit connection, closed on exit (sqlite3's own ``with`` does not close)."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        yield conn
    finally:
        conn.close()


def _user_version(path: Path) -> int:
    with _raw(path) as conn:
        version: int = conn.execute("PRAGMA user_version").fetchone()[0]
    return version


def _names(path: Path, type_: str) -> set[str]:
    with _raw(path) as conn:
        rows = conn.execute("SELECT name FROM sqlite_master WHERE type = ?", (type_,)).fetchall()
    return {name for (name,) in rows if not name.startswith("sqlite_")}


def test_open_store_creates_home_and_uses_wal(tmp_path: Path) -> None:
    home = tmp_path / "a" / "b"
    with open_store(home) as store:
        store.create(JOB)
        assert store.path == home / "state.db"
        assert (home / "state.db-wal").exists()
    with _raw(home / "state.db") as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_fresh_file_gets_every_migration(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    SqliteStore(path).close()
    assert _user_version(path) == len(MIGRATIONS)
    assert _names(path, "table") == {
        "jobs", "attempts", "pools", "nodes", "instances", "loans", "events", "decisions",
        "users", "tokens", "audit", "leases", "packages",
    }  # fmt: skip
    assert {"jobs_state", "nodes_pool", "events_job_id"} <= _names(path, "index")


def test_older_file_is_migrated_and_keeps_its_data(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    SqliteStore(path, migrations=MIGRATIONS[:1]).close()
    with _raw(path) as conn:  # a row as the first schema had it (no owner)
        conn.execute(
            "INSERT INTO jobs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 1)",
            (JOB.id, JOB.name, JOB.team, JOB.state.value, JOB.priority,
             json.dumps(JOB.spec), JOB.pool, JOB.submitted_at_s, JOB.updated_at_s),
        )  # fmt: skip
    assert _user_version(path) == 1
    assert _names(path, "index") == set()
    with SqliteStore(path) as store:
        assert store.get(JobRecord, "j1") == replace(JOB, version=1)
    assert _user_version(path) == len(MIGRATIONS)
    assert "jobs_state" in _names(path, "index")


def test_each_missing_step_applies_in_its_own_transaction(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    SqliteStore(path).close()
    extra = "CREATE TABLE extra (x TEXT);"
    broken = (*MIGRATIONS, extra, "CREATE TABLE half (x TEXT); CREATE TABLE broken (;")
    with pytest.raises(StoreError, match=rf"migration step {len(MIGRATIONS) + 2} failed"):
        SqliteStore(path, migrations=broken)
    assert _user_version(path) == len(MIGRATIONS) + 1  # the good step stays, with its version
    assert "extra" in _names(path, "table")
    assert "half" not in _names(path, "table")  # the failed step's first statement rolled back
    with SqliteStore(path, migrations=(*MIGRATIONS, extra, "CREATE TABLE half (x TEXT);")):
        pass
    assert _user_version(path) == len(MIGRATIONS) + 2
    assert "half" in _names(path, "table")


def test_damaged_job_files_are_an_error_not_files(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    with SqliteStore(path) as store:
        store.put_package("j1", b"files")
    with _raw(path) as conn:
        conn.execute("UPDATE packages SET archive = ? WHERE job_id = 'j1'", (b"filez",))
    with SqliteStore(path) as store, pytest.raises(StoreError, match=r"of job j1 .* damaged"):
        store.package("j1")


def test_newer_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    SqliteStore(path).close()
    newer = len(MIGRATIONS) + 3
    with _raw(path) as conn:
        conn.execute(f"PRAGMA user_version = {newer}")
    message = (
        f"state.db schema version {newer} is newer than this meshctl ({len(MIGRATIONS)}); "
        "upgrade meshctl"
    )
    with pytest.raises(StoreError) as info:
        SqliteStore(path)
    assert str(info.value) == message
    assert _user_version(path) == newer


def test_not_a_database_is_a_store_error(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    path.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError, match="cannot open state store"):
        SqliteStore(path)


def _hold_write_lock(path: Path, seconds: float, locked: threading.Event) -> None:
    with _raw(path) as conn:
        conn.execute("BEGIN IMMEDIATE")
        locked.set()
        time.sleep(seconds)
        conn.execute("COMMIT")


@pytest.mark.parametrize(
    ("busy_timeout_s", "succeeds"),
    [pytest.param(10.0, True, id="waits-for-the-lock"), pytest.param(0.05, False, id="gives-up")],
)
def test_writers_wait_for_busy_timeout(
    tmp_path: Path, busy_timeout_s: float, succeeds: bool
) -> None:
    path = tmp_path / "state.db"
    with SqliteStore(path, busy_timeout_s=busy_timeout_s) as store:
        locked = threading.Event()
        holder = threading.Thread(target=_hold_write_lock, args=(path, 0.3, locked))
        holder.start()
        locked.wait(timeout=10)
        try:
            if succeeds:
                assert store.create(JOB).version == 1
            else:
                with pytest.raises(StoreError, match="locked"):
                    store.create(JOB)
        finally:
            holder.join()


def test_data_survives_close_and_reopen(tmp_path: Path) -> None:
    records: list[Record] = [
        JOB,
        AttemptRecord("j1-1", "j1", 1, "onprem", "sub", "running", 2.0, None, "why"),
        PoolRecord("onprem", "slurm", "ready", {"gpus": [1, 2]}, 3.0),
        NodeRecord("n1", "onprem", "healthy", {"zone": "a"}, {"gpu": 8}, 4.0),
        InstanceRecord("i-1", "aws", "aws", "r-1", "p5.48xlarge", "running", 5.0, 6.0),
    ]
    path = tmp_path / "state.db"
    with SqliteStore(path) as store:
        created = [
            store.create(r, events=[Event(1.0, "made", "j1", "m", {"k": [1]})]) for r in records
        ]
        job = store.update(JOB, expected_version=1)
        decision = store.record_decision(Decision(7.0, "j1", "admit", "sha", {"why": "fits"}))
        events = store.events()
    with SqliteStore(path) as store:
        assert store.get(JobRecord, "j1") == job
        assert [store.get(type(r), getattr(r, "id", "onprem")) for r in created[1:]] == created[1:]
        assert store.events() == events
        assert store.decisions() == [decision]
        assert store.append_event(Event(9.0, "later", None, "m")).seq > events[-1].seq


# --- two processes ----------------------------------------------------------------------------


def _increment(path: str, barrier: Any, key: str, n: int) -> None:
    with SqliteStore(path) as store:
        barrier.wait(timeout=60)
        done = 0
        while done < n:
            current = store.get(JobRecord, key)
            assert current is not None
            bumped = replace(current, spec={"counter": current.spec["counter"] + 1})
            try:
                store.update(bumped, expected_version=current.version)
            except ConflictError:
                continue
            done += 1


def _append(path: str, barrier: Any, tag: str, n: int) -> None:
    with SqliteStore(path) as store:
        barrier.wait(timeout=60)
        for i in range(n):
            store.append_event(Event(float(i), "test", None, f"{tag}-{i}"))


def _run_two(target: Any, path: Path, args: list[tuple[Any, ...]]) -> None:
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(len(args))
    procs = [ctx.Process(target=target, args=(str(path), barrier, *a)) for a in args]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout=120)
    assert [p.exitcode for p in procs] == [0, 0]


def test_two_processes_never_lose_an_increment(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    with SqliteStore(path) as store:
        store.create(JOB)
    _run_two(_increment, path, [("j1", 50), ("j1", 50)])
    with SqliteStore(path) as store:
        final = store.get(JobRecord, "j1")
    assert final is not None
    assert final.spec["counter"] == 100
    assert final.version == 101


def test_two_processes_append_events_with_unique_increasing_seq(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    SqliteStore(path).close()
    _run_two(_append, path, [("a", 50), ("b", 50)])
    with SqliteStore(path) as store:
        events = store.events()
    seqs = [e.seq for e in events]
    assert len(events) == 100
    assert seqs == sorted(set(seqs))
    for tag in "ab":  # each writer's events keep their order
        assert [e.message for e in events if e.message[0] == tag] == [
            f"{tag}-{i}" for i in range(50)
        ]


def _open_new(folder: str, barrier: Any, rounds: int) -> None:
    for n in range(rounds):
        barrier.wait(timeout=60)
        SqliteStore(Path(folder) / f"{n}.db").close()


def test_processes_opening_a_new_store_together_all_open_it(tmp_path: Path) -> None:
    """Switching a new file to WAL answers "locked" without waiting; each open tries again."""
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(4)
    procs = [ctx.Process(target=_open_new, args=(str(tmp_path), barrier, 25)) for _ in range(4)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout=120)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    for n in range(25):
        with SqliteStore(tmp_path / f"{n}.db") as store:
            assert store.list(JobRecord) == []
