"""The schema steps as released before the store kept one list of migrations (commit 23ff4e3),
verbatim: ``meshctl/state/migrations.py``'s ``MIGRATIONS`` (SQLite, the number applied kept in
``PRAGMA user_version``) and ``meshctl/state/pg_migrations.py``'s ``PG_MIGRATIONS`` (Postgres,
the number kept in the table ``meshctl_schema``). The tests build databases with them, as that
meshctl did, and open them with today's store. Never edit: these are what users' databases
were made with.
"""

from __future__ import annotations

SQLITE_STEPS: tuple[str, ...] = (
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


POSTGRES_STEPS: tuple[str, ...] = (
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

POSTGRES_VERSION_TABLE = """
CREATE TABLE IF NOT EXISTS meshctl_schema (
    one BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (one), version BIGINT NOT NULL
);
INSERT INTO meshctl_schema (version) VALUES (0) ON CONFLICT (one) DO NOTHING;
"""
