"""The one place that turns meshctl's errors into exit codes and one line (no tracebacks).

Exit codes (docs/GUIDE.md says the same; ``meshctl.errors`` defines them and what each
kind of error means): 0 ok; 1 a failure of the world (a pool, a cloud, a process, the store)
or a result that is a failure (a job that did not succeed); 2 invalid input or request,
nothing changed; 124 a wait that ran out of time, as timeout(1) says it. With
``-o json|yaml`` every failing command writes one JSON error document on stderr
(``render.failure``; its shape is ``shapes.ErrorDocument``), usage errors of typer and click
included; warnings are JSON lines of their own.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import typer
import typer.core

from meshctl.errors import (
    EXIT_FAILURE,
    EXIT_INVALID,
    EXIT_OK,
    Failure,
    InvalidInput,
    MeshctlError,
)
from meshctl.problems import InvalidFileError, Problem

__all__ = [
    "MeshGroup",
    "requested_output",
]


class MeshGroup(typer.core.TyperGroup):
    """The root command group: known errors become one-line errors (or one JSON document
    under ``-o json|yaml``) and their exit codes."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        from meshctl.cli import render

        # One command line's -o and kept problems end with it (tests and runners invoke many
        # in one process).
        token = render.begin_run()
        try:
            return super().main(*args, **kwargs)
        finally:
            render.end_run(token)

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        from meshctl.cli import render

        # Read before parsing, so that a flag that fails to parse is reported as asked too.
        render.remember_output(requested_output(args))
        return list(super().parse_args(ctx, args))

    def invoke(self, ctx: Any) -> Any:
        from meshctl.cli import render

        try:
            result = super().invoke(ctx)
        except InvalidInput as err:
            _fail(EXIT_INVALID, err.problems if isinstance(err, InvalidFileError) else [_line(err)])
        except Failure as err:
            _fail(err.exit_code, [_line(err)])
        except OSError as err:  # a file or folder that cannot be read or written
            _fail(EXIT_FAILURE, [_line(err)])
        except typer.Exit as err:
            render.flush(err.exit_code)
            raise
        except typer.TyperException as err:  # a usage error of the command line
            if type(err).__name__ == "NoArgsIsHelpError":  # typer shows the help itself
                raise
            _fail(err.exit_code, [_usage_line(err)])
        render.flush(EXIT_OK)
        return result


def _fail(exit_code: int, problems: Sequence[str | Problem]) -> None:
    from meshctl.cli import render

    render.failure(exit_code, problems)
    raise typer.Exit(exit_code) from None


def _usage_line(err: Any) -> str:
    """click's message as one line: ``--gpus: expected a number, got 'x9' (meshctl submit
    --help)``; the flag first, as meshctl's own flag errors say it."""
    ctx = getattr(err, "ctx", None)
    where = ctx.command_path[len(ctx.find_root().command_path) :].strip() if ctx else ""
    hint = f" (meshctl {where} --help)" if where else " (meshctl --help)"
    param = getattr(err, "param", None)
    flags = [o for o in getattr(param, "opts", []) if o.startswith("--")]
    message = " ".join(str(getattr(err, "message", "") or err.format_message()).split())
    message = _expected(message.rstrip("."))
    if flags and isinstance(getattr(err, "message", None), str):
        return f"{flags[0]}: {message.rstrip('.')}{hint}"
    return f"{message.rstrip('.')}{hint}"


_NOT_A = re.compile(r"(?P<value>'.*') is not a valid (?P<kind>float|integer|int)")
_OUT_OF = re.compile(r"(?P<value>\S+) is not in the range (?P<range>\S+)")
_KINDS = {"float": "a number", "integer": "a whole number", "int": "a whole number"}
_BOUNDS = (  # click's range notation, in words
    (re.compile(r"^x>=(\S+)$"), "{0} or more"),
    (re.compile(r"^x>(\S+)$"), "more than {0}"),
    (re.compile(r"^x<=(\S+)$"), "{0} or less"),
    (re.compile(r"^x<(\S+)$"), "less than {0}"),
    (re.compile(r"^(\S+)<=x<=(\S+)$"), "{0} to {1}"),
)


def _expected(message: str) -> str:
    """click's words for a value its types refuse, as meshctl's own flags say it: ``'x9' is
    not a valid float`` is ``expected a number, got 'x9'``; ``0 is not in the range x>=1`` is
    ``expected 1 or more, got 0``; anything else as it is."""
    found = _NOT_A.fullmatch(message)
    if found:
        return f"expected {_KINDS[found['kind']]}, got {found['value']}"
    found = _OUT_OF.fullmatch(message)
    if found:
        bounds = found["range"]
        for pattern, words in _BOUNDS:
            matched = pattern.match(bounds)
            if matched:
                bounds = words.format(*matched.groups())
                break
        return f"expected {bounds}, got {found['value']}"
    return message


def requested_output(args: Sequence[str]) -> str | None:
    """The ``--output``/``-o`` value among ``args`` (the last one wins), read before the
    command's own parsing; words after ``--`` belong to the user's command, not to meshctl."""
    found: str | None = None
    words = list(args)
    if "--" in words:
        words = words[: words.index("--")]
    for i, word in enumerate(words):
        if word in ("-o", "--output") and i + 1 < len(words):
            found = words[i + 1]
        elif word.startswith("--output="):
            found = word.removeprefix("--output=")
        elif word.startswith("-o") and len(word) > 2 and not word.startswith("--"):
            found = word[2:]
    return found.lower() if found else None


def _line(err: Exception) -> str:
    """What follows ``error:``: meshctl's own message as it is; the first line of anyone
    else's (an OSError); the error's type when it says nothing."""
    text = str(err) if isinstance(err, MeshctlError) else str(err).partition("\n")[0]
    return text or type(err).__name__
