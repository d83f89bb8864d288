"""``SqlStore``: the ``Store`` kept in a SQL database, written once for every dialect.

The version check and the write are one statement (``UPDATE ... WHERE key = ? AND version =
?``) inside the write's transaction, so two controllers can never both apply a change made from
the same version: in SQLite every write runs under ``BEGIN IMMEDIATE`` (one writer at a time);
in Postgres the row lock makes a second writer from the same version wait, re-read the row and
match nothing. A create inserts unless the key is taken (``ON CONFLICT DO NOTHING``) and says
who took it. A write and the log entries it carries commit together; a fenced store reads the
lease in the same transaction first (``Store.fence``).

What differs between databases (the connection, how a transaction begins, the parameter mark,
locks, errors, the schema version's home) is the ``Dialect``'s (``dialect.py``):
``sqlite_dialect.SqliteStore`` and ``postgres_dialect.PostgresStore`` are this store with one.
"""

from __future__ import annotations

import builtins
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, fields
from functools import partial
from typing import Any, Generic

from meshctl.state.dialect import C, Dialect, Syntax
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
class Statements:
    """The statements of one kind in one dialect, built once from the kind table."""

    columns: tuple[str, ...]
    written: tuple[str, ...]  # all but seq, which the database assigns
    flags: frozenset[str]  # sent as bool (``Syntax.bools``), whatever the record holds
    plain: bool  # a row's values are the written ones, in order: no seq, no flag
    insert: str
    create: str
    update: str
    delete: str
    select: str
    version: str


def _build(kind: type[Any], syntax: Syntax) -> Statements:
    spec, cols, mark = spec_for(kind), columns(kind), syntax.placeholder
    written = tuple(c for c in cols if c != "seq")
    table, key = spec.table, spec.key
    flags = frozenset(f.name for f in fields(kind) if syntax.bools and f.type in ("bool", bool))
    insert = (
        f"INSERT INTO {table} ({', '.join(written)}) VALUES ({', '.join(mark for _ in written)})"
    )
    returning = " RETURNING seq" if "seq" in cols and syntax.returning_seq else ""
    return Statements(
        columns=cols,
        written=written,
        flags=flags,
        plain=not flags and written == cols,
        insert=insert + returning,
        create=f"{insert} ON CONFLICT ({key}) DO NOTHING",
        update=f"UPDATE {table} SET {', '.join(f'{c} = {mark}' for c in written)} "
        f"WHERE {key} = {mark} AND version = {mark}",
        delete=f"DELETE FROM {table} WHERE {key} = {mark} AND version = {mark}",
        select=f"SELECT {', '.join(cols)} FROM {table}",
        version=f"SELECT version FROM {table} WHERE {key} = {mark}",
    )


def _values(sql: Statements, row: Row) -> tuple[object, ...]:
    """The parameters of a row's written columns, in order."""
    if sql.plain:
        return tuple(row.values())
    return tuple(bool(row[c]) if c in sql.flags else row[c] for c in sql.written)


