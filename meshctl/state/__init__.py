"""The state store: versioned records and append-only logs behind the reconcile loop.

``open_store(default_home())`` opens ``$MESHCTL_HOME/state.db`` (``~/.meshctl`` by default).
See ``README.md`` in this package for the vocabulary.
"""

from __future__ import annotations

from pathlib import Path

from meshctl.home import default_home
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
from meshctl.state.sqlite import SqliteStore
from meshctl.state.store import ConflictError, NotFoundError, Store, StoreError

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
    "Held",
    "InstanceRecord",
    "InstanceState",
    "JobRecord",
    "JobState",
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


def open_store_at(url: str | None, home: Path) -> Store:
    """The store ``url`` names (a SQLite file path, or ``sqlite:///PATH``), else the home's."""
    if not url:
        return open_store(home)
    if url.startswith("sqlite://"):
        url = url.removeprefix("sqlite://")
    if "://" in url:
        from meshctl.errors import InvalidInput

        raise InvalidInput(f"--store: expected a SQLite file or sqlite:///PATH, got {url!r}")
    return SqliteStore(Path(url))
