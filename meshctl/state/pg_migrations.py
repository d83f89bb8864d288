"""Schema migrations of a Postgres state database.

``PG_MIGRATIONS[i]`` is the Postgres form of ``migrations.MIGRATIONS[i]``: the same tables,
columns and indexes, step for step, so a schema version means the same on both backends. The
types differ where SQLite's would lose something: ``DOUBLE PRECISION`` for its ``REAL`` (a
timestamp round-trips bit-exact), ``BIGINT`` for its ``INTEGER``, ``BOOLEAN`` for a flag, an
identity column for a log's ``seq``, and keys collated ``"C"`` (ordered by code point, as
SQLite and the in-memory store order them, whatever the database's own collation).

The table ``meshctl_schema`` holds the number of steps applied. Each step runs in its own
transaction together with its version bump: a failed step rolls back only itself, and the steps
before it stay applied. Openers that find work to do take a session advisory lock first, so two
processes never migrate at once. Steps are append-only: never edit a released step.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from meshctl.state.migrations import check_not_newer
from meshctl.state.store import StoreError

if TYPE_CHECKING:
    import psycopg

MIGRATE_LOCK = 0x6D657368_6D696772  # "meshmigr": the advisory lock key of a migration

PG_MIGRATIONS: tuple[str, ...] = (
    # 1: the tables.
    """
    CREATE TABLE jobs (
        id TEXT COLLATE "C" PRIMARY KEY, name TEXT NOT NULL, team TEXT NOT NULL,
        state TEXT NOT NULL, priority BIGINT NOT NULL, spec TEXT NOT NULL, pool TEXT,
        submitted_at_s DOUBLE PRECISION NOT NULL, updated_at_s DOUBLE PRECISION NOT NULL,
        version BIGINT NOT NULL
    );
    CREATE TABLE attempts (
        id TEXT COLLATE "C" PRIMARY KEY, job_id TEXT NOT NULL, number BIGINT NOT NULL,
        pool TEXT NOT NULL, submission_id TEXT NOT NULL, state TEXT NOT NULL,
        started_at_s DOUBLE PRECISION, ended_at_s DOUBLE PRECISION, reason TEXT NOT NULL,
        version BIGINT NOT NULL
    );
    CREATE TABLE pools (
        name TEXT COLLATE "C" PRIMARY KEY, provider TEXT NOT NULL, state TEXT NOT NULL,
        observed TEXT NOT NULL, updated_at_s DOUBLE PRECISION NOT NULL, version BIGINT NOT NULL
    );
    CREATE TABLE nodes (
        id TEXT COLLATE "C" PRIMARY KEY, pool TEXT NOT NULL, state TEXT NOT NULL,
        labels TEXT NOT NULL, resources TEXT NOT NULL, updated_at_s DOUBLE PRECISION NOT NULL,
        version BIGINT NOT NULL
    );
    CREATE TABLE instances (
        id TEXT COLLATE "C" PRIMARY KEY, pool TEXT NOT NULL, provider TEXT NOT NULL,
        request_id TEXT NOT NULL, instance_type TEXT NOT NULL, state TEXT NOT NULL,
        launched_at_s DOUBLE PRECISION, updated_at_s DOUBLE PRECISION NOT NULL,
        version BIGINT NOT NULL
    );
    CREATE TABLE events (
        seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, at_s DOUBLE PRECISION NOT NULL,
        kind TEXT NOT NULL, job_id TEXT, message TEXT NOT NULL, data TEXT NOT NULL
    );
    CREATE TABLE decisions (
        seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, at_s DOUBLE PRECISION NOT NULL,
        job_id TEXT NOT NULL, outcome TEXT NOT NULL, policy_hash TEXT NOT NULL,
        explanation TEXT NOT NULL
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
    ALTER TABLE instances ADD COLUMN spot BOOLEAN NOT NULL DEFAULT FALSE;
    """,
    # 5: the lending ledger: an elastic job's nodes lent to jobs of higher priority.
    """
    CREATE TABLE loans (
        id TEXT COLLATE "C" PRIMARY KEY, lender TEXT NOT NULL, borrower TEXT NOT NULL,
        pool TEXT NOT NULL, node TEXT NOT NULL, gpus DOUBLE PRECISION NOT NULL,
        opened_at_s DOUBLE PRECISION NOT NULL, closed_at_s DOUBLE PRECISION,
        lost_gpu_s DOUBLE PRECISION NOT NULL, version BIGINT NOT NULL
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
        name TEXT COLLATE "C" PRIMARY KEY, role TEXT NOT NULL, teams TEXT NOT NULL,
        created_at_s DOUBLE PRECISION NOT NULL, updated_at_s DOUBLE PRECISION NOT NULL,
        version BIGINT NOT NULL
    );
    CREATE INDEX users_role ON users (role);
    CREATE TABLE tokens (
        id TEXT COLLATE "C" PRIMARY KEY, username TEXT NOT NULL, digest TEXT NOT NULL,
        created_at_s DOUBLE PRECISION NOT NULL, revoked_at_s DOUBLE PRECISION,
        version BIGINT NOT NULL
    );
    CREATE INDEX tokens_username ON tokens (username);
    CREATE TABLE audit (
        seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, at_s DOUBLE PRECISION NOT NULL,
        actor TEXT NOT NULL, role TEXT NOT NULL, action TEXT NOT NULL, target TEXT NOT NULL,
        outcome TEXT NOT NULL, detail TEXT NOT NULL
    );
    """,
    # 7: controllers that stand by: the lease one of them leads with, and the epoch of that
    # lease written with every attempt (a dispatch) and every decision.
    """
    CREATE TABLE leases (
        name TEXT COLLATE "C" PRIMARY KEY, holder TEXT NOT NULL, epoch BIGINT NOT NULL,
        expires_at_s DOUBLE PRECISION NOT NULL, version BIGINT NOT NULL
    );
    ALTER TABLE attempts ADD COLUMN epoch BIGINT NOT NULL DEFAULT 0;
    ALTER TABLE decisions ADD COLUMN epoch BIGINT NOT NULL DEFAULT 0;
    """,
    # 8: a job's files, as the API server took them in (a gzipped tar), for controllers on
    # other hosts than the server's.
    """
    CREATE TABLE packages (
        job_id TEXT COLLATE "C" PRIMARY KEY, archive BYTEA NOT NULL, sha256 TEXT NOT NULL,
        size BIGINT NOT NULL
    );
    """,
    # 9: jobs found by name (``meshctl jobs show NAME``, ``explain NAME``) without listing
    # them all.
    """
    CREATE INDEX jobs_name ON jobs (name);
    """,
)

_VERSION_TABLE = """
CREATE TABLE IF NOT EXISTS meshctl_schema (
    one BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (one), version BIGINT NOT NULL
);
INSERT INTO meshctl_schema (version) VALUES (0) ON CONFLICT (one) DO NOTHING;
"""


def schema_version(conn: psycopg.Connection[tuple[Any, ...]]) -> int:
    """How many steps the database has had (0: none, not even the version table)."""
    found = conn.execute("SELECT to_regclass('meshctl_schema') IS NOT NULL").fetchone()
    if not found or not found[0]:
        return 0
    row = conn.execute("SELECT version FROM meshctl_schema").fetchone()
    return 0 if row is None else int(row[0])


def migrate(
    conn: psycopg.Connection[tuple[Any, ...]],
    migrations: Sequence[str] = PG_MIGRATIONS,
    where: str = "the state database",
) -> int:
    """Apply the missing steps, each in its own transaction; return the version.

    ``conn`` must be in autocommit mode. ``where`` names the database in messages (never with
    its password). An up-to-date database takes no lock; a newer one is refused.
    """
    import psycopg

    target = len(migrations)
    try:
        current = schema_version(conn)
        check_not_newer(current, target, where)
        if current == target:
            return target
        conn.execute("SELECT pg_advisory_lock(%s)", (MIGRATE_LOCK,))
        try:
            return _apply_missing(conn, migrations, where)
        finally:
            if not conn.broken:
                conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATE_LOCK,))
    except psycopg.Error as exc:
        raise StoreError(f"cannot migrate {where} to schema version {target}: {exc}") from exc


def _apply_missing(
    conn: psycopg.Connection[tuple[Any, ...]], migrations: Sequence[str], where: str
) -> int:
    """The steps after the stored version, under the migration lock."""
    import psycopg

    target = len(migrations)
    with conn.transaction():
        conn.execute(_VERSION_TABLE)
    current = schema_version(conn)  # again: another process may have migrated it meanwhile
    check_not_newer(current, target, where)
    for number in range(current + 1, target + 1):
        try:
            with conn.transaction():
                conn.execute(migrations[number - 1])
                conn.execute("UPDATE meshctl_schema SET version = %s", (number,))
        except psycopg.Error as exc:
            raise StoreError(f"{where} migration step {number} failed: {exc}") from exc
    return target
