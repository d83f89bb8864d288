"""Options shared by several commands."""

from __future__ import annotations

from typing import Annotated

import typer

from meshctl.cli.render import Output

OutputOption = Annotated[
    Output,
    typer.Option(
        "--output", "-o", help="table for people; json or yaml for scripts.", case_sensitive=False
    ),
]
