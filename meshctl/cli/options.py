"""Options shared by several commands."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from meshctl.cli.errors import InvalidRequestError
from meshctl.cli.render import Output

if TYPE_CHECKING:
    from pydantic import BaseModel, ValidationError

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


def flag_error(
    err: ValidationError, model: type[BaseModel], flags: Mapping[str, str]
) -> InvalidRequestError:
    """A ``model`` built from flags failed validation: one line naming the flag (``flags``
    maps a field's location to it) and what was expected, with the value given once."""
    from meshctl.files import error_message

    first = err.errors()[0]
    # pydantic names the branches of a union in the location ("function-before[...]"): they
    # are not fields the user could have set
    where = ".".join(str(p) for p in first["loc"] if re.fullmatch(r"\w+", str(p)))
    message = error_message(dict(first), model, tuple(first["loc"]))
    return InvalidRequestError(f"{flags.get(where, where)}: {message}")


def duration_flag(flag: str, value: str) -> float:
    """A duration flag in seconds: a number of seconds, or 90s, 10m, 2h, 1d."""
    from meshctl.units import parse_duration_s

    try:
        return parse_duration_s(value)
    except ValueError as err:
        raise InvalidRequestError(f"{flag}: {err}") from None
