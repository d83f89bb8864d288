"""meshctl's errors: what went wrong decides the exit code, not where it was raised.

The contract, for every layer (standard library only, so the pure core may import it too):

- ``InvalidInput``: the input or the request is wrong (a file, a flag, a job that can never
  run); nothing was changed. Exit 2.
- ``Failure``: the world failed (a pool, a cloud, a process, the store), or a result is a
  failure; exit 1, or the ``exit_code`` it carries (124 for a wait that ran out of time).

Raise a subclass of one of the two, never ``MeshctlError`` itself. The message is what the
user reads after ``error:``: one line that says what was expected and what was found. The CLI's
root group (``meshctl.cli.errors.MeshGroup``) is the one place these become exit codes; any
other exception is a bug and keeps its traceback.
"""

from __future__ import annotations

from typing import Final

EXIT_OK: Final = 0
EXIT_FAILURE: Final = 1
EXIT_INVALID: Final = 2
EXIT_TIMEOUT: Final = 124  # what timeout(1) exits with when the command ran out of time


class MeshctlError(Exception):
    """Every error meshctl raises on purpose; its message is shown as it is."""


class InvalidInput(MeshctlError):
    """Invalid input or request: exit 2, nothing changed."""


class Failure(MeshctlError):
    """The world failed (a pool, a cloud, a process, the store): exit 1, or ``exit_code``."""

    def __init__(self, message: str, *, exit_code: int = EXIT_FAILURE) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class InvalidRequestError(InvalidInput):
    """A request that cannot be carried out as asked: exit 2, nothing changed."""


class NotFoundError(InvalidRequestError):
    """What the request names does not exist (or not for its caller): exit 2, HTTP 404."""


class NotAllowedError(InvalidRequestError):
    """What the request names is out of its caller's reach: exit 2, HTTP 403."""


class CommandError(Failure):
    """The command could not do its work (a process, a cluster, the store): exit 1, or the
    code given (``EXIT_TIMEOUT`` for a wait that ran out of time)."""


def in_words(err: BaseException, most: int = 300) -> str:
    """An error as a line for people, never its repr: the first line of its message, after
    its type unless meshctl raised it (ours are worded already; the type alone when it says
    nothing), cut at a word boundary with "..." past ``most`` characters, so recovery lines
    and reasons never end mid-word."""
    lines = str(err).strip().splitlines()
    name = type(err).__name__
    ours = type(err).__module__.startswith("meshctl.")
    text = (lines[0].strip() if ours else f"{name}: {lines[0].strip()}") if lines else name
    if len(text) <= most:
        return text
    cut = text[: most - 3].rsplit(" ", 1)[0].rstrip(" ,;:")
    return f"{cut}..."
