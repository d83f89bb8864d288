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
