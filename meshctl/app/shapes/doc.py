"""docs/JSON.md, generated from the shapes: ``python -m meshctl.app.shapes.doc > docs/JSON.md``.

A test compares the file with ``markdown()``: the documentation cannot drift from the shapes
the contract test holds every command to.
"""

from __future__ import annotations

import types
import typing
from typing import Any, Literal, NotRequired, Union

from typing_extensions import is_typeddict

from meshctl.app.shapes import OUTPUTS, STDERR, Output
from meshctl.jsontypes import Timestamp

INTRO = """# JSON output

Every read command takes `-o json` (or `-o yaml`: the same data) for scripts. This page is
generated from `meshctl/app/shapes/` (`python -m meshctl.app.shapes.doc > docs/JSON.md`); a test
fails when they differ, and a contract test runs every command below and validates its output
strictly against its shape: no key missing or extra, the right types, every time parseable.

Conventions, in every command: snake_case keys; the same key for the same thing (`id` is the
object's own id; `job_id`, `pool`, `node` name another object); numbers, booleans and lists as
such; `null` where unknown (never `"-"` or `""`); times as ISO-8601 UTC strings
(`2026-12-01T14:04:50Z`) under keys ending in `_at`; durations in seconds under keys ending in
`_s`; money in US dollars under keys naming `usd`. A key marked *optional* may be absent.

## Errors and exit codes

Exit codes: 0 ok; 1 a failure of the world (a pool, a cloud, the store) or a result that is a
failure (`jobs wait` on a job that failed); 2 invalid input or request, nothing changed; 124
`jobs wait` or `train` ran out of time. Under `-o json|yaml`, stderr holds JSON lines only:
one per warning, then, when the command fails, exactly one error document (usage errors of
the command line included).
"""


def markdown() -> str:
    parts = [INTRO]
    seen: list[Any] = []
    for out in STDERR:
        parts.append(_section(out, seen, level="###"))
    parts.append("## Commands\n")
    for out in OUTPUTS:
        parts.append(_section(out, seen, level="###"))
    parts.append("## Objects\n")
    done: set[str] = set()
    while seen:
        shape = seen.pop(0)
        if shape.__name__ not in done:
            done.add(shape.__name__)
            parts.append(_table(shape, seen))
    return "\n".join(parts).rstrip() + "\n"


def _section(out: Output, seen: list[Any], level: str) -> str:
    lines = [f"{level} `{out.command}`\n"]
    if out.note:
        lines.append(out.note + "\n")
    if out.shape is not None:
        what = _type(out.shape, seen)
        lines.append(f"A {what}." if what.startswith("list") else f"An object: {what}.")
        lines.append("")
    return "\n".join(lines)


def _table(shape: Any, seen: list[Any]) -> str:
    hints = typing.get_type_hints(shape, include_extras=True)
    rows = [f"### {shape.__name__}\n", "| key | type | meaning |", "|---|---|---|"]
    for key, hint in hints.items():
        optional = typing.get_origin(hint) is NotRequired or key in shape.__optional_keys__
        meaning = " ".join(_docs(hint))
        kind = _type(hint, seen) + (" (optional)" if optional else "")
        rows.append(f"| `{key}` | {kind} | {meaning} |")
    return "\n".join(rows) + "\n"


def _docs(hint: Any) -> list[str]:
    found = [m for m in getattr(hint, "__metadata__", ()) if isinstance(m, str)]
    return found + [d for arg in typing.get_args(hint) for d in _docs(arg)]


def _type(hint: Any, seen: list[Any]) -> str:
    if hint is Timestamp:
        return "time"
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Annotated:
        return _type(args[0], seen)
    if origin is NotRequired:
        return _type(args[0], seen)
    if origin in (Union, types.UnionType):
        named = [_type(a, seen) for a in args if a is not type(None)]
        text = " or ".join(named)
        return f"{text} or null" if type(None) in args else text
    if origin is list:
        return f"list of {_type(args[0], seen)}"
    if origin is dict:
        return f"map of {_type(args[0], seen)} to {_type(args[1], seen)}"
    if origin is Literal:
        return "one of " + ", ".join(f"`{a}`" for a in args)
    if is_typeddict(hint):
        seen.append(hint)
        return f"[{hint.__name__}](#{hint.__name__.lower()})"
    return _SCALARS.get(hint, "any value")


_SCALARS = {str: "string", int: "integer", float: "number", bool: "boolean"}

if __name__ == "__main__":
    import sys

    sys.stdout.write(markdown())
