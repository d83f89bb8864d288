"""Schema migrations of ``state.db``.

``MIGRATIONS[i]`` takes the schema from version ``i`` to ``i + 1``; ``PRAGMA user_version``
records how many steps a file has had. Steps are append-only: never edit a released step, add a
new one. Opening a file applies every missing step in one transaction; a file whose version is
newer than ``len(MIGRATIONS)`` belongs to a newer meshctl and is refused.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence

from meshctl.state.store import StoreError

MIGRATIONS: tuple[str, ...] = (
    # 1: the tables.
    """
    CREATE TABLE jobs (
        id TEXT PRIMARY KEY, name TEXT NOT NULL, team TEXT NOT NULL, state TEXT NOT NULL,
        priority INTEGER NOT NULL, spec TEXT NOT NULL, pool TEXT,
        submitted_at_s REAL NOT NULL, updated_at_s REAL NOT NULL, version INTEGER NOT NULL
    );
    CREATE TABLE attempts (
        id TEXT PRIMARY KEY, job_id TEXT NOT NULL, number INTEGER NOT NULL, pool TEXT NOT NULL,
        submission_id TEXT NOT NULL, state TEXT NOT NULL, started_at_s REAL, ended_at_s REAL,
        reason TEXT NOT NULL, version INTEGER NOT NULL
    );
    CREATE TABLE pools (
        name TEXT PRIMARY KEY, provider TEXT NOT NULL, state TEXT NOT NULL,
        observed TEXT NOT NULL, updated_at_s REAL NOT NULL, version INTEGER NOT NULL
    );
    CREATE TABLE nodes (
        id TEXT PRIMARY KEY, pool TEXT NOT NULL, state TEXT NOT NULL, labels TEXT NOT NULL,
        resources TEXT NOT NULL, updated_at_s REAL NOT NULL, version INTEGER NOT NULL
    );
    CREATE TABLE instances (
        id TEXT PRIMARY KEY, pool TEXT NOT NULL, provider TEXT NOT NULL,
        request_id TEXT NOT NULL, instance_type TEXT NOT NULL, state TEXT NOT NULL,
        launched_at_s REAL, updated_at_s REAL NOT NULL, version INTEGER NOT NULL
    );
    CREATE TABLE events (
        seq INTEGER PRIMARY KEY AUTOINCREMENT, at_s REAL NOT NULL, kind TEXT NOT NULL,
        job_id TEXT, message TEXT NOT NULL, data TEXT NOT NULL
    );
    CREATE TABLE decisions (
        seq INTEGER PRIMARY KEY AUTOINCREMENT, at_s REAL NOT NULL, job_id TEXT NOT NULL,
        outcome TEXT NOT NULL, policy_hash TEXT NOT NULL, explanation TEXT NOT NULL
    );
    """,
    # 2: indexes on the columns Store.list and the log queries filter on.
    """
    CREATE INDEX jobs_state ON jobs (state);
    CREATE INDEX jobs_team ON jobs (team);
    CREATE INDEX jobs_pool ON jobs (pool);
    CREATE INDEX attempts_job_id ON attempts (job_id);
    CREATE INDEX attempts_state ON attempts (state);
    CREATE INDEX pools_provider ON pools (provider);
    CREATE INDEX pools_state ON pools (state);
    CREATE INDEX nodes_pool ON nodes (pool);
    CREATE INDEX nodes_state ON nodes (state);
    CREATE INDEX instances_pool ON instances (pool);
    CREATE INDEX instances_state ON instances (state);
    CREATE INDEX events_job_id ON events (job_id, seq);
    CREATE INDEX decisions_job_id ON decisions (job_id, seq);
    """,
    # 3: what the controller keeps beside an attempt (its placement, the deadline of a stop)
    # and a node (when its drain ends, why it was cordoned).
    """
    ALTER TABLE attempts ADD COLUMN detail TEXT NOT NULL DEFAULT '{}';
    ALTER TABLE nodes ADD COLUMN detail TEXT NOT NULL DEFAULT '{}';
    """,
    # 4: whether a cloud instance is spot (its price differs).
    """
    ALTER TABLE instances ADD COLUMN spot INTEGER NOT NULL DEFAULT 0;
    """,
    # 5: the lending ledger: an elastic job's nodes lent to jobs of higher priority.
    """
    CREATE TABLE loans (
        id TEXT PRIMARY KEY, lender TEXT NOT NULL, borrower TEXT NOT NULL, pool TEXT NOT NULL,
        node TEXT NOT NULL, gpus REAL NOT NULL, opened_at_s REAL NOT NULL, closed_at_s REAL,
        lost_gpu_s REAL NOT NULL, version INTEGER NOT NULL
    );
    CREATE INDEX loans_lender ON loans (lender);
    CREATE INDEX loans_borrower ON loans (borrower);
    CREATE INDEX loans_pool ON loans (pool);
    """,
    # 6: a shared mesh: who submitted a job, the users and their API tokens (digests only),
    # and the audit log of administrative actions.
    """
    ALTER TABLE jobs ADD COLUMN owner TEXT NOT NULL DEFAULT '';
    CREATE INDEX jobs_owner ON jobs (owner);
    CREATE TABLE users (
        name TEXT PRIMARY KEY, role TEXT NOT NULL, teams TEXT NOT NULL,
        created_at_s REAL NOT NULL, updated_at_s REAL NOT NULL, version INTEGER NOT NULL
    );
    CREATE INDEX users_role ON users (role);
    CREATE TABLE tokens (
        id TEXT PRIMARY KEY, username TEXT NOT NULL, digest TEXT NOT NULL,
        created_at_s REAL NOT NULL, revoked_at_s REAL, version INTEGER NOT NULL
    );
    CREATE INDEX tokens_username ON tokens (username);
    CREATE TABLE audit (
        seq INTEGER PRIMARY KEY AUTOINCREMENT, at_s REAL NOT NULL, actor TEXT NOT NULL,
        role TEXT NOT NULL, action TEXT NOT NULL, target TEXT NOT NULL, outcome TEXT NOT NULL,
        detail TEXT NOT NULL
    );
    """,
    # 7: controllers that stand by: the lease one of them leads with, and the epoch of that
    # lease written with every attempt (a dispatch) and every decision.
    """
    CREATE TABLE leases (
        name TEXT PRIMARY KEY, holder TEXT NOT NULL, epoch INTEGER NOT NULL,
        expires_at_s REAL NOT NULL, version INTEGER NOT NULL
    );
    ALTER TABLE attempts ADD COLUMN epoch INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE decisions ADD COLUMN epoch INTEGER NOT NULL DEFAULT 0;
    """,
    # 8: a job's files, as the API server took them in (a gzipped tar), for controllers on
    # other hosts than the server's.
    """
    CREATE TABLE packages (
        job_id TEXT PRIMARY KEY, archive BLOB NOT NULL, sha256 TEXT NOT NULL,
        size INTEGER NOT NULL
    );
    """,
    # 9: jobs found by name (``meshctl jobs show NAME``, ``explain NAME``) without listing
    # them all.
    """
    CREATE INDEX jobs_name ON jobs (name);
    """,
)


def statements(script: str) -> Iterator[str]:
    """Split a SQL script into complete statements (``;`` inside literals is kept)."""
    pending = ""
    for chunk in script.split(";"):
        pending += chunk + ";"
        if sqlite3.complete_statement(pending):
            if pending.strip(" \t\r\n;"):
                yield pending.strip()
            pending = ""
    if pending.strip(" \t\r\n;"):
        raise StoreError(f"incomplete SQL statement in migration: {pending.strip()!r}")


def schema_version(conn: sqlite3.Connection) -> int:
    """The ``user_version`` of the open database."""
    version: int = conn.execute("PRAGMA user_version").fetchone()[0]
    return version


def check_not_newer(version: int, known: int, what: str = "state.db") -> None:
    """Refuse a database (``what``: how messages name it) written by a newer meshctl."""
    if version > known:
        raise StoreError(
            f"{what} schema version {version} is newer than this meshctl ({known}); upgrade meshctl"
        )


def _apply(conn: sqlite3.Connection, number: int, script: str) -> None:
    try:
        for statement in statements(script):
            conn.execute(statement)
    except sqlite3.Error as exc:
        raise StoreError(f"state.db migration step {number} failed: {exc}") from exc


def migrate(conn: sqlite3.Connection, migrations: Sequence[str] = MIGRATIONS) -> int:
    """Apply the missing steps, each in its own ``BEGIN IMMEDIATE`` transaction with the
    version it brings the file to; return the version.

    ``conn`` must be in autocommit mode (``isolation_level=None``). A step that fails is
    rolled back (the steps before it stay) and raises ``StoreError``; an up-to-date file
    takes no write lock.
    """
    target = len(migrations)
    try:
        if schema_version(conn) == target:
            return target
        check_not_newer(schema_version(conn), target)
        while True:
            conn.execute("BEGIN IMMEDIATE")
            try:
                current = schema_version(conn)  # again: another process may have migrated it
                check_not_newer(current, target)
                if current == target:
                    conn.execute("COMMIT")
                    return target
                _apply(conn, current + 1, migrations[current])
                conn.execute(f"PRAGMA user_version = {current + 1:d}")
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
    except sqlite3.Error as exc:
        raise StoreError(f"cannot migrate state.db to schema version {target}: {exc}") from exc
