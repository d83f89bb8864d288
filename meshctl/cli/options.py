"""Options shared by several commands."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from meshctl.cli.errors import InvalidRequestError
from meshctl.cli.render import Output

if TYPE_CHECKING:
    from pydantic import ValidationError

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


def flag_error(err: ValidationError, flags: Mapping[str, str]) -> InvalidRequestError:
    """A job built from flags failed validation: one line naming the flag (``flags`` maps a
    field's location to it) and what was expected, with the value given once."""
    first = err.errors()[0]
    # pydantic names the branches of a union in the location ("function-before[...]"): they
    # are not fields the user could have set
    where = ".".join(str(p) for p in first["loc"] if re.fullmatch(r"\w+", str(p)))
    return InvalidRequestError(f"{flags.get(where, where)}: {field_message(first)}")


def field_message(error: Mapping[str, Any]) -> str:
    """pydantic's error in meshctl's words: ``expected ..., got ...`` (no "Value error,"
    prefix; the value named once, and only when it is one value, not a whole section)."""
    from meshctl.model.base import NAME_PATTERN

    kind, ctx, got = error["type"], error.get("ctx") or {}, error.get("input")
    if kind in ("value_error", "assertion_error"):
        text = str(ctx.get("error", error["msg"]))
    elif kind == "string_pattern_mismatch":
        pattern = str(ctx.get("pattern"))
        text = (
            "expected a name of lower-case letters, digits and '-' (at most 63 characters)"
            if pattern == NAME_PATTERN
            else f"expected text matching {pattern}"
        )
    else:
        msg = str(error["msg"]).removeprefix("Value error, ")
        should = msg.startswith("Input should be ")
        text = f"expected {msg.removeprefix('Input should be ')}" if should else msg
    scalar = got is None or isinstance(got, str | int | float | bool)
    if scalar and not re.search(r"\bgot\b", text):
        text += f", got {got!r}"
    return text


def duration_flag(flag: str, value: str) -> float:
    """A duration flag in seconds: a number of seconds, or 90s, 10m, 2h, 1d."""
    from meshctl.units import parse_duration_s

    try:
        return parse_duration_s(value)
    except ValueError as err:
        raise InvalidRequestError(f"{flag}: {err}") from None
