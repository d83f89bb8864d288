"""Postgres's dialect, and ``PostgresStore``: the ``SqlStore`` kept in a Postgres database,
through psycopg 3.

Writers run at once, each in its own transaction (read committed): the guarded ``UPDATE``'s
row lock makes a second writer from the same version wait and match nothing. Two locks keep
what SQLite's one writer keeps by itself:

- a fenced write reads the lease row ``FOR SHARE``, so a controller taking the lease over waits
  for the write to commit, or the write sees the new epoch;
- every transaction that appends log entries takes one transaction-scoped advisory lock
  (``LOG_LOCK``) just before its first append and holds it to its commit, so log entries
  commit in ``seq`` order: a reader that has seen ``seq`` N never sees a lower ``seq`` appear
  later (an identity column alone hands out numbers at insert time, and a slower transaction
  would commit a lower one after a faster one). It is taken after the record write, so a
  transaction that holds it waits on no row.

One connection per store, in autocommit mode (each call its own transaction), guarded by a
lock: a store may be shared between threads, not across ``fork``. A connection found broken
is replaced on the next call; a read, or a write whose ``BEGIN`` failed (nothing was written),
is tried once more on the new connection. The URL's password never appears in a message:
``url`` is the redacted form. The schema version is kept in the table ``meshctl_schema``;
openers with steps to apply take a session advisory lock (``MIGRATE_LOCK``) first.
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar
from urllib.parse import unquote, urlsplit, urlunsplit

import psycopg
from psycopg import errors as pg_errors

from meshctl.state.dialect import Syntax
from meshctl.state.migrations import MIGRATIONS, migrate
from meshctl.state.sql import SqlStore
from meshctl.state.store import StoreError

LOG_LOCK = 0x6D657368_6C6F6773  # "meshlogs": held by every transaction that appends to a log
MIGRATE_LOCK = 0x6D657368_6D696772  # "meshmigr": the advisory lock key of a migration

Connection = psycopg.Connection[tuple[Any, ...]]
T = TypeVar("T")

SYNTAX = Syntax(
    placeholder="%s",
    returning_seq=True,
    share_lock=" FOR SHARE",
    log_lock=f"SELECT pg_advisory_xact_lock({LOG_LOCK})",
    bools=True,
    most_values=None,  # one array parameter, however many values
    no_limit=None,  # LIMIT NULL
    types={
        "key": 'TEXT COLLATE "C"',  # ordered by code point, whatever the database's collation
        "int": "BIGINT",
        "real": "DOUBLE PRECISION",  # a timestamp round-trips bit-exact
        "seq": "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY",
        "bool": "BOOLEAN",
        "false": "FALSE",
        "bytes": "BYTEA",
    },
)

_VERSION_TABLE = """
CREATE TABLE IF NOT EXISTS meshctl_schema (
    one BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (one), version BIGINT NOT NULL
);
INSERT INTO meshctl_schema (version) VALUES (0) ON CONFLICT (one) DO NOTHING;
"""


def redact(url: str) -> str:
    """``url`` with its password (in the user part or as a ``password=`` parameter) as ***."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if parts.password is not None:
        user, _, host = netloc.rpartition("@")
        netloc = f"{user.partition(':')[0]}:***@{host}"
    query = re.sub(r"(^|&)(password=)[^&]*", r"\1\2***", parts.query)
    return urlunsplit(parts._replace(netloc=netloc, query=query))


def _secrets(url: str) -> tuple[str, ...]:
    """The password(s) a URL carries, as written and decoded: scrubbed from every message."""
    parts = urlsplit(url)
    found = re.findall(r"(?:^|&)password=([^&]*)", parts.query)
    if parts.password is not None:
        found.append(parts.password)
    return tuple(sorted({s for p in found for s in (p, unquote(p)) if s}, key=len, reverse=True))


def schema_version(conn: Connection) -> int:
    """How many steps the database has had (0: none, not even the version table)."""
    found = conn.execute("SELECT to_regclass('meshctl_schema') IS NOT NULL").fetchone()
    if not found or not found[0]:
        return 0
    row = conn.execute("SELECT version FROM meshctl_schema").fetchone()
    return 0 if row is None else int(row[0])


