"""``PostgresStore``: the ``Store`` kept in a Postgres database, through psycopg 3.

The version check and the write are one statement (``UPDATE ... WHERE key = %s AND version =
%s``): under Postgres's row locks a second writer from the same version waits, re-reads the row
and matches nothing, so two controllers can never both apply a change. Every transaction that
appends log entries takes one transaction-scoped advisory lock (``LOG_LOCK``) just before its
first append and holds it to its commit, so log entries commit in ``seq`` order: a reader that
has seen ``seq`` N never sees a lower ``seq`` appear later (an identity column alone hands out
numbers at insert time, and a slower transaction would commit a lower one after a faster one).
The lock is taken after the record write, so a transaction that holds it waits on no row.

One connection per store, in autocommit mode (each call its own transaction), guarded by a
lock: a store may be shared between threads, not across ``fork``. A connection found broken
is replaced on the next call; a read, or a write whose ``BEGIN`` failed (nothing was written),
is tried once more on the new connection. The URL's password never appears in a message:
``url`` is the redacted form.
"""

from __future__ import annotations

import builtins
import hashlib
import math
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from functools import partial
from typing import Any, TypeVar
from urllib.parse import unquote, urlsplit, urlunsplit

import psycopg
from psycopg import errors as pg_errors

from meshctl.state.kinds import (
    KINDS,
    Entry,
    Row,
    check_limit,
    columns,
    decode,
    encode,
    entry_rows,
    key_of,
    record_spec,
    spec_for,
    stamp,
)
from meshctl.state.pg_migrations import PG_MIGRATIONS, migrate
from meshctl.state.records import Appended, JobRecord, Record
from meshctl.state.store import (
    ConflictError,
    L,
    NotFoundError,
    R,
    StoreBase,
    StoreError,
    Write,
)

LOG_LOCK = 0x6D657368_6C6F6773  # "meshlogs": held by every transaction that appends to a log

Connection = psycopg.Connection[tuple[Any, ...]]
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class _Sql:
    """The statements of one kind, built once from the kind table."""

    columns: tuple[str, ...]
    written: tuple[str, ...]
    flags: frozenset[str]  # boolean columns: sent as bool, whatever the record holds
    insert: str
    create: str
    update: str
    delete: str
    select: str
    version: str


def _build(kind: type[Any]) -> _Sql:
    spec = spec_for(kind)
    cols = columns(kind)
    written = tuple(c for c in cols if c != "seq")
    table, key = spec.table, spec.key
    insert = (
        f"INSERT INTO {table} ({', '.join(written)}) VALUES ({', '.join('%s' for _ in written)})"
    )
    returning = " RETURNING seq" if "seq" in cols else ""
    return _Sql(
        columns=cols,
        written=written,
        flags=frozenset(f.name for f in fields(kind) if f.type in ("bool", bool)),
        insert=insert + returning,
        create=f"{insert} ON CONFLICT ({key}) DO NOTHING",
        update=f"UPDATE {table} SET {', '.join(f'{c} = %s' for c in written)} "
        f"WHERE {key} = %s AND version = %s",
        delete=f"DELETE FROM {table} WHERE {key} = %s AND version = %s",
        select=f"SELECT {', '.join(cols)} FROM {table}",
        version=f"SELECT version FROM {table} WHERE {key} = %s",
    )


_SQL = {kind: _build(kind) for kind in KINDS}


def _sql(kind: type[Any]) -> _Sql:
    spec_for(kind)
    return _SQL[kind]


def _values(sql: _Sql, row: Row) -> tuple[object, ...]:
    """The parameters of a row's written columns, in order."""
    return tuple(bool(row[c]) if c in sql.flags else row[c] for c in sql.written)


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


