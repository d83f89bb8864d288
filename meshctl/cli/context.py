"""The ``AppContext`` a command runs in: the root callback's (``meshctl.app.context``)."""

from __future__ import annotations

import typer

from meshctl.app.context import AppContext


def app_context(ctx: typer.Context) -> AppContext:
    obj = ctx.find_root().obj
    if not isinstance(obj, AppContext):  # a command invoked without the root callback
        raise RuntimeError("meshctl commands run under the root app")
    return obj