class PostgresDialect:
    """The connection to the Postgres database at ``url``, opened here.

    ``busy_timeout_s`` is the session's ``lock_timeout``: how long a statement waits for a lock
    another transaction holds (a record being written, the log lock, a migration).
    """

    syntax = SYNTAX
    errors: type[Exception] = psycopg.Error

    def __init__(self, url: str, busy_timeout_s: float, connect_timeout_s: float) -> None:
        self.url = redact(url)
        self.where = f"state store {self.url}"
        self._dsn, self._secrets = url, _secrets(url)
        self._busy_ms = max(1, round(busy_timeout_s * 1000))
        self._connect_s = max(2, math.ceil(connect_timeout_s))  # libpq's least
        self._lock = threading.RLock()
        self._closed = False
        self._conn: Connection | None = self._connect()

    def _scrub(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    def _connect(self) -> Connection:
        try:
            conn = psycopg.connect(
                self._dsn,
                autocommit=True,
                connect_timeout=self._connect_s,
                application_name="meshctl",
                client_encoding="utf8",
            )
        except psycopg.Error as exc:  # not chained: the cause would carry the URL as given
            raise StoreError(self._scrub(f"cannot open state store {self.url}: {exc}")) from None
        try:
            conn.execute("SELECT set_config('lock_timeout', %s, false)", (f"{self._busy_ms}ms",))
        except psycopg.Error as exc:
            conn.close()
            raise StoreError(self._scrub(f"cannot open state store {self.url}: {exc}")) from None
        return conn

    def _connection(self) -> Connection:
        if self._closed:
            raise StoreError("the state store is closed")
        if self._conn is None or self._conn.closed:
            self._conn = self._connect()
        return self._conn

    def run(self, work: Callable[[Connection], T], *, write: bool) -> T:
        """A connection found broken is dropped; the call is tried once more on a new one if
        nothing can have been written (a read, or a write whose ``BEGIN`` failed)."""
        with self._lock:
            for last in (False, True):
                conn, begun = self._connection(), False
                try:
                    if not write:
                        return work(conn)
                    with conn.transaction():
                        begun = True
                        return work(conn)
                except psycopg.Error as exc:
                    if not conn.broken:
                        raise self._error(exc) from exc
                    conn.close()
                    self._conn = None
                    if last or begun:
                        raise self._error(exc) from exc
            raise AssertionError("unreachable")  # pragma: no cover

    def _error(self, exc: psycopg.Error) -> StoreError:
        waited = isinstance(exc, pg_errors.LockNotAvailable)
        locked = "locked past busy_timeout_s: " if waited else ""
        return StoreError(self._scrub(f"state store {self.url}: {locked}{exc}"))

    def insert_log(self, conn: Connection, statement: str, values: Sequence[object]) -> int:
        found = conn.execute(statement, values).fetchone()  # RETURNING seq
        assert found is not None
        return int(found[0])

    def insert_many(
        self, conn: Connection, statement: str, rows: Sequence[Sequence[object]]
    ) -> None:
        with conn.cursor() as cursor:
            cursor.executemany(statement, rows)

    def any_of(self, name: str, values: tuple[str | None, ...]) -> tuple[str, list[object]]:
        """``= %s`` for one value, ``= ANY(%s)`` for several; a None among them matches the
        rows where the column is NULL, as in the memory store."""
        present = [v for v in values if v is not None]
        null = len(present) < len(values)
        if not present:
            return (f"{name} IS NULL" if null else "FALSE"), []
        if len(present) == 1:
            match, params = f"{name} = %s", list[object](present)
        else:
            match, params = f"{name} = ANY(%s::text[])", [present]
        return (f"({match} OR {name} IS NULL)" if null else match), params

    def key_taken(self, error: BaseException | None) -> bool:
        return isinstance(error, pg_errors.UniqueViolation)

    def migrate(self, steps: Sequence[str]) -> None:
        with self._lock:
            try:
                migrate(self, self._connection(), steps)
            except StoreError as exc:
                raise StoreError(self._scrub(str(exc))) from exc.__cause__

    def schema_version(self, conn: Connection) -> int:
        return schema_version(conn)

    def set_schema_version(self, conn: Connection, version: int) -> None:
        conn.execute("UPDATE meshctl_schema SET version = %s", (version,))

    @contextmanager
    def migrating(self, conn: Connection) -> Iterator[None]:
        """The session's migration lock, and the version table made if missing."""
        conn.execute("SELECT pg_advisory_lock(%s)", (MIGRATE_LOCK,))
        try:
            with conn.transaction():
                conn.execute(_VERSION_TABLE)
            yield
        finally:
            if not conn.broken:
                conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATE_LOCK,))

    @contextmanager
    def transaction(self, conn: Connection) -> Iterator[None]:
        with conn.transaction():
            yield

    def script(self, conn: Connection, sql: str) -> None:
        conn.execute(sql)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if self._conn is not None:
                self._conn.close()
                self._conn = None


class PostgresStore(SqlStore[Connection]):
    """A ``Store`` in the Postgres database at ``url`` (migrated on open).

    ``busy_timeout_s``: how long a statement waits for a lock another transaction holds (a
    record being written, the log lock, a migration) before ``StoreError``.
    """

    def __init__(
        self,
        url: str,
        *,
        busy_timeout_s: float = 10.0,
        connect_timeout_s: float = 10.0,
        migrations: Sequence[str] = MIGRATIONS,
    ) -> None:
        dialect = PostgresDialect(url, busy_timeout_s, connect_timeout_s)
        self.url = dialect.url
        super().__init__(dialect, migrations)
