"""Options shared by several commands."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from meshctl.cli.render import Output
from meshctl.errors import InvalidRequestError

if TYPE_CHECKING:
    pass

OutputOption = Annotated[
    Output,
    typer.Option(
        "--output", "-o", help="table for people; json or yaml for scripts.", case_sensitive=False
    ),
]

JobFileArgument = Annotated[Path, typer.Argument(help="The job file.")]
MomentOption = Annotated[
    Path | None,
    typer.Option("--mesh", help="A Mesh (all pools idle) or a MeshState snapshot."),
]
PoliciesOption = Annotated[
    list[Path] | None, typer.Option("--policies", "-p", help="Policy files or folders.")
]
NowOption = Annotated[
    dt.datetime | None, typer.Option(help="The moment to decide at (default: now, UTC).")
]


def duration_flag(flag: str, value: str) -> float:
    """A duration flag in seconds: a number of seconds, or 90s, 10m, 2h, 1d."""
    from meshctl.units import parse_duration_s

    try:
        return parse_duration_s(value)
    except ValueError as err:
        raise InvalidRequestError(f"{flag}: {err}") from None
