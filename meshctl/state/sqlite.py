"""``SqliteStore``: the ``Store`` kept in a SQLite file in WAL mode.

Every write runs inside ``BEGIN IMMEDIATE`` (one writer at a time across processes; others wait
up to ``busy_timeout_s``), and the version check and the write are one statement
(``UPDATE ... WHERE key = ? AND version = ?``), so two controllers can never both apply a change
made from the same version. One connection per store, guarded by a lock: a store may be shared
between threads, not across ``fork`` (open a new one in each process).
"""

from __future__ import annotations

import builtins
import hashlib
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

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
from meshctl.state.migrations import MIGRATIONS, check_not_newer, migrate, schema_version
from meshctl.state.private import open_private, private_file
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


@dataclass(frozen=True, slots=True)
class _Sql:
    """The statements of one kind, built once from the kind table."""

    columns: tuple[str, ...]
    insert: str
    update: str
    delete: str
    select: str
    version: str


def _build(kind: type[Any]) -> _Sql:
    spec = spec_for(kind)
    cols = columns(kind)
    written = tuple(c for c in cols if c != "seq")
    table, key = spec.table, spec.key
    return _Sql(
        columns=cols,
        insert=f"INSERT INTO {table} ({', '.join(written)}) "
        f"VALUES ({', '.join('?' for _ in written)})",
        update=f"UPDATE {table} SET {', '.join(f'{c} = ?' for c in written)} "
        f"WHERE {key} = ? AND version = ?",
        delete=f"DELETE FROM {table} WHERE {key} = ? AND version = ?",
        select=f"SELECT {', '.join(cols)} FROM {table}",
        version=f"SELECT version FROM {table} WHERE {key} = ?",
    )


T = TypeVar("T")
_SQL = {kind: _build(kind) for kind in KINDS}
_SIDE_FILES = ("-wal", "-shm", "-journal")
# Values of one filter per statement. Past about 6,600 values of an ``IN`` list SQLite's planner
# (without ANALYZE's statistics) scans the whole table in key order instead of searching the
# column's index: a cycle reading the attempts of 100,000 unfinished jobs would read every
# attempt ever made, ten times. Under 1,000 it always searches the index.
_MOST_VALUES = 1_000


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


def _wal(conn: sqlite3.Connection, busy_timeout_s: float, known: int) -> str:
    """The file's journal mode, switched to WAL when it is not (a new file); a file written by a
    newer meshctl is refused first."""
    conn.execute(f"PRAGMA busy_timeout = {round(busy_timeout_s * 1000):d}")
    check_not_newer(schema_version(conn), known)
    mode = str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower()
    if mode != "wal":
        mode = str(conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]).lower()
    return mode


def _lease_epoch(conn: sqlite3.Connection, name: str) -> int | None:
    """The epoch of a lease, read in the write's transaction."""
    row = conn.execute("SELECT epoch FROM leases WHERE name = ?", (name,)).fetchone()
    return None if row is None else int(row[0])


def _sql(kind: type[Any]) -> _Sql:
    spec_for(kind)
    return _SQL[kind]


