"""The ``Store`` protocol and its errors.

Two implementations keep the same contract: :class:`meshctl.state.memory.MemoryStore` (in
memory, thread-safe) and :class:`meshctl.state.sql.SqlStore`, one store over two dialects:
``SqliteStore`` (``sqlite_dialect.py``: a SQLite file in WAL mode, safe across processes) and
``PostgresStore`` (``postgres_dialect.py``: a Postgres database, safe across processes and
machines). See ``README.md`` in this package for the vocabulary.
"""

from __future__ import annotations

import builtins
import hashlib
from abc import abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, Self, TypeVar

from meshctl.errors import Failure
from meshctl.state.kinds import Filter, check_filters, check_limit, check_page, decode, spec_for
from meshctl.state.records import Appended, AuditEntry, Decision, Event, LeaseRecord, Record

R = TypeVar("R", bound=Record)
L = TypeVar("L", Event, Decision, AuditEntry)


class StoreError(Failure):
    """The state store cannot do what was asked."""


class ConflictError(StoreError):
    """A write lost an optimistic-concurrency race (or a create found the key taken)."""

    def __init__(
        self, kind: str, key: str, *, expected: int | None = None, actual: int | None = None
    ) -> None:
        self.kind, self.key, self.expected, self.actual = kind, key, expected, actual
        if expected is None:
            message = f"{kind} {key!r} already exists (version {actual})"
        else:
            message = (
                f"{kind} {key!r} changed concurrently: "
                f"expected version {expected}, found version {actual}"
            )
        super().__init__(message)

    def __reduce__(self) -> tuple[object, ...]:
        return _rebuild_conflict, (self.kind, self.key, self.expected, self.actual)


def _rebuild_conflict(kind: str, key: str, expected: int | None, actual: int | None) -> Exception:
    return ConflictError(kind, key, expected=expected, actual=actual)


class FencedError(StoreError):
    """A write by a controller that no longer leads: another took the lease it was fenced
    with (``Store.fence``). Nothing was written."""

    def __init__(self, lease: str, epoch: int, found: int | None) -> None:
        self.lease, self.epoch, self.found = lease, epoch, found
        now = "no lease" if found is None else f"epoch {found}"
        super().__init__(f"lease {lease!r}: this controller leads no more (epoch {epoch}; {now})")

    def __reduce__(self) -> tuple[object, ...]:
        return FencedError, (self.lease, self.epoch, self.found)


class NotFoundError(StoreError):
    """The record to update or delete does not exist."""

    def __init__(self, kind: str, key: str) -> None:
        self.kind, self.key = kind, key
        super().__init__(f"{kind} {key!r} not found")

    def __reduce__(self) -> tuple[object, ...]:
        return NotFoundError, (self.kind, self.key)


@dataclass(frozen=True, slots=True)
class Write:
    """One write of a batch (``Store.write_all``): ``record`` created (``expected_version``
    None) or updated from ``expected_version``, with the log entries it carries."""

    record: Record
    expected_version: int | None = None
    events: Sequence[Appended] = ()


