"""Exit codes and the one place that turns known errors into them (no tracebacks)."""

from __future__ import annotations

from typing import Any, Final

import typer
import typer.core

from meshctl.problems import InvalidFileError

EXIT_OK: Final = 0
EXIT_FAILURE: Final = 1
EXIT_INVALID: Final = 2


class InvalidRequestError(Exception):
    """A request that cannot be carried out as asked: exit 2, nothing changed."""


class CommandError(Exception):
    """The command could not do its work (a process, a cluster, the store): exit 1."""


class MeshGroup(typer.core.TyperGroup):
    """The root command group: invalid files and requests become one-line errors and exit 2."""

    def invoke(self, ctx: Any) -> Any:
        from meshctl.cli import render

        try:
            return super().invoke(ctx)
        except InvalidRequestError as err:
            render.problems([str(err)])
            raise typer.Exit(EXIT_INVALID) from None
        except InvalidFileError as err:
            render.problems(str(p) for p in err.problems)
            raise typer.Exit(EXIT_INVALID) from None
        except CommandError as err:
            render.problems([str(err)])
            raise typer.Exit(EXIT_FAILURE) from None
        except Exception as err:
            if not _known_failure(err):
                raise
            render.problems([f"{err}".splitlines()[0] if str(err) else type(err).__name__])
            raise typer.Exit(EXIT_FAILURE) from None


def _known_failure(err: Exception) -> bool:
    """Failures of the world, not of meshctl: a file or folder that cannot be read or written,
    the state store, a pool that cannot be reached. One line and exit 1, no traceback."""
    return isinstance(err, OSError) or (
        type(err).__module__.startswith(("meshctl.state", "meshctl.pools"))
        and type(err).__name__.endswith("Error")
    )