class SqlStore(StoreBase, Generic[C]):
    """A ``Store`` in a SQL database, through ``dialect`` (migrated on open)."""

    def __init__(self, dialect: Dialect[C], migrations: Sequence[str]) -> None:
        self._dialect = dialect
        syntax = dialect.syntax
        self._sql = {kind: _build(kind, syntax) for kind in KINDS}
        self._mark, self._no_limit = syntax.placeholder, syntax.no_limit
        self._lease_read = f"SELECT epoch FROM leases WHERE name = {self._mark}{syntax.share_lock}"
        try:
            dialect.migrate(migrations)
        except BaseException:
            dialect.close()
            raise

    def _statements(self, kind: type[Any]) -> Statements:
        spec_for(kind)  # a TypeError for anything the store does not keep
        return self._sql[kind]

    # --- inside a write's transaction ------------------------------------------------------

    def _fence(self, conn: C, kinds: Sequence[type[Any]]) -> None:
        """``FencedError`` unless the lease is at this store's epoch, for writes of ``kinds``."""
        for kind in kinds:
            self._fenced(kind, partial(self._lease_epoch, conn))

    def _lease_epoch(self, conn: C, name: str) -> int | None:
        """The epoch of a lease, read in the write's transaction (and, where the dialect locks
        it, held until it ends: a controller taking the lease over waits for the write)."""
        row = conn.execute(self._lease_read, (name,)).fetchone()
        return None if row is None else int(row[0])

    def _version(self, conn: C, kind: type[Any], key: str) -> int | None:
        row = conn.execute(self._statements(kind).version, (key,)).fetchone()
        return None if row is None else int(row[0])

    def _lost_race(self, conn: C, kind: type[Any], key: str, expected: int) -> StoreError:
        """The error for a guarded write that matched no row."""
        actual = self._version(conn, kind, key)
        name = spec_for(kind).name
        if actual is None:
            return NotFoundError(name, key)
        return ConflictError(name, key, expected=expected, actual=actual)

    def _append_rows(self, conn: C, entries: Sequence[Entry]) -> builtins.list[Row]:
        """Insert log rows, each in its own log, in order (under the dialect's log lock, taken
        after the record write: a transaction holding it waits on no row); return them with
        their ``seq``."""
        stored = []
        if entries and self._dialect.syntax.log_lock is not None:
            conn.execute(self._dialect.syntax.log_lock)
        for kind, row in entries:
            sql = self._statements(kind)
            seq = self._dialect.insert_log(conn, sql.insert, _values(sql, row))
            stored.append({**row, "seq": seq})
        return stored

    def _write(self, conn: C, write: Write, epoch: int | None) -> Record | StoreError:
        """One write of a batch: the stored record, or the error of a write that lost."""
        kind, key = type(write.record), key_of(write.record)
        sql = self._statements(kind)
        version = 1 if write.expected_version is None else write.expected_version + 1
        row = {**stamp(kind, encode(write.record), epoch), "version": version}
        if write.expected_version is None:
            if conn.execute(sql.create, _values(sql, row)).rowcount != 1:
                actual = self._version(conn, kind, key) or 1
                return ConflictError(spec_for(kind).name, key, actual=actual)
        else:
            params = (*_values(sql, row), key, write.expected_version)
            if conn.execute(sql.update, params).rowcount != 1:
                return self._lost_race(conn, kind, key, write.expected_version)
        self._append_rows(conn, entry_rows(write.events))
        return decode(kind, row)

    # --- versioned records -----------------------------------------------------------------

    def create(self, record: R, *, events: Sequence[Appended] = ()) -> R:
        kind, key = type(record), key_of(record)
        sql, row = (
            self._statements(kind),
            {**stamp(kind, encode(record), self._epoch()), "version": 1},
        )
        entries = entry_rows(events)

        def work(conn: C) -> None:
            self._fence(conn, (kind,))
            while conn.execute(sql.create, _values(sql, row)).rowcount != 1:
                actual = self._version(conn, kind, key)
                if actual is not None:  # else deleted meanwhile: insert again
                    raise ConflictError(spec_for(kind).name, key, actual=actual)
            self._append_rows(conn, entries)

        self._dialect.run(work, write=True)
        return decode(kind, row)

    def update(self, record: R, *, expected_version: int, events: Sequence[Appended] = ()) -> R:
        kind, key = type(record), key_of(record)
        row = {**stamp(kind, encode(record), self._epoch()), "version": expected_version + 1}
        sql, entries = self._statements(kind), entry_rows(events)

        def work(conn: C) -> None:
            self._fence(conn, (kind,))
            params = (*_values(sql, row), key, expected_version)
            if conn.execute(sql.update, params).rowcount != 1:
                raise self._lost_race(conn, kind, key, expected_version)
            self._append_rows(conn, entries)

        self._dialect.run(work, write=True)
        return decode(kind, row)

    def write_all(self, writes: Sequence[Write]) -> builtins.list[Record | StoreError]:
        epoch = self._epoch()

        def work(conn: C) -> builtins.list[Record | StoreError]:
            self._fence(conn, builtins.list(dict.fromkeys(type(w.record) for w in writes)))
            return [self._write(conn, write, epoch) for write in writes]

        return self._dialect.run(work, write=True) if writes else []

    def delete(
        self,
        kind: type[Record],
        key: str,
        *,
        expected_version: int,
        events: Sequence[Appended] = (),
    ) -> None:
        record_spec(kind)
        statement, entries = self._statements(kind).delete, entry_rows(events)

        def work(conn: C) -> None:
            self._fence(conn, (kind,))
            if conn.execute(statement, (key, expected_version)).rowcount != 1:
                raise self._lost_race(conn, kind, key, expected_version)
            self._append_rows(conn, entries)

        self._dialect.run(work, write=True)

    def create_all(self, records: Sequence[Record]) -> None:
        by_kind: dict[type[Any], builtins.list[tuple[object, ...]]] = {}
        for record in records:
            kind = type(record)
            row = {**stamp(kind, encode(record), self._epoch()), "version": 1}
            by_kind.setdefault(kind, []).append(_values(self._statements(kind), row))

        def work(conn: C) -> None:
            self._fence(conn, builtins.list(by_kind))
            for kind, rows in by_kind.items():
                self._dialect.insert_many(conn, self._statements(kind).insert, rows)

        try:
            self._dialect.run(work, write=True)
        except StoreError as err:  # a key taken: say which (nothing was written)
            if self._dialect.key_taken(err.__cause__):
                self._name_conflict(records)
            raise

    def _name_conflict(self, records: Sequence[Record]) -> None:
        seen: set[tuple[type[Any], str]] = set()
        for record in records:
            kind, key = type(record), key_of(record)
            actual = self._dialect.run(partial(self._version, kind=kind, key=key), write=False)
            if actual is not None or (kind, key) in seen:
                raise ConflictError(spec_for(kind).name, key, actual=actual or 1)
            seen.add((kind, key))

    # --- reads ------------------------------------------------------------------------------

    def _select(
        self,
        kind: type[Any],
        where: str,
        params: Sequence[object],
        only: tuple[str, ...] | None = None,
    ) -> builtins.list[Row]:
        """Rows of a kind; ``only``: just these columns."""
        sql = self._statements(kind)
        cols = sql.columns if only is None else only
        select = (
            sql.select if only is None else f"SELECT {', '.join(only)} FROM {spec_for(kind).table}"
        )
        query, values = f"{select} {where}", tuple(params)
        rows = self._dialect.run(lambda conn: conn.execute(query, values).fetchall(), write=False)
        return [dict(zip(cols, row, strict=True)) for row in rows]

    def get(self, kind: type[R], key: str) -> R | None:
        rows = self._select(kind, f"WHERE {record_spec(kind).key} = {self._mark}", (key,))
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
        key, most = spec_for(kind).key, self._dialect.syntax.most_values
        big = next((n for n, v in wanted.items() if most is not None and len(v) > most), None)
        if big is not None and most is not None:  # a statement per ``most`` values: merged
            values = wanted[big]
            parts = [
                self._matching(kind, wanted | {big: values[i : i + most]}, after, limit, only)
                for i in range(0, len(values), most)
            ]
            merged = sorted((r for part in parts for r in part), key=lambda r: r[key])
            return merged if limit is None else merged[:limit]
        where, params = [], builtins.list[object]()
        for name, values in wanted.items():
            clause, values_params = self._dialect.any_of(name, values)
            where.append(clause)
            params.extend(values_params)
        if after is not None:
            where.append(f"{key} > {self._mark}")
            params.append(after)
        params.append(self._no_limit if limit is None else limit)
        clause = f"WHERE {' AND '.join(where)} " if where else ""
        return self._select(kind, f"{clause}ORDER BY {key} LIMIT {self._mark}", params, only)

    # --- logs -------------------------------------------------------------------------------

    def _append(self, entries: Sequence[L]) -> builtins.list[L]:
        kind = type(entries[0])
        rows = [(kind, stamp(kind, encode(entry), self._epoch())) for entry in entries]

        def work(conn: C) -> builtins.list[Row]:
            self._fence(conn, (kind,))
            return self._append_rows(conn, rows)

        stored = self._dialect.run(work, write=True)
        return [decode(kind, row) for row in stored]

    def _query(
        self, kind: type[L], job_id: str | None, after_seq: int, limit: int | None
    ) -> builtins.list[L]:
        check_limit(after_seq, limit)
        where, params = f"WHERE seq > {self._mark}", builtins.list[object]([after_seq])
        if job_id is not None:
            where += f" AND job_id = {self._mark}"
            params.append(job_id)
        params.append(self._no_limit if limit is None else limit)
        rows = self._select(kind, f"{where} ORDER BY seq LIMIT {self._mark}", params)
        return [decode(kind, row) for row in rows]

    def _newest(self, kind: type[L], limit: int) -> builtins.list[L]:
        rows = self._select(kind, f"ORDER BY seq DESC LIMIT {self._mark}", [limit])
        return [decode(kind, row) for row in reversed(rows)]

    # --- packages ---------------------------------------------------------------------------

    def put_package(self, job_id: str, archive: bytes) -> None:
        digest, mark = hashlib.sha256(archive).hexdigest(), self._mark
        statement = (
            f"INSERT INTO packages (job_id, archive, sha256, size) "
            f"VALUES ({mark}, {mark}, {mark}, {mark}) ON CONFLICT (job_id) DO NOTHING"
        )

        def work(conn: C) -> None:
            self._fence(conn, (JobRecord,))  # fenced as the job is
            if conn.execute(statement, (job_id, archive, digest, len(archive))).rowcount != 1:
                raise ConflictError("package", job_id, actual=1)

        self._dialect.run(work, write=True)

    def _package(self, job_id: str) -> tuple[bytes, str] | None:
        query = f"SELECT archive, sha256 FROM packages WHERE job_id = {self._mark}"
        row = self._dialect.run(lambda conn: conn.execute(query, (job_id,)).fetchone(), write=False)
        return None if row is None else (bytes(row[0]), str(row[1]))

    def delete_package(self, job_id: str) -> None:
        statement = f"DELETE FROM packages WHERE job_id = {self._mark}"

        def work(conn: C) -> None:
            self._fence(conn, (JobRecord,))
            conn.execute(statement, (job_id,))

        self._dialect.run(work, write=True)

    def close(self) -> None:
        self._dialect.close()
