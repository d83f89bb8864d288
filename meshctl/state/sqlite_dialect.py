"""SQLite's dialect, and ``SqliteStore``: the ``SqlStore`` kept in a SQLite file in WAL mode.

Every write runs inside ``BEGIN IMMEDIATE``: one writer at a time across processes, others
waiting up to ``busy_timeout_s``; so the fence reads the lease plainly, and log appends need no
lock of their own to commit in ``seq`` order. One connection per store, guarded by a lock: a
store may be shared between threads, not across ``fork`` (open a new one in each process). The
schema version is the file's ``PRAGMA user_version``.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import TypeVar

from meshctl.state.dialect import Syntax
from meshctl.state.migrations import MIGRATIONS, check_not_newer, migrate
from meshctl.state.private import open_private, private_file
from meshctl.state.sql import SqlStore
from meshctl.state.store import StoreError

T = TypeVar("T")
_SIDE_FILES = ("-wal", "-shm", "-journal")
# Values of one filter per statement. Past about 6,600 values of an ``IN`` list SQLite's planner
# (without ANALYZE's statistics) scans the whole table in key order instead of searching the
# column's index: a cycle reading the attempts of 100,000 unfinished jobs would read every
# attempt ever made, ten times. Under 1,000 it always searches the index.
_MOST_VALUES = 1_000

SYNTAX = Syntax(
    placeholder="?",
    returning_seq=False,  # the cursor's lastrowid is the seq
    share_lock="",  # BEGIN IMMEDIATE holds the whole file
    log_lock=None,  # likewise
    bools=False,
    most_values=_MOST_VALUES,
    no_limit=-1,
    types={
        "key": "TEXT",
        "int": "INTEGER",
        "real": "REAL",
        "seq": "INTEGER PRIMARY KEY AUTOINCREMENT",
        "bool": "INTEGER",
        "false": "0",
        "bytes": "BLOB",
    },
)


def _private(path: Path) -> None:
    """The database file made 0600 before SQLite opens it: SQLite gives its -wal and -shm files
    the database file's mode, so they are private too; older ones are tightened."""
    if str(path) == ":memory:":
        return
    if not path.exists():
        open_private(path, "ab").close()
    for name in ("", *_SIDE_FILES):
        private_file(path.with_name(path.name + name))


def _busy_retried(step: Callable[[], T], timeout_s: float, path: Path) -> T:
    """``step()``, tried again while the file is busy, until ``timeout_s`` has passed.

    SQLite does not call its busy handler everywhere: switching a new file to WAL needs an
    exclusive lock, and reading a WAL file while another process sets it up, both answer
    "database is locked" at once. Several processes opening a new store together meet that."""
    deadline, pause = time.monotonic() + timeout_s, 0.002
    while True:
        try:
            return step()
        except sqlite3.OperationalError as exc:
            busy = "locked" in str(exc) or "busy" in str(exc)
            if not busy or time.monotonic() >= deadline:
                raise StoreError(f"cannot open state store {path}: {exc}") from exc
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open state store {path}: {exc}") from exc
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


def _user_version(conn: sqlite3.Connection) -> int:
    version: int = conn.execute("PRAGMA user_version").fetchone()[0]
    return version


def _wal(conn: sqlite3.Connection, busy_timeout_s: float, known: int) -> str:
    """The file's journal mode, switched to WAL when it is not (a new file); a file written by a
    newer meshctl is refused first."""
    conn.execute(f"PRAGMA busy_timeout = {round(busy_timeout_s * 1000):d}")
    check_not_newer(_user_version(conn), known)
    mode = str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower()
    if mode != "wal":
        mode = str(conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]).lower()
    return mode


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


class SqliteDialect:
    """The connection to the SQLite file at ``path``, opened (and put in WAL mode) here;
    ``known``: the schema version this meshctl knows (a newer file is refused before WAL)."""

    syntax = SYNTAX
    errors: type[Exception] = sqlite3.Error
    where = "state.db"

    def __init__(self, path: Path, busy_timeout_s: float, known: int) -> None:
        self.path = path
        self._lock = threading.RLock()
        try:
            _private(path)
            conn = sqlite3.connect(
                path, timeout=busy_timeout_s, isolation_level=None, check_same_thread=False
            )
        except (sqlite3.Error, OSError) as exc:
            raise StoreError(f"cannot open state store {path}: {exc}") from exc
        try:
            mode = _busy_retried(lambda: _wal(conn, busy_timeout_s, known), busy_timeout_s, path)
            if mode != "wal":
                raise StoreError(f"cannot put state store {path} in WAL mode (got {mode})")
        except BaseException:
            conn.close()
            raise
        self._conn: sqlite3.Connection | None = conn

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StoreError("the state store is closed")
        return self._conn

    def run(self, work: Callable[[sqlite3.Connection], T], *, write: bool) -> T:
        with self._lock:
            conn = self._connection()
            try:
                if not write:
                    return work(conn)
                with self.transaction(conn):
                    return work(conn)
            except sqlite3.Error as exc:
                raise StoreError(f"state store {self.path}: {exc}") from exc

    @contextmanager
    def transaction(self, conn: sqlite3.Connection) -> Iterator[None]:
        """``BEGIN IMMEDIATE``: the write lock first, so a transaction never finds the file
        changed under it; commit on success, roll back on any error."""
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    def insert_log(self, conn: sqlite3.Connection, statement: str, values: Sequence[object]) -> int:
        seq = conn.execute(statement, values).lastrowid
        assert seq is not None
        return seq

    def insert_many(
        self, conn: sqlite3.Connection, statement: str, rows: Sequence[Sequence[object]]
    ) -> None:
        conn.executemany(statement, rows)

    def any_of(self, name: str, values: tuple[str | None, ...]) -> tuple[str, list[object]]:
        """``IS ?`` for one value (None matches NULL); ``IN (...)`` for several (an empty
        list matches nothing, as it should; a None among several matches no row)."""
        if len(values) == 1:
            return f"{name} IS ?", list(values)
        return f"{name} IN ({', '.join('?' for _ in values)})", list(values)

    def key_taken(self, error: BaseException | None) -> bool:
        return isinstance(error, sqlite3.IntegrityError)

    def migrate(self, steps: Sequence[str]) -> None:
        with self._lock:
            migrate(self, self._connection(), steps)

    def schema_version(self, conn: sqlite3.Connection) -> int:
        return _user_version(conn)

    def set_schema_version(self, conn: sqlite3.Connection, version: int) -> None:
        conn.execute(f"PRAGMA user_version = {version:d}")

    def migrating(self, conn: sqlite3.Connection) -> AbstractContextManager[None]:
        return nullcontext()  # each step's BEGIN IMMEDIATE keeps other openers out

    def script(self, conn: sqlite3.Connection, sql: str) -> None:
        for statement in statements(sql):
            conn.execute(statement)

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


class SqliteStore(SqlStore[sqlite3.Connection]):
    """A ``Store`` in the SQLite file at ``path`` (created and migrated on open)."""

    def __init__(
        self,
        path: Path | str,
        *,
        busy_timeout_s: float = 10.0,
        migrations: Sequence[str] = MIGRATIONS,
    ) -> None:
        self.path = Path(path)
        super().__init__(SqliteDialect(self.path, busy_timeout_s, len(migrations)), migrations)
