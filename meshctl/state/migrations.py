"""Schema migrations of a state database: one list for every dialect.

``MIGRATIONS[i]`` takes the schema from version ``i`` to ``i + 1``, the same tables, columns and
indexes in every database. A step is written once; where databases name a type differently it
says ``$name`` and the dialect's ``Syntax.types`` fills it in (write ``$$`` for a dollar sign),
SQLite's / Postgres's:

- ``$key``: ``TEXT`` / ``TEXT COLLATE "C"`` (keys ordered by code point in Postgres too, as
  SQLite and the memory store order them, whatever the database's collation);
- ``$int``: ``INTEGER`` / ``BIGINT``;
- ``$real``: ``REAL`` / ``DOUBLE PRECISION`` (a timestamp round-trips bit-exact);
- ``$seq``: ``INTEGER PRIMARY KEY AUTOINCREMENT`` / ``BIGINT GENERATED ALWAYS AS IDENTITY
  PRIMARY KEY`` (a log's position);
- ``$bool``, ``$false``: ``INTEGER``, ``0`` / ``BOOLEAN``, ``FALSE``;
- ``$bytes``: ``BLOB`` / ``BYTEA``.

Each database records how many steps it has had (SQLite: ``PRAGMA user_version``; Postgres:
the table ``meshctl_schema``), the same number for the same schema: the steps are those each
database had before they were one list, step for step. Opening applies every missing step,
each in its own transaction with its version bump: a failed step rolls back only itself, the
steps before it stay applied, the next open goes on from there. A database whose version is
newer than ``len(MIGRATIONS)`` belongs to a newer meshctl and is refused. Steps are
append-only: never edit a released step, add a new one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from string import Template

from meshctl.state.dialect import C, Dialect
from meshctl.state.store import StoreError

MIGRATIONS: tuple[str, ...] = (
    # 1: the tables.
    """
    CREATE TABLE jobs (
        id $key PRIMARY KEY, name TEXT NOT NULL, team TEXT NOT NULL, state TEXT NOT NULL,
        priority $int NOT NULL, spec TEXT NOT NULL, pool TEXT,
        submitted_at_s $real NOT NULL, updated_at_s $real NOT NULL, version $int NOT NULL
    );
    CREATE TABLE attempts (
        id $key PRIMARY KEY, job_id TEXT NOT NULL, number $int NOT NULL, pool TEXT NOT NULL,
        submission_id TEXT NOT NULL, state TEXT NOT NULL, started_at_s $real, ended_at_s $real,
        reason TEXT NOT NULL, version $int NOT NULL
    );
    CREATE TABLE pools (
        name $key PRIMARY KEY, provider TEXT NOT NULL, state TEXT NOT NULL,
        observed TEXT NOT NULL, updated_at_s $real NOT NULL, version $int NOT NULL
    );
    CREATE TABLE nodes (
        id $key PRIMARY KEY, pool TEXT NOT NULL, state TEXT NOT NULL, labels TEXT NOT NULL,
        resources TEXT NOT NULL, updated_at_s $real NOT NULL, version $int NOT NULL
    );
    CREATE TABLE instances (
        id $key PRIMARY KEY, pool TEXT NOT NULL, provider TEXT NOT NULL,
        request_id TEXT NOT NULL, instance_type TEXT NOT NULL, state TEXT NOT NULL,
        launched_at_s $real, updated_at_s $real NOT NULL, version $int NOT NULL
    );
    CREATE TABLE events (
        seq $seq, at_s $real NOT NULL, kind TEXT NOT NULL,
        job_id TEXT, message TEXT NOT NULL, data TEXT NOT NULL
    );
    CREATE TABLE decisions (
        seq $seq, at_s $real NOT NULL, job_id TEXT NOT NULL,
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
    ALTER TABLE instances ADD COLUMN spot $bool NOT NULL DEFAULT $false;
    """,
    # 5: the lending ledger: an elastic job's nodes lent to jobs of higher priority.
    """
    CREATE TABLE loans (
        id $key PRIMARY KEY, lender TEXT NOT NULL, borrower TEXT NOT NULL, pool TEXT NOT NULL,
        node TEXT NOT NULL, gpus $real NOT NULL, opened_at_s $real NOT NULL, closed_at_s $real,
        lost_gpu_s $real NOT NULL, version $int NOT NULL
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
        name $key PRIMARY KEY, role TEXT NOT NULL, teams TEXT NOT NULL,
        created_at_s $real NOT NULL, updated_at_s $real NOT NULL, version $int NOT NULL
    );
    CREATE INDEX users_role ON users (role);
    CREATE TABLE tokens (
        id $key PRIMARY KEY, username TEXT NOT NULL, digest TEXT NOT NULL,
        created_at_s $real NOT NULL, revoked_at_s $real, version $int NOT NULL
    );
    CREATE INDEX tokens_username ON tokens (username);
    CREATE TABLE audit (
        seq $seq, at_s $real NOT NULL, actor TEXT NOT NULL,
        role TEXT NOT NULL, action TEXT NOT NULL, target TEXT NOT NULL, outcome TEXT NOT NULL,
        detail TEXT NOT NULL
    );
    """,
    # 7: controllers that stand by: the lease one of them leads with, and the epoch of that
    # lease written with every attempt (a dispatch) and every decision.
    """
    CREATE TABLE leases (
        name $key PRIMARY KEY, holder TEXT NOT NULL, epoch $int NOT NULL,
        expires_at_s $real NOT NULL, version $int NOT NULL
    );
    ALTER TABLE attempts ADD COLUMN epoch $int NOT NULL DEFAULT 0;
    ALTER TABLE decisions ADD COLUMN epoch $int NOT NULL DEFAULT 0;
    """,
    # 8: a job's files, as the API server took them in (a gzipped tar), for controllers on
    # other hosts than the server's.
    """
    CREATE TABLE packages (
        job_id $key PRIMARY KEY, archive $bytes NOT NULL, sha256 TEXT NOT NULL,
        size $int NOT NULL
    );
    """,
    # 9: jobs found by name (``meshctl jobs show NAME``, ``explain NAME``) without listing
    # them all.
    """
    CREATE INDEX jobs_name ON jobs (name);
    """,
)


def render(step: str, types: Mapping[str, str]) -> str:
    """A step's SQL in one dialect: each ``$name`` as ``types`` names it."""
    return Template(step).substitute(types)


def check_not_newer(version: int, known: int, what: str = "state.db") -> None:
    """Refuse a database (``what``: how messages name it) written by a newer meshctl."""
    if version > known:
        raise StoreError(
            f"{what} schema version {version} is newer than this meshctl ({known}); upgrade meshctl"
        )


def migrate(dialect: Dialect[C], conn: C, steps: Sequence[str] = MIGRATIONS) -> int:
    """Apply the missing steps, each in its own transaction with the version it brings the
    database to; return the version.

    An up-to-date database takes no lock; one with steps to apply is migrated under the
    dialect's ``migrating`` lock, reading its version again in each step's transaction
    (another opener may have migrated it meanwhile). A step that fails is rolled back (the
    steps before it stay) and raises ``StoreError``.
    """
    target, where = len(steps), dialect.where
    try:
        current = dialect.schema_version(conn)
        check_not_newer(current, target, where)
        if current == target:
            return target
        with dialect.migrating(conn):
            while True:
                with dialect.transaction(conn):
                    current = dialect.schema_version(conn)
                    check_not_newer(current, target, where)
                    if current == target:
                        return target
                    _apply(dialect, conn, current + 1, steps[current])
    except dialect.errors as exc:
        raise StoreError(f"cannot migrate {where} to schema version {target}: {exc}") from exc


def _apply(dialect: Dialect[C], conn: C, number: int, step: str) -> None:
    try:
        dialect.script(conn, render(step, dialect.syntax.types))
    except dialect.errors as exc:
        raise StoreError(f"{dialect.where} migration step {number} failed: {exc}") from exc
    dialect.set_schema_version(conn, number)
