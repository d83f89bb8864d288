"""What every ``-o json|yaml`` document is made of, below every layer that builds one.

The CLI's shapes (``meshctl/app/shapes``) and the documents built outside the CLI (the
controller's status document, ``meshctl/controller/status.py``) share these pieces: the strict
TypedDict config, times as ISO-8601 UTC strings, and an event as every command prints it.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Annotated, overload

from pydantic import AfterValidator, ConfigDict, with_config
from typing_extensions import TypedDict

if TYPE_CHECKING:
    from meshctl.state import Event


def _utc_time(text: str) -> str:
    if not text.endswith("Z") or dt.datetime.fromisoformat(text).utcoffset() != dt.timedelta(0):
        raise ValueError(f"expected an ISO-8601 UTC time ending in Z, got {text!r}")
    return text


Timestamp = Annotated[str, AfterValidator(_utc_time)]
STRICT = ConfigDict(extra="forbid", strict=True)


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


@with_config(STRICT)
class EventData(TypedDict):
    occurred_at: Timestamp
    kind: Annotated[str, "job.pending, node.cordoned, ..."]
    message: str


def event_data(event: Event) -> EventData:
    """An event as every command prints it."""
    return {"occurred_at": timestamp(event.at_s), "kind": event.kind, "message": event.message}
