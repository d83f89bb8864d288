"""``MemoryStore``: the in-memory, thread-safe twin of ``SqliteStore``.

It keeps the same rows the SQLite store keeps (payloads as JSON text), so records round-trip the
same way in both. One lock makes every call atomic, which is what a transaction means here.
"""

from __future__ import annotations

import builtins
import hashlib
import itertools
import threading
from collections.abc import Sequence
from typing import Any

from meshctl.state.kinds import (
    RECORD_KINDS,
    Entry,
    Row,
    check_limit,
    decode,
    encode,
    entry_rows,
    key_of,
    record_spec,
    spec_for,
    stamp,
)
from meshctl.state.records import Appended, JobRecord, LeaseRecord, Record
from meshctl.state.store import (
    ConflictError,
    L,
    NotFoundError,
    R,
    StoreBase,
    StoreError,
    Write,
)


class MemoryStore(StoreBase):
    """A ``Store`` held in process memory; nothing survives ``close``."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._closed = False
        self._tables: dict[str, dict[str, Row]] = {spec_for(k).table: {} for k in RECORD_KINDS}
        self._logs: dict[str, builtins.list[Row]] = {"events": [], "decisions": [], "audit": []}
        self._packages: dict[str, tuple[bytes, str]] = {}

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError("the state store is closed")

    def _table(self, kind: type[Any]) -> dict[str, Row]:
        self._check_open()
        return self._tables[record_spec(kind).table]

    def _check_version(self, kind: type[Any], key: str, expected: int) -> None:
        row = self._table(kind).get(key)
        name = spec_for(kind).name
        if row is None:
            raise NotFoundError(name, key)
        if row["version"] != expected:
            raise ConflictError(name, key, expected=expected, actual=row["version"])

    def _append_rows(self, rows: Sequence[Row], table: str) -> builtins.list[Row]:
        log = self._logs[table]
        for row in rows:
            log.append({**row, "seq": len(log) + 1})
        return log[len(log) - len(rows) :]

    def _lease_epoch(self, name: str) -> int | None:
        row = self._tables[spec_for(LeaseRecord).table].get(name)
        return None if row is None else int(row["epoch"])

    def _append_entries(self, entries: Sequence[Entry]) -> None:
        for kind, row in entries:
            self._append_rows([row], spec_for(kind).table)

    def create(self, record: R, *, events: Sequence[Appended] = ()) -> R:
        kind, key = type(record), key_of(record)
        row, entries = stamp(kind, encode(record), self._epoch()), entry_rows(events)
        with self._lock:
            table = self._table(kind)
            self._fenced(kind, self._lease_epoch)
            if key in table:
                raise ConflictError(spec_for(type(record)).name, key, actual=table[key]["version"])
            table[key] = row = {**row, "version": 1}
            self._append_entries(entries)
        return decode(type(record), row)

    def update(self, record: R, *, expected_version: int, events: Sequence[Appended] = ()) -> R:
        kind, key = type(record), key_of(record)
        row, entries = stamp(kind, encode(record), self._epoch()), entry_rows(events)
        with self._lock:
            self._check_version(kind, key, expected_version)
            self._fenced(kind, self._lease_epoch)
            table = self._table(type(record))
            table[key] = row = {**row, "version": expected_version + 1}
            self._append_entries(entries)
        return decode(type(record), row)

    def write_all(self, writes: Sequence[Write]) -> builtins.list[Record | StoreError]:
        out = builtins.list[Record | StoreError]()
        with self._lock:  # one lock: one transaction
            self._check_open()
            for kind in dict.fromkeys(type(w.record) for w in writes):
                self._fenced(kind, self._lease_epoch)
            for write in writes:
                try:
                    if write.expected_version is None:
                        out.append(self.create(write.record, events=write.events))
                    else:
                        out.append(self.update(write.record,
                                               expected_version=write.expected_version,
                                               events=write.events))  # fmt: skip
                except (ConflictError, NotFoundError) as err:
                    out.append(err)
        return out

    def delete(
        self,
        kind: type[Record],
        key: str,
        *,
        expected_version: int,
        events: Sequence[Appended] = (),
    ) -> None:
        entries = entry_rows(events)
        with self._lock:
            self._check_version(kind, key, expected_version)
            self._fenced(kind, self._lease_epoch)
            del self._table(kind)[key]
            self._append_entries(entries)

    def get(self, kind: type[R], key: str) -> R | None:
        with self._lock:
            row = self._table(kind).get(key)
        return None if row is None else decode(kind, row)

    def _matching(
        self,
        kind: type[Any],
        wanted: dict[str, tuple[str | None, ...]],
        after: str | None,
        limit: int | None,
        only: tuple[str, ...] | None = None,
    ) -> builtins.list[Row]:
        with self._lock:
            table = self._table(kind)
            rows = [table[key] for key in sorted(table) if after is None or key > after]
        found = (row for row in rows if all(row[name] in values for name, values in wanted.items()))
        return builtins.list(itertools.islice(found, limit))

    def create_all(self, records: Sequence[Record]) -> None:
        epoch = self._epoch()
        rows = [(type(r), key_of(r), {**stamp(type(r), encode(r), epoch), "version": 1})
                for r in records]  # fmt: skip
        with self._lock:
            for kind in {kind for kind, _, _ in rows}:
                self._fenced(kind, self._lease_epoch)
            seen: set[tuple[str, str]] = set()
            for kind, key, _ in rows:
                table = self._table(kind)
                if key in table or (spec_for(kind).table, key) in seen:
                    actual = table[key]["version"] if key in table else 1
                    raise ConflictError(spec_for(kind).name, key, actual=actual)
                seen.add((spec_for(kind).table, key))
            for kind, key, row in rows:
                self._table(kind)[key] = row

    def _append(self, entries: Sequence[L]) -> builtins.list[L]:
        kind = type(entries[0])
        rows = [stamp(kind, encode(entry), self._epoch()) for entry in entries]
        with self._lock:
            self._check_open()
            self._fenced(kind, self._lease_epoch)
            stored = self._append_rows(rows, spec_for(kind).table)
        return [decode(kind, row) for row in stored]

    def _query(
        self, kind: type[L], job_id: str | None, after_seq: int, limit: int | None
    ) -> builtins.list[L]:
        check_limit(after_seq, limit)
        with self._lock:
            self._check_open()
            log = self._logs[spec_for(kind).table]
            rows = [row for row in log[after_seq:] if job_id is None or row["job_id"] == job_id]
        return [decode(kind, row) for row in rows[:limit]]

    def _newest(self, kind: type[L], limit: int) -> builtins.list[L]:
        with self._lock:
            self._check_open()
            log = self._logs[spec_for(kind).table]
            rows = log[-limit:] if limit else []
        return [decode(kind, row) for row in rows]

    def put_package(self, job_id: str, archive: bytes) -> None:
        with self._lock:
            self._check_open()
            self._fenced(JobRecord, self._lease_epoch)  # fenced as the job is
            if job_id in self._packages:
                raise ConflictError("package", job_id, actual=1)
            self._packages[job_id] = (bytes(archive), hashlib.sha256(archive).hexdigest())

    def _package(self, job_id: str) -> tuple[bytes, str] | None:
        with self._lock:
            self._check_open()
            return self._packages.get(job_id)

    def delete_package(self, job_id: str) -> None:
        with self._lock:
            self._check_open()
            self._fenced(JobRecord, self._lease_epoch)
            self._packages.pop(job_id, None)

    def close(self) -> None:
        with self._lock:
            self._closed = True
