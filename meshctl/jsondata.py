"""What every ``-o json|yaml`` document is made of, below every layer that builds one: times as
ISO-8601 UTC strings, an event as every command prints it. The standard library only: the
types the shapes declare these with (``Timestamp``, ``EventData``, the strict config) are in
``meshctl/jsontypes.py``, with pydantic.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, overload

if TYPE_CHECKING:
    from meshctl.jsontypes import EventData
    from meshctl.state import Event


@overload
def timestamp(at_s: float) -> str: ...
@overload
def timestamp(at_s: None) -> None: ...
@overload
def timestamp(at_s: float | None) -> str | None: ...
def timestamp(at_s: float | None) -> str | None:
    """A moment for ``-o json|yaml``: ISO-8601 in UTC with a ``Z`` (``2026-12-01T14:04:50Z``),
    to the second; None stays None. Every command writes times this way, under keys that end
    in ``_at`` (durations are numbers of seconds under keys that end in ``_s``)."""
    if at_s is None:
        return None
    moment = dt.datetime.fromtimestamp(at_s, dt.UTC).replace(microsecond=0)
    return moment.isoformat().replace("+00:00", "Z")


def event_data(event: Event) -> EventData:
    """An event as every command prints it."""
    return {"occurred_at": timestamp(event.at_s), "kind": event.kind, "message": event.message}