class Store(Protocol):
    """Persistence for the controller: versioned records plus append-only logs.

    ``kind`` is a record type (``JobRecord``, ``AttemptRecord``, ``PoolRecord``, ``NodeRecord``,
    ``InstanceRecord``). The ``version`` and ``seq`` fields of records passed in are ignored:
    the store sets them and returns the stored values. ``events`` given to a write (events,
    and audit entries) are appended in the same transaction: the write and its log entries
    commit together or not at all.
    """

    def create(self, record: R, *, events: Sequence[Appended] = ()) -> R:
        """Store a new record at version 1; ``ConflictError`` if its key exists."""
        ...

    def update(self, record: R, *, expected_version: int, events: Sequence[Appended] = ()) -> R:
        """Replace a record whose stored version is ``expected_version``; return it at +1.

        ``NotFoundError`` if it is missing, ``ConflictError`` if its version differs.
        """
        ...

    def delete(
        self,
        kind: type[Record],
        key: str,
        *,
        expected_version: int,
        events: Sequence[Appended] = (),
    ) -> None:
        """Remove a record whose stored version is ``expected_version``."""
        ...

    def get(self, kind: type[R], key: str) -> R | None:
        """The stored record, or None."""
        ...

    def list(
        self,
        kind: type[R],
        *,
        after: str | None = None,
        limit: int | None = None,
        **filters: Filter,
    ) -> builtins.list[R]:
        """Records of a kind, ordered by key, matching every ``column=value`` filter; a value
        may be several (``state=ACTIVE_ATTEMPT``: any of them). A page: keys after ``after``,
        at most ``limit`` of them.

        Only the kind's indexed columns may be filtered on; any other name is a ``ValueError``.
        What a cycle reads goes through these indexes, so it does not grow with history.
        """
        ...

    def versions(self, kind: type[Record], **filters: Filter) -> dict[str, int]:
        """The key and version of each record ``list`` would find with these filters, none
        of the records read: a reader that keeps records reads again only those that
        changed (``list`` with ``<key>=[...]``)."""
        ...

    def create_all(self, records: Sequence[Record]) -> None:
        """Store new records at version 1 in one transaction (an import, a restore); a key
        that exists, or comes twice, is a ``ConflictError`` and nothing is written."""
        ...

    def write_all(self, writes: Sequence[Write]) -> builtins.list[Record | StoreError]:
        """Each write as ``create`` or ``update`` does it, in order, all in one transaction;
        the answer, one per write: the stored record, or the ``ConflictError`` or
        ``NotFoundError`` of a write that lost (a key taken, a version moved, a record gone),
        the others written all the same. A controller writes a cycle's changes so (one
        commit, not one a job). A fenced store that leads no more raises ``FencedError``, and
        nothing is written."""
        ...

    def put_package(self, job_id: str, archive: bytes) -> None:
        """Keep a job's files in the store (a gzipped tar), so that a controller on another
        host than the one that took the job in can run it. Files kept under that id already:
        ``ConflictError`` (an id drawn twice), and they stay as they were."""
        ...

    def package(self, job_id: str) -> bytes | None:
        """A job's files as ``put_package`` kept them (checked against their SHA-256: a
        ``StoreError`` if they changed), or None."""
        ...

    def delete_package(self, job_id: str) -> None:
        """Forget a job's files (none kept: nothing to do)."""
        ...

    def append_event(self, event: Event) -> Event:
        """Append an event; return it with the ``seq`` the store assigned."""
        ...

    def events(
        self, *, job_id: str | None = None, after_seq: int = 0, limit: int | None = None
    ) -> builtins.list[Event]:
        """Events with ``seq > after_seq`` (of one job, if given), ordered by seq."""
        ...

    def newest_events(self, limit: int) -> builtins.list[Event]:
        """The ``limit`` newest events, ordered by seq: what ``status`` shows, read without
        the rest of the log."""
        ...

    def record_decision(self, decision: Decision) -> Decision:
        """Append a decision; return it with the ``seq`` the store assigned."""
        ...

    def record_decisions(self, decisions: Sequence[Decision]) -> builtins.list[Decision]:
        """Append decisions in one transaction (all or none), in order; return them with the
        ``seq`` each was given. A controller records a cycle's decisions so."""
        ...

    def decisions(
        self, *, job_id: str | None = None, after_seq: int = 0, limit: int | None = None
    ) -> builtins.list[Decision]:
        """Decisions with ``seq > after_seq`` (of one job, if given), ordered by seq."""
        ...

    def append_audit(self, entry: AuditEntry) -> AuditEntry:
        """Append an audit entry; return it with the ``seq`` the store assigned."""
        ...

    def audit(self, *, after_seq: int = 0, limit: int | None = None) -> builtins.list[AuditEntry]:
        """Audit entries with ``seq > after_seq``, ordered by seq."""
        ...

    def fence(self, lease: str, epoch: int | None) -> None:
        """From now on every write (but to leases) first checks, in its own transaction, that
        lease ``lease`` is still at ``epoch``: ``FencedError`` if it is not, and nothing is
        written. Attempts and decisions written are stamped with ``epoch``. None: no check
        (the default: a store not used by a controller that stands by)."""
        ...

    def close(self) -> None:
        """Release the store; later calls raise ``StoreError``. Closing twice is fine."""
        ...

    def __enter__(self) -> Self: ...

    def __exit__(self, *exc_info: object) -> None: ...


