"""The types every ``-o json|yaml`` shape is built of: the strict TypedDict config, a time as an
ISO-8601 UTC string, an event as every command prints it.

The CLI's shapes (``meshctl/app/shapes``) and the documents built outside the CLI (the
controller's status document, ``meshctl/controller/status.py``) declare their fields with
these; the values are made by ``meshctl/jsondata.py``, which imports no pydantic, so a command
that only prints (``jobs list``) does not pay for it.
"""

from __future__ import annotations

import datetime as dt
from typing import Annotated

from pydantic import AfterValidator, ConfigDict, with_config
from typing_extensions import TypedDict


def _utc_time(text: str) -> str:
    if not text.endswith("Z") or dt.datetime.fromisoformat(text).utcoffset() != dt.timedelta(0):
        raise ValueError(f"expected an ISO-8601 UTC time ending in Z, got {text!r}")
    return text


Timestamp = Annotated[str, AfterValidator(_utc_time)]
STRICT = ConfigDict(extra="forbid", strict=True)


@with_config(STRICT)
class EventData(TypedDict):
    occurred_at: Timestamp
    kind: Annotated[str, "job.pending, node.cordoned, ..."]
    message: str