class PostgresStore(StoreBase):
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
        migrations: Sequence[str] = PG_MIGRATIONS,
    ) -> None:
        self.url = redact(url)
        self._dsn, self._secrets = url, _secrets(url)
        self._busy_ms = max(1, round(busy_timeout_s * 1000))
        self._connect_s = max(2, math.ceil(connect_timeout_s))  # libpq's least
        self._lock = threading.RLock()
        self._closed = False
        self._conn: Connection | None = None
        conn = self._connect()
        try:
            migrate(conn, migrations, f"state store {self.url}")
        except StoreError as exc:
            conn.close()
            raise StoreError(self._scrub(str(exc))) from exc.__cause__
        except BaseException:
            conn.close()
            raise
        self._conn = conn

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

    def _call(self, work: Callable[[Connection], T], *, write: bool) -> T:
        """``work(conn)``: a write in one transaction, a read on its own. A connection found
        broken is dropped; the call is tried once more on a new one if nothing can have been
        written (a read, or a write whose ``BEGIN`` failed)."""
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

    def _version(self, conn: Connection, kind: type[Any], key: str) -> int | None:
        row = conn.execute(_sql(kind).version, (key,)).fetchone()
        return None if row is None else int(row[0])

    def _lost_race(self, conn: Connection, kind: type[Any], key: str, expected: int) -> StoreError:
        """The error for a guarded write that matched no row."""
        actual = self._version(conn, kind, key)
        name = spec_for(kind).name
        if actual is None:
            return NotFoundError(name, key)
        return ConflictError(name, key, expected=expected, actual=actual)

    def _append_rows(self, conn: Connection, entries: Sequence[Entry]) -> builtins.list[Row]:
        """Insert log rows, each in its own log, in order, under the log lock; return them with
        their ``seq``."""
        stored = []
        if entries:
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (LOG_LOCK,))
        for kind, row in entries:
            sql = _sql(kind)
            found = conn.execute(sql.insert, _values(sql, row)).fetchone()
            assert found is not None
            stored.append({**row, "seq": int(found[0])})
        return stored

    def create(self, record: R, *, events: Sequence[Appended] = ()) -> R:
        kind, key = type(record), key_of(record)
        sql, row = _sql(kind), {**stamp(kind, encode(record), self._epoch()), "version": 1}
        entries = entry_rows(events)

        def work(conn: Connection) -> None:
            self._fenced(kind, partial(_lease_epoch, conn))
            while conn.execute(sql.create, _values(sql, row)).rowcount != 1:
                actual = self._version(conn, kind, key)
                if actual is not None:  # else deleted meanwhile: insert again
                    raise ConflictError(spec_for(kind).name, key, actual=actual)
            self._append_rows(conn, entries)

        self._call(work, write=True)
        return decode(kind, row)

    def update(self, record: R, *, expected_version: int, events: Sequence[Appended] = ()) -> R:
        kind, key = type(record), key_of(record)
        row = {**stamp(kind, encode(record), self._epoch()), "version": expected_version + 1}
        sql, entries = _sql(kind), entry_rows(events)

        def work(conn: Connection) -> None:
            self._fenced(kind, partial(_lease_epoch, conn))
            params = (*_values(sql, row), key, expected_version)
            if conn.execute(sql.update, params).rowcount != 1:
                raise self._lost_race(conn, kind, key, expected_version)
            self._append_rows(conn, entries)

        self._call(work, write=True)
        return decode(kind, row)

    def write_all(self, writes: Sequence[Write]) -> builtins.list[Record | StoreError]:
        epoch = self._epoch()

        def work(conn: Connection) -> builtins.list[Record | StoreError]:
            out = builtins.list[Record | StoreError]()
            for kind in dict.fromkeys(type(w.record) for w in writes):
                self._fenced(kind, partial(_lease_epoch, conn))
            for write in writes:
                kind, key, sql = type(write.record), key_of(write.record), _sql(type(write.record))
                version = 1 if write.expected_version is None else write.expected_version + 1
                row = {**stamp(kind, encode(write.record), epoch), "version": version}
                if write.expected_version is None:
                    if conn.execute(sql.create, _values(sql, row)).rowcount != 1:
                        actual = self._version(conn, kind, key) or 1
                        out.append(ConflictError(spec_for(kind).name, key, actual=actual))
                        continue
                else:
                    params = (*_values(sql, row), key, write.expected_version)
                    if conn.execute(sql.update, params).rowcount != 1:
                        out.append(self._lost_race(conn, kind, key, write.expected_version))
                        continue
                self._append_rows(conn, entry_rows(write.events))
                out.append(decode(kind, row))
            return out

        return self._call(work, write=True) if writes else []

    def delete(
        self,
        kind: type[Record],
        key: str,
        *,
        expected_version: int,
        events: Sequence[Appended] = (),
    ) -> None:
        record_spec(kind)
        entries = entry_rows(events)

        def work(conn: Connection) -> None:
            self._fenced(kind, partial(_lease_epoch, conn))
            if conn.execute(_sql(kind).delete, (key, expected_version)).rowcount != 1:
                raise self._lost_race(conn, kind, key, expected_version)
            self._append_rows(conn, entries)

        self._call(work, write=True)

    def _select(
        self,
        kind: type[Any],
        where: str,
        params: Sequence[object],
        only: tuple[str, ...] | None = None,
    ) -> builtins.list[Row]:
        """Rows of a kind; ``only``: just these columns."""
        sql = _sql(kind)
        cols = sql.columns if only is None else only
        select = (
            sql.select if only is None else f"SELECT {', '.join(only)} FROM {spec_for(kind).table}"
        )
        query = f"{select} {where}"
        rows = self._call(lambda conn: conn.execute(query, params).fetchall(), write=False)
        return [dict(zip(cols, row, strict=True)) for row in rows]

    def get(self, kind: type[R], key: str) -> R | None:
        rows = self._select(kind, f"WHERE {record_spec(kind).key} = %s", (key,))
        return decode(kind, rows[0]) if rows else None

    def _matching(
        self,
        kind: type[Any],
        wanted: dict[str, tuple[str | None, ...]],
        after: str | None,
        limit: int | None,
        only: tuple[str, ...] | None = None,
    ) -> builtins.list[Row]:
        """The rows ``list`` finds, ordered by key (``only``: just these columns)."""
        key = spec_for(kind).key
        where, params = [], builtins.list[object]()
        for name, values in wanted.items():
            clause, values_params = _any_of(name, values)
            where.append(clause)
            params.extend(values_params)
        if after is not None:
            where.append(f"{key} > %s")
            params.append(after)
        params.append(limit)  # LIMIT NULL: no limit
        clause = " AND ".join(where) or "TRUE"
        return self._select(kind, f"WHERE {clause} ORDER BY {key} LIMIT %s", params, only)

    def create_all(self, records: Sequence[Record]) -> None:
        by_kind: dict[type[Any], builtins.list[tuple[object, ...]]] = {}
        for record in records:
            sql = _sql(type(record))
            by_kind.setdefault(type(record), []).append(
                _values(sql, {**stamp(type(record), encode(record), self._epoch()), "version": 1})
            )

        def work(conn: Connection) -> None:
            for kind in by_kind:
                self._fenced(kind, partial(_lease_epoch, conn))
            with conn.cursor() as cursor:
                for kind, rows in by_kind.items():
                    cursor.executemany(_sql(kind).insert, rows)

        try:
            self._call(work, write=True)
        except StoreError as err:  # a key taken: say which (nothing was written)
            if isinstance(err.__cause__, pg_errors.UniqueViolation):
                self._name_conflict(records)
            raise

    def _name_conflict(self, records: Sequence[Record]) -> None:
        seen: set[tuple[type[Any], str]] = set()
        for record in records:
            kind, key = type(record), key_of(record)
            actual = self._call(partial(self._version, kind=kind, key=key), write=False)
            if actual is not None or (kind, key) in seen:
                raise ConflictError(spec_for(kind).name, key, actual=actual or 1)
            seen.add((kind, key))

    def _append(self, entries: Sequence[L]) -> builtins.list[L]:
        kind = type(entries[0])
        rows = [(kind, stamp(kind, encode(entry), self._epoch())) for entry in entries]

        def work(conn: Connection) -> builtins.list[Row]:
            self._fenced(kind, partial(_lease_epoch, conn))
            return self._append_rows(conn, rows)

        stored = self._call(work, write=True)
        return [decode(kind, row) for row in stored]

    def _query(
        self, kind: type[L], job_id: str | None, after_seq: int, limit: int | None
    ) -> builtins.list[L]:
        check_limit(after_seq, limit)
        where, params = "WHERE seq > %s", builtins.list[object]([after_seq])
        if job_id is not None:
            where += " AND job_id = %s"
            params.append(job_id)
        params.append(limit)
        rows = self._select(kind, f"{where} ORDER BY seq LIMIT %s", params)
        return [decode(kind, row) for row in rows]

    def put_package(self, job_id: str, archive: bytes) -> None:
        digest = hashlib.sha256(archive).hexdigest()

        def work(conn: Connection) -> None:
            self._fenced(JobRecord, partial(_lease_epoch, conn))  # fenced as the job is
            done = conn.execute(
                "INSERT INTO packages (job_id, archive, sha256, size) VALUES (%s, %s, %s, %s) "
                "ON CONFLICT (job_id) DO NOTHING",
                (job_id, archive, digest, len(archive)),
            )
            if done.rowcount != 1:
                raise ConflictError("package", job_id, actual=1)

        self._call(work, write=True)

    def _package(self, job_id: str) -> tuple[bytes, str] | None:
        query = "SELECT archive, sha256 FROM packages WHERE job_id = %s"
        row = self._call(lambda conn: conn.execute(query, (job_id,)).fetchone(), write=False)
        return None if row is None else (bytes(row[0]), str(row[1]))

    def delete_package(self, job_id: str) -> None:
        def work(conn: Connection) -> None:
            self._fenced(JobRecord, partial(_lease_epoch, conn))
            conn.execute("DELETE FROM packages WHERE job_id = %s", (job_id,))

        self._call(work, write=True)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if self._conn is not None:
                self._conn.close()
                self._conn = None


def _lease_epoch(conn: Connection, name: str) -> int | None:
    """The epoch of a lease, read in the write's transaction and held (``FOR SHARE``) until it
    ends: a controller taking the lease over waits for the write to commit, or the write
    sees the new epoch."""
    row = conn.execute("SELECT epoch FROM leases WHERE name = %s FOR SHARE", (name,)).fetchone()
    return None if row is None else int(row[0])


def _any_of(name: str, values: tuple[str | None, ...]) -> tuple[str, builtins.list[object]]:
    """The condition that ``name`` is any of ``values`` (None: NULL), and its parameters."""
    present = [v for v in values if v is not None]
    null = len(present) < len(values)
    if not present:
        return (f"{name} IS NULL" if null else "FALSE"), []
    if len(present) == 1:
        match, params = f"{name} = %s", builtins.list[object](present)
    else:
        match, params = f"{name} = ANY(%s::text[])", [present]
    return (f"({match} OR {name} IS NULL)" if null else match), params