class SqliteStore(StoreBase):
    """A ``Store`` in the SQLite file at ``path`` (created and migrated on open)."""

    def __init__(
        self,
        path: Path | str,
        *,
        busy_timeout_s: float = 10.0,
        migrations: Sequence[str] = MIGRATIONS,
    ) -> None:
        self.path = Path(path)
        self._lock = threading.RLock()
        try:
            _private(self.path)
            conn = sqlite3.connect(
                self.path, timeout=busy_timeout_s, isolation_level=None, check_same_thread=False
            )
        except (sqlite3.Error, OSError) as exc:
            raise StoreError(f"cannot open state store {self.path}: {exc}") from exc
        try:
            self._setup(conn, busy_timeout_s, migrations)
        except BaseException:
            conn.close()
            raise
        self._conn: sqlite3.Connection | None = conn

    def _setup(
        self, conn: sqlite3.Connection, busy_timeout_s: float, migrations: Sequence[str]
    ) -> None:
        mode = _busy_retried(lambda: _wal(conn, busy_timeout_s, len(migrations)),
                             busy_timeout_s, self.path)  # fmt: skip
        if mode != "wal":
            raise StoreError(f"cannot put state store {self.path} in WAL mode (got {mode})")
        migrate(conn, migrations)

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            if self._conn is None:
                raise StoreError("the state store is closed")
            try:
                yield self._conn
            except sqlite3.Error as exc:
                raise StoreError(f"state store {self.path}: {exc}") from exc

    @contextmanager
    def _write(self, *kinds: type[Any]) -> Iterator[sqlite3.Connection]:
        """One ``BEGIN IMMEDIATE`` transaction: commit on success, roll back on any error;
        first the fence, for writes of ``kinds`` (``Store.fence``)."""
        with self._read() as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                for kind in kinds:
                    self._fenced(kind, partial(_lease_epoch, conn))
                yield conn
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise

    def _version(self, conn: sqlite3.Connection, kind: type[Any], key: str) -> int | None:
        row = conn.execute(_sql(kind).version, (key,)).fetchone()
        return None if row is None else int(row[0])

    def _lost_race(
        self, conn: sqlite3.Connection, kind: type[Any], key: str, expected: int
    ) -> StoreError:
        """The error for a guarded write that matched no row."""
        actual = self._version(conn, kind, key)
        name = spec_for(kind).name
        if actual is None:
            return NotFoundError(name, key)
        return ConflictError(name, key, expected=expected, actual=actual)

    def _append_rows(
        self, conn: sqlite3.Connection, kind: type[Any], rows: Sequence[Row]
    ) -> builtins.list[Row]:
        """Insert log rows; return them with their ``seq``."""
        stored = []
        for row in rows:
            values = tuple(v for c, v in row.items() if c != "seq")
            cursor = conn.execute(_sql(kind).insert, values)
            stored.append({**row, "seq": cursor.lastrowid})
        return stored

    def _append_entries(self, conn: sqlite3.Connection, entries: Sequence[Entry]) -> None:
        """Insert the log entries a write carries, each in its own log, in order."""
        for kind, row in entries:
            self._append_rows(conn, kind, [row])

    def create(self, record: R, *, events: Sequence[Appended] = ()) -> R:
        kind, key = type(record), key_of(record)
        row = {**stamp(kind, encode(record), self._epoch()), "version": 1}
        entries = entry_rows(events)
        with self._write(kind) as conn:
            actual = self._version(conn, kind, key)
            if actual is not None:
                raise ConflictError(spec_for(kind).name, key, actual=actual)
            conn.execute(_sql(kind).insert, tuple(row.values()))
            self._append_entries(conn, entries)
        return decode(kind, row)

    def update(self, record: R, *, expected_version: int, events: Sequence[Appended] = ()) -> R:
        kind, key = type(record), key_of(record)
        row = {**stamp(kind, encode(record), self._epoch()), "version": expected_version + 1}
        entries = entry_rows(events)
        with self._write(kind) as conn:
            params = (*row.values(), key, expected_version)
            if conn.execute(_sql(kind).update, params).rowcount != 1:
                raise self._lost_race(conn, kind, key, expected_version)
            self._append_entries(conn, entries)
        return decode(kind, row)

    def write_all(self, writes: Sequence[Write]) -> builtins.list[Record | StoreError]:
        epoch, out = self._epoch(), builtins.list[Record | StoreError]()
        if not writes:
            return out
        with self._write(*dict.fromkeys(type(w.record) for w in writes)) as conn:
            for write in writes:
                kind, key = type(write.record), key_of(write.record)
                version = 1 if write.expected_version is None else write.expected_version + 1
                row = {**stamp(kind, encode(write.record), epoch), "version": version}
                if write.expected_version is None:
                    actual = self._version(conn, kind, key)
                    if actual is not None:
                        out.append(ConflictError(spec_for(kind).name, key, actual=actual))
                        continue
                    conn.execute(_sql(kind).insert, tuple(row.values()))
                else:
                    params = (*row.values(), key, write.expected_version)
                    if conn.execute(_sql(kind).update, params).rowcount != 1:
                        out.append(self._lost_race(conn, kind, key, write.expected_version))
                        continue
                self._append_entries(conn, entry_rows(write.events))
                out.append(decode(kind, row))
        return out

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
        with self._write(kind) as conn:
            if conn.execute(_sql(kind).delete, (key, expected_version)).rowcount != 1:
                raise self._lost_race(conn, kind, key, expected_version)
            self._append_entries(conn, entries)

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
        with self._read() as conn:
            rows = conn.execute(f"{select} {where}", tuple(params)).fetchall()
        return [dict(zip(cols, row, strict=True)) for row in rows]

    def get(self, kind: type[R], key: str) -> R | None:
        rows = self._select(kind, f"WHERE {record_spec(kind).key} = ?", (key,))
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
        big = next((n for n, v in wanted.items() if len(v) > _MOST_VALUES), None)
        if big is not None:  # under SQLite's limit on the parameters of one statement
            values = wanted[big]
            parts = [
                self._matching(
                    kind, wanted | {big: values[i : i + _MOST_VALUES]}, after, limit, only
                )
                for i in range(0, len(values), _MOST_VALUES)
            ]
            merged = sorted((r for part in parts for r in part), key=lambda r: r[key])
            return merged if limit is None else merged[:limit]
        where, params = [], builtins.list[object]()
        for name, values in wanted.items():
            if len(values) == 1:
                where.append(f"{name} IS ?")
            else:  # an empty IN matches nothing, as it should
                where.append(f"{name} IN ({', '.join('?' for _ in values)})")
            params.extend(values)
        if after is not None:
            where.append(f"{key} > ?")
            params.append(after)
        params.append(-1 if limit is None else limit)
        clause = " AND ".join(where) or "1"
        return self._select(kind, f"WHERE {clause} ORDER BY {key} LIMIT ?", params, only)

    def create_all(self, records: Sequence[Record]) -> None:
        by_kind: dict[type[Any], builtins.list[tuple[object, ...]]] = {}
        for record in records:
            by_kind.setdefault(type(record), []).append(
                tuple({**stamp(type(record), encode(record), self._epoch()), "version": 1}.values())
            )
        try:
            with self._write(*by_kind) as conn:
                for kind, rows in by_kind.items():
                    conn.executemany(_sql(kind).insert, rows)
        except StoreError as err:  # a key taken: say which (nothing was written)
            if isinstance(err.__cause__, sqlite3.IntegrityError):
                self._name_conflict(records)
            raise

    def _name_conflict(self, records: Sequence[Record]) -> None:
        seen: set[tuple[type[Any], str]] = set()
        for record in records:
            kind, key = type(record), key_of(record)
            with self._read() as conn:
                actual = self._version(conn, kind, key)
            if actual is not None or (kind, key) in seen:
                raise ConflictError(spec_for(kind).name, key, actual=actual or 1)
            seen.add((kind, key))

    def _append(self, entries: Sequence[L]) -> builtins.list[L]:
        kind = type(entries[0])
        rows = [stamp(kind, encode(entry), self._epoch()) for entry in entries]
        with self._write(kind) as conn:
            stored = self._append_rows(conn, kind, rows)
        return [decode(kind, row) for row in stored]

    def _query(
        self, kind: type[L], job_id: str | None, after_seq: int, limit: int | None
    ) -> builtins.list[L]:
        check_limit(after_seq, limit)
        where, params = "WHERE seq > ?", builtins.list[object]([after_seq])
        if job_id is not None:
            where += " AND job_id = ?"
            params.append(job_id)
        params.append(-1 if limit is None else limit)
        rows = self._select(kind, f"{where} ORDER BY seq LIMIT ?", params)
        return [decode(kind, row) for row in rows]

    def put_package(self, job_id: str, archive: bytes) -> None:
        digest = hashlib.sha256(archive).hexdigest()
        with self._write(JobRecord) as conn:  # fenced as the job is
            done = conn.execute(
                "INSERT OR IGNORE INTO packages (job_id, archive, sha256, size) "
                "VALUES (?, ?, ?, ?)",
                (job_id, archive, digest, len(archive)),
            )
            if done.rowcount != 1:
                raise ConflictError("package", job_id, actual=1)

    def _package(self, job_id: str) -> tuple[bytes, str] | None:
        with self._read() as conn:
            row = conn.execute(
                "SELECT archive, sha256 FROM packages WHERE job_id = ?", (job_id,)
            ).fetchone()
        return None if row is None else (bytes(row[0]), str(row[1]))

    def delete_package(self, job_id: str) -> None:
        with self._write(JobRecord) as conn:
            conn.execute("DELETE FROM packages WHERE job_id = ?", (job_id,))

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
