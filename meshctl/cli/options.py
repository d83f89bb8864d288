"""Options shared by several commands."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Annotated

import typer

from meshctl.cli.render import Output

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
