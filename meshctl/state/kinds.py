"""The one table of record kinds, and the row codec both stores share.

Each record type maps to a :class:`KindSpec`: its short name (used in messages), its SQL table,
its key column, the columns ``Store.list`` may filter on, which fields are JSON payloads, which
are typed details (stored as the JSON of their ``to_json()``, read back with ``of``) and which
are enums. A row is a ``dict`` from column name (= field name) to a SQLite-ready value: str,
int, float, None, or JSON text. Both stores keep rows, so both round-trip identically.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, fields
from enum import StrEnum
from typing import Any, TypeVar

from meshctl.state.records import (
    Appended,
    AttemptDetail,
    AttemptRecord,
    AuditEntry,
    Decision,
    Event,
    InstanceRecord,
    JobRecord,
    JobState,
    LeaseRecord,
    LoanRecord,
    LogEntry,
    NodeDetail,
    NodeRecord,
    PoolRecord,
    Record,
    Role,
    TokenRecord,
    UserRecord,
)

Row = dict[str, Any]
T = TypeVar("T", bound=Record | LogEntry)
Detail = type[AttemptDetail] | type[NodeDetail]


@dataclass(frozen=True, slots=True)
class KindSpec:
    """How one record type is stored."""

    name: str
    table: str
    key: str
    filters: frozenset[str]
    json_fields: frozenset[str] = frozenset()
    enums: Mapping[str, type[StrEnum]] | None = None
    details: Mapping[str, Detail] | None = None


def _spec(
    name: str,
    table: str,
    key: str,
    filters: str,
    json_fields: str = "",
    enums: Mapping[str, type[StrEnum]] | None = None,
    details: Mapping[str, Detail] | None = None,
) -> KindSpec:
    return KindSpec(
        name,
        table,
        key,
        frozenset(filters.split()),
        frozenset(json_fields.split()),
        enums,
        details,
    )


KINDS: Mapping[type[Record | LogEntry], KindSpec] = {
    JobRecord: _spec(
        "job", "jobs", "id", "state team pool owner name", "spec", {"state": JobState}
    ),
    AttemptRecord: _spec(
        "attempt", "attempts", "id", "job_id state", details={"detail": AttemptDetail}
    ),
    PoolRecord: _spec("pool", "pools", "name", "provider state", "observed"),
    NodeRecord: _spec(
        "node", "nodes", "id", "pool state", "labels resources", details={"detail": NodeDetail}
    ),
    InstanceRecord: _spec("instance", "instances", "id", "pool state"),
    LoanRecord: _spec("loan", "loans", "id", "lender borrower pool"),
    UserRecord: _spec("user", "users", "name", "role", "teams", {"role": Role}),
    TokenRecord: _spec("token", "tokens", "id", "username"),
    LeaseRecord: _spec("lease", "leases", "name", ""),
    Event: _spec("event", "events", "seq", "job_id", "data"),
    Decision: _spec("decision", "decisions", "seq", "job_id", "explanation"),
    AuditEntry: _spec("audit entry", "audit", "seq", "", "detail"),
}

RECORD_KINDS: tuple[type[Record], ...] = (
    JobRecord,
    AttemptRecord,
    PoolRecord,
    NodeRecord,
    InstanceRecord,
    LoanRecord,
    UserRecord,
    TokenRecord,
    LeaseRecord,
)


def spec_for(kind: type[Any]) -> KindSpec:
    """The spec of a record type; ``TypeError`` for anything the store does not keep."""
    try:
        return KINDS[kind]
    except (KeyError, TypeError):
        raise TypeError(f"not a state record type: {kind!r}") from None


def record_spec(kind: type[Any]) -> KindSpec:
    """The spec of a mutable record type; ``TypeError`` for log entries and anything else."""
    if kind not in RECORD_KINDS:
        raise TypeError(f"not a state record type: {kind!r} (log entries have their own calls)")
    return KINDS[kind]


_COLUMNS: dict[type[Any], tuple[str, ...]] = {}


def columns(kind: type[Any]) -> tuple[str, ...]:
    """The column names of a kind, in field order (worked out once per kind)."""
    found = _COLUMNS.get(kind)
    if found is None:
        spec_for(kind)
        found = _COLUMNS[kind] = tuple(f.name for f in fields(kind))
    return found


def key_of(record: Record) -> str:
    """The key of a mutable record."""
    key: str = getattr(record, record_spec(type(record)).key)
    return key


def _json_default(value: object) -> object:
    if isinstance(value, Mapping):  # e.g. MappingProxyType; tuples are lists already
        return dict(value)
    raise TypeError(f"{type(value).__name__} is not JSON-serialisable")


def _dumps(name: str, value: object) -> str:
    try:
        return json.dumps(
            value, sort_keys=True, separators=(",", ":"), default=_json_default, allow_nan=False
        )
    except ValueError as err:  # NaN or infinity: not JSON, other readers refuse it
        raise TypeError(f"{name}: {err}") from None


def _detail_json(name: str, value: object, kind: Detail) -> dict[str, Any]:
    if not isinstance(value, kind):  # a plain dict would read back as another value
        raise TypeError(f"{name}: expected {kind.__name__}, got {type(value).__name__}")
    return value.to_json()


def encode(record: Record | LogEntry) -> Row:
    """The row of a record: enums as their value, payloads and details as JSON text, ``*_s``
    as float.

    An enum field given as a plain string is checked here (``ValueError``), so a bad value is
    refused on write rather than stored and found unreadable later.
    """
    spec = spec_for(type(record))
    enums, details = spec.enums or {}, spec.details or {}
    row: Row = {}
    for name in columns(type(record)):
        value = getattr(record, name)
        if name in details:
            value = _dumps(name, _detail_json(name, value, details[name]))
        elif name in spec.json_fields:
            value = _dumps(name, value)
        elif name in enums:
            value = enums[name](value).value
        elif name.endswith("_s") and value is not None:
            value = float(value)
        row[name] = value
    return row


Entry = tuple[type[Any], Row]
"""A log entry a write carries, encoded: its kind (the log it goes to) and its row."""


STAMPED: tuple[type[Any], ...] = (AttemptRecord, Decision)
"""The kinds a fenced store writes its lease's epoch into: dispatches and decisions."""