class StoreBase(Store):
    """What the stores share: the log accessors, the fence and the context manager, over two
    primitives."""

    _fencing: tuple[str, int] | None = None

    def fence(self, lease: str, epoch: int | None) -> None:
        self._fencing = None if epoch is None else (lease, epoch)

    def _epoch(self) -> int | None:
        """The epoch this store is fenced with, or None."""
        return None if self._fencing is None else self._fencing[1]

    def _fenced(self, kind: type[Any], found: Callable[[str], int | None]) -> None:
        """``FencedError`` unless the lease is at this store's epoch (``found``: the epoch
        stored for a lease name, read in the write's transaction). Leases are not fenced."""
        if self._fencing is None or kind is LeaseRecord:
            return
        lease, epoch = self._fencing
        stored = found(lease)
        if stored != epoch:
            raise FencedError(lease, epoch, stored)

    def list(
        self,
        kind: type[R],
        *,
        after: str | None = None,
        limit: int | None = None,
        **filters: Filter,
    ) -> builtins.list[R]:
        check_page(limit)
        rows = self._matching(kind, check_filters(kind, filters), after, limit)
        return [decode(kind, row) for row in rows]

    def versions(self, kind: type[Record], **filters: Filter) -> dict[str, int]:
        key = spec_for(kind).key
        rows = self._matching(kind, check_filters(kind, filters), None, None, (key, "version"))
        return {row[key]: int(row["version"]) for row in rows}

    @abstractmethod
    def _matching(
        self,
        kind: type[Any],
        wanted: dict[str, tuple[str | None, ...]],
        after: str | None,
        limit: int | None,
        only: tuple[str, ...] | None = None,
    ) -> builtins.list[dict[str, Any]]:
        """The stored rows of a kind matching ``wanted`` (``check_filters``), ordered by key,
        after ``after``, at most ``limit``; ``only``: these columns are enough."""

    @abstractmethod
    def _append(self, entries: Sequence[L]) -> builtins.list[L]:
        """Append log entries of one kind in one transaction, in order; return them with their
        ``seq``."""

    @abstractmethod
    def _query(
        self, kind: type[L], job_id: str | None, after_seq: int, limit: int | None
    ) -> builtins.list[L]:
        """Log entries of ``kind`` after ``after_seq`` (of one job, if given), by seq."""

    def package(self, job_id: str) -> bytes | None:
        found = self._package(job_id)
        if found is None:
            return None
        archive, sha256 = found
        if hashlib.sha256(archive).hexdigest() != sha256:
            raise StoreError(f"the files of job {job_id} in the store are damaged (SHA-256)")
        return archive

    @abstractmethod
    def _package(self, job_id: str) -> tuple[bytes, str] | None:
        """A job's kept archive and the SHA-256 it was kept with, or None."""

    def append_event(self, event: Event) -> Event:
        return self._append([event])[0]

    def events(
        self, *, job_id: str | None = None, after_seq: int = 0, limit: int | None = None
    ) -> builtins.list[Event]:
        return self._query(Event, job_id, after_seq, limit)

    def newest_events(self, limit: int) -> builtins.list[Event]:
        check_limit(0, limit)
        return self._newest(Event, limit)

    @abstractmethod
    def _newest(self, kind: type[L], limit: int) -> builtins.list[L]:
        """The ``limit`` newest log entries of ``kind``, by seq."""

    def record_decision(self, decision: Decision) -> Decision:
        return self._append([decision])[0]

    def record_decisions(self, decisions: Sequence[Decision]) -> builtins.list[Decision]:
        return self._append(decisions) if decisions else []

    def decisions(
        self, *, job_id: str | None = None, after_seq: int = 0, limit: int | None = None
    ) -> builtins.list[Decision]:
        return self._query(Decision, job_id, after_seq, limit)

    def append_audit(self, entry: AuditEntry) -> AuditEntry:
        return self._append([entry])[0]

    def audit(self, *, after_seq: int = 0, limit: int | None = None) -> builtins.list[AuditEntry]:
        return self._query(AuditEntry, None, after_seq, limit)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
