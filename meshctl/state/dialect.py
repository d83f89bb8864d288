"""What one SQL database does its own way: the ``Dialect`` a ``SqlStore`` is given.

The store (``sql.py``) holds the logic once: reads, guarded writes, log appends, the fence,
packages. A dialect answers what differs between databases, and nothing else:

- **the SQL text** (``Syntax``): the parameter mark, whether a log insert answers its ``seq``
  with ``RETURNING``, the lock a fenced write takes on the lease row, the lock a transaction
  takes before it appends to a log, whether flags are a type of their own, how many values
  one filter may have in a statement, the ``LIMIT`` that means none, the column types the
  migrations name (``$key``, ``$int``, ...; ``migrations.py``);
- **the connection**: how it is opened, guarded and replaced, and how a transaction begins
  and ends (``run``);
- **errors**: which of the driver's errors mean what (``key_taken``), and how the rest become
  the store's ``StoreError``;
- **the schema version**: where the number of steps applied is kept, and how openers keep
  out of each other's way while they migrate.

``sqlite_dialect.py`` and ``postgres_dialect.py`` are the two.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

T = TypeVar("T")


class Cursor(Protocol):
    """What the store reads of a statement's result (sqlite3's and psycopg's cursors)."""

    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> builtins.list[Any]: ...


class Conn(Protocol):
    """What the store asks of a connection (sqlite3's and psycopg's)."""

    def execute(self, query: str, params: Sequence[Any] = ..., /) -> Cursor: ...


C = TypeVar("C", bound=Conn)


@dataclass(frozen=True, slots=True)
class Syntax:
    """Where the SQL text of one database differs."""

    placeholder: str
    """The parameter mark: ``?`` or ``%s``."""
    returning_seq: bool
    """A log insert answers its ``seq`` with ``RETURNING seq`` (else the driver says it)."""
    share_lock: str
    """Appended to the fence's read of the lease row: ``""`` where a write holds the whole
    database already, `` FOR SHARE`` where a take of the lease must wait for the write."""
    log_lock: str | None
    """A statement run before a transaction's first log append and held to its commit, so
    entries commit in ``seq`` order (None: writes are one at a time already)."""
    bools: bool
    """Flag columns are a type of their own: their values are sent as ``bool``."""
    most_values: int | None
    """At most this many values of one filter in a statement (None: no limit)."""
    no_limit: int | None
    """The ``LIMIT`` parameter that means no limit."""
    types: Mapping[str, str]
    """The column types the migrations name: ``$key``, ``$int``, ``$real``, ``$seq``,
    ``$bool``, ``$false``, ``$bytes``."""


class Dialect(Protocol[C]):
    """One database's connection and ways, behind a ``SqlStore``."""

    syntax: Syntax
    errors: type[Exception]
    """The driver's base error class."""
    where: str
    """How migration messages name the database (never with a password)."""

    def run(self, work: Callable[[C], T], *, write: bool) -> T:
        """``work(conn)`` under the connection's lock: a write in one transaction (committed
        if ``work`` returns, rolled back if it raises), a read on its own. A driver error is a
        ``StoreError``; the store's own errors pass through."""
        ...

    def insert_log(self, conn: C, statement: str, values: Sequence[object]) -> int:
        """Run a log insert; the ``seq`` the database gave the entry."""
        ...

    def insert_many(self, conn: C, statement: str, rows: Sequence[Sequence[object]]) -> None:
        """Run one insert for each of ``rows``."""
        ...

    def any_of(self, name: str, values: tuple[str | None, ...]) -> tuple[str, list[object]]:
        """The condition that column ``name`` holds any of ``values``, and its parameters."""
        ...

    def key_taken(self, error: BaseException | None) -> bool:
        """Whether a driver error says an insert found its key taken."""
        ...

    def migrate(self, steps: Sequence[str]) -> None:
        """Apply the missing steps (``migrations.migrate``); a newer database is refused."""
        ...

    def schema_version(self, conn: C) -> int:
        """How many steps the database has had."""
        ...

    def set_schema_version(self, conn: C, version: int) -> None:
        """Record, in the step's transaction, that ``version`` steps are applied."""
        ...

    def migrating(self, conn: C) -> AbstractContextManager[None]:
        """Held while an opener applies steps, so two never migrate at once."""
        ...

    def transaction(self, conn: C) -> AbstractContextManager[None]:
        """One transaction of a migration step."""
        ...

    def script(self, conn: C, sql: str) -> None:
        """Run a migration step's statements."""
        ...

    def close(self) -> None:
        """Close the connection; later calls raise ``StoreError``. Twice is fine."""
        ...
