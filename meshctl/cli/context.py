"""The context object the root callback builds from the global options (no module state)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import typer


@dataclass(frozen=True, slots=True)
class AppContext:
    home: Path
    providers_dir: Path | None


def app_context(ctx: typer.Context) -> AppContext:
    obj = ctx.find_root().obj
    if not isinstance(obj, AppContext):  # a command invoked without the root callback
        raise RuntimeError("meshctl commands run under the root app")
    return obj