def stamp(kind: type[Any], row: Row, epoch: int | None) -> Row:
    """``row`` with ``epoch`` set, for the kinds that carry it, when the store is fenced."""
    if epoch is not None and kind in STAMPED:
        return {**row, "epoch": epoch}
    return row


def entry_rows(entries: Sequence[Appended]) -> list[Entry]:
    """The rows of the log entries a write carries (events, audit entries), encoded before
    the write begins, so a value JSON cannot hold fails with nothing written."""
    rows: list[Entry] = []
    for entry in entries:
        if not isinstance(entry, Event | AuditEntry):
            raise TypeError(f"a write appends events and audit entries, not {entry!r}")
        rows.append((type(entry), encode(entry)))
    return rows


def decode(kind: type[T], row: Mapping[str, Any]) -> T:
    """The record of a row (the inverse of :func:`encode`)."""
    spec = spec_for(kind)
    enums, details = spec.enums or {}, spec.details or {}
    values: Row = {}
    for name in columns(kind):
        value = row[name]
        if name in details:
            value = details[name].of(json.loads(value))
        elif name in spec.json_fields:
            value = json.loads(value)
        elif name in enums:
            value = enums[name](value)
        values[name] = value
    return kind(**values)


Filter = str | None | Collection[str]
"""A ``Store.list`` filter's value: one value (None matches NULL), or any of several."""


def check_filters(
    kind: type[Any], filters: Mapping[str, Filter]
) -> dict[str, tuple[str | None, ...]]:
    """Validate ``list`` filters against the kind's key and indexed columns; return, per column, the
    values it may take (encoded, sorted: an empty tuple matches nothing)."""
    spec = record_spec(kind)
    usable = spec.filters | {spec.key}
    unknown = sorted(set(filters) - usable)
    if unknown:
        allowed = ", ".join(sorted(usable))
        raise ValueError(f"cannot filter {spec.name} by {', '.join(unknown)}; use: {allowed}")
    wanted: dict[str, tuple[str | None, ...]] = {}
    for name, value in filters.items():
        if value is None or isinstance(value, str):
            wanted[name] = (_plain(value),)
        else:
            wanted[name] = tuple(sorted({_plain(v) for v in value}, key=str))
    return wanted


def _plain(value: str | None) -> str | None:
    return value.value if isinstance(value, StrEnum) else value


def check_page(limit: int | None) -> None:
    """Validate the paging argument of ``list``."""
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0 or None, got {limit}")


def check_limit(after_seq: int, limit: int | None) -> None:
    """Validate the paging arguments of the log queries."""
    if after_seq < 0:
        raise ValueError(f"after_seq must be >= 0, got {after_seq}")
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0 or None, got {limit}")
