"""The state store: versioned records and append-only logs behind the reconcile loop.

``open_store(default_home())`` opens ``$MESHCTL_HOME/state.db`` (``~/.meshctl`` by default);
``open_store_at(store, home)`` opens what a ``--store`` names: that, a SQLite file, or a
Postgres database (``meshctl.state.postgres_dialect``, imported only then: psycopg is an
extra).
See ``README.md`` in this package for the vocabulary.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from meshctl.errors import InvalidInput
from meshctl.host.home import default_home
from meshctl.state.memory import MemoryStore
from meshctl.state.migrations import MIGRATIONS
from meshctl.state.private import private_home
from meshctl.state.records import (
    ACTIVE_ATTEMPT,
    INSTANCE_LIVE,
    UNRECORDED,
    AttemptDetail,
    AttemptRecord,
    AttemptState,
    AuditEntry,
    Decision,
    Event,
    Held,
    InstanceRecord,
    InstanceState,
    JobRecord,
    JobState,
    LeaseRecord,
    LoanRecord,
    LogEntry,
    NodeDetail,
    NodeRecord,
    NodeState,
    PoolRecord,
    Record,
    Role,
    TokenRecord,
    UserRecord,
)
from meshctl.state.sqlite_dialect import SqliteStore
from meshctl.state.store import (
    ConflictError,
    FencedError,
    NotFoundError,
    Store,
    StoreError,
    Write,
)

if TYPE_CHECKING:
    from meshctl.state.postgres_dialect import PostgresStore

__all__ = [
    "ACTIVE_ATTEMPT",
    "INSTANCE_LIVE",
    "MIGRATIONS",
    "STATE_DB",
    "UNRECORDED",
    "AttemptDetail",
    "AttemptRecord",
    "AttemptState",
    "AuditEntry",
    "ConflictError",
    "Decision",
    "Event",
    "FencedError",
    "Held",
    "InstanceRecord",
    "InstanceState",
    "JobRecord",
    "JobState",
    "LeaseRecord",
    "LoanRecord",
    "LogEntry",
    "MemoryStore",
    "NodeDetail",
    "NodeRecord",
    "NodeState",
    "NotFoundError",
    "PoolRecord",
    "Record",
    "Role",
    "SqliteStore",
    "Store",
    "StoreError",
    "TokenRecord",
    "UserRecord",
    "Write",
    "default_home",
    "open_store",
    "open_store_at",
]

STATE_DB = "state.db"


def open_store(home: Path) -> SqliteStore:
    """Create ``home`` if needed (private: 0700) and open (migrating if needed)
    ``home/state.db`` (0600)."""
    try:
        private_home(home)
    except OSError as exc:
        raise StoreError(f"cannot create meshctl home {home}: {exc}") from exc
    return SqliteStore(home / STATE_DB)


POSTGRES_SCHEMES = ("postgresql://", "postgres://")
SQLITE_SCHEME = "sqlite://"


def open_store_at(store: str | None, home: Path) -> Store:
    """The store a ``--store`` names: nothing, ``home/state.db`` (``open_store``); a
    ``postgresql://`` (or ``postgres://``) URL, that Postgres database; ``sqlite:///PATH`` (an
    absolute path; ``sqlite:////PATH`` too) or a plain path, that SQLite file. Anything else is
    ``InvalidInput``."""
    if not store:
        return open_store(home)
    if store.startswith(POSTGRES_SCHEMES):
        return _postgres(store)
    if store.startswith(SQLITE_SCHEME):
        path = store.removeprefix(SQLITE_SCHEME)
        if not path.strip("/"):
            raise InvalidInput(f"--store: expected a file after {SQLITE_SCHEME}/, got nothing")
        return SqliteStore(Path("/" + path.lstrip("/") if path.startswith("/") else path))
    if "://" in store:
        scheme = store.split("://", 1)[0]  # not the rest: a URL may carry a password
        raise InvalidInput(
            f"--store: expected a postgresql:// URL, a sqlite:///PATH URL or a file path, "
            f"got a {scheme}:// URL"
        )
    return SqliteStore(Path(store))


def _postgres(url: str) -> PostgresStore:
    from meshctl.state.postgres_dialect import PostgresStore

    return PostgresStore(url)
