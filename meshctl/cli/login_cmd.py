"""``meshctl login|logout``: talk to a shared mesh's API server, or stop to.

meshctl login URL [--token TOKEN]      (else read from stdin)
meshctl logout
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from meshctl.cli.context import app_context
from meshctl.errors import InvalidRequestError


def login(
    ctx: typer.Context,
    url: Annotated[str, typer.Argument(help="The API server, e.g. https://mesh.example:8765.")],
    token: Annotated[
        str | None, typer.Option(help="The API token (default: read from stdin).")
    ] = None,
) -> None:
    """Check a token against an API server and keep both.

    Commands then talk to that server instead of the local state. The token
    comes from stdin (or --token) and is kept in a 0600 file. MESHCTL_SERVER
    and MESHCTL_TOKEN do the same for one shell.

    Examples:
      meshctl login https://mesh.example:8765 < token.txt
      meshctl login http://127.0.0.1:8765 --token "$TOKEN"
    """
    from meshctl.app import remote
    from meshctl.cli import render

    if token is None:
        token = typer.prompt("token", hide_input=True) if sys.stdin.isatty() else sys.stdin.read()
    token = token.strip()
    if not token:
        raise InvalidRequestError("--token: expected the token meshctl admin users add printed")
    context = app_context(ctx)
    who = remote.login(context.home, url, token)
    teams = ", ".join(who.get("teams", []))
    render.plain(f"logged in to {url} as {who['name']} ({who['role']}; {teams})")


def logout(ctx: typer.Context) -> None:
    """Forget the server and token that login kept; work locally again.

    Examples:
      meshctl logout
    """
    from meshctl.app import remote
    from meshctl.cli import render

    gone = remote.logout(app_context(ctx).home)
    render.plain("logged out" if gone else "not logged in")
