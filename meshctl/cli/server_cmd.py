"""``meshctl server`` and ``meshctl admin``: the commands of a shared mesh's host.

    meshctl server [--host 127.0.0.1] [--port 8765] [--store URL] [--tls-cert F --tls-key F]
    meshctl admin users add NAME --team T [--team T2] --role user|team-admin|platform-admin
    meshctl admin users list | token NAME | revoke NAME
    meshctl admin audit [--after SEQ] [--limit N]

``admin`` runs on the server's host, against its store (``--store``, default the home's
state.db); it prints a token once, and the store keeps only its digest.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer

from meshctl.app.context import AppContext
from meshctl.cli.context import app_context
from meshctl.cli.options import OutputOption
from meshctl.cli.render import Column, Output
from meshctl.errors import InvalidRequestError

admin = typer.Typer(help="Users, tokens and the audit log of a shared mesh.", no_args_is_help=True)
users = typer.Typer(help="Users and their API tokens.", no_args_is_help=True)
admin.add_typer(users, name="users")

StoreOption = Annotated[
    str | None,
    typer.Option(
        "--store",
        envvar="MESHCTL_STORE",
        help="The state store: postgresql://... or a SQLite file (default: the home's).",
        show_default=False,
    ),
]


def open_store_for(context: AppContext, url: str | None) -> Any:
    """The store ``--store`` names, else the home's SQLite file."""
    from meshctl.state import open_store_at

    return open_store_at(url or context.store_url, context.home)


def server(
    ctx: typer.Context,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8765,
    store: StoreOption = None,
    tls_cert: Annotated[
        Path | None, typer.Option("--tls-cert", help="TLS certificate (PEM).")
    ] = None,
    tls_key: Annotated[Path | None, typer.Option("--tls-key", help="TLS private key.")] = None,
    max_upload: Annotated[
        int, typer.Option("--max-upload", help="Largest request body, MiB (a job's files).")
    ] = 128,
    workers: Annotated[
        int, typer.Option(help="Server processes (each with its own store connection).")
    ] = 1,
) -> None:
    """Serve the mesh's API to its users: jobs, nodes, status, audit log.

    The API server of a shared mesh (FastAPI on uvicorn): jobs, status, nodes
    and the audit log under /v1/ for users with tokens and roles, /metrics for
    Prometheus. It refuses a non-loopback address without TLS
    (docs/OPERATIONS.md).

    Examples:
      meshctl server
      meshctl --store postgresql://meshctl@db/meshctl server --workers 2
      meshctl server --host 0.0.0.0 --tls-cert cert.pem --tls-key key.pem
    """
    from meshctl.cli import render
    from meshctl.server.server import Listen, Settings, check_listen, serve

    context = app_context(ctx)
    listen = Listen(host, port, tls_cert, tls_key)
    check_listen(listen)
    if max_upload < 1:
        raise InvalidRequestError(f"--max-upload: expected at least 1 (MiB), got {max_upload}")
    if workers < 1:
        raise InvalidRequestError(f"--workers: expected at least 1, got {workers}")
    with open_store_for(context, store):  # opened (and migrated) once, here: its errors, exit 2
        pass
    settings = Settings(str(context.home), _path(context.mesh_path), _path(context.providers_dir),
                        store or context.store_url, max_upload * 2**20)  # fmt: skip
    scheme = "https" if tls_cert else "http"
    say = f"serving {scheme}://{host}:{port} ({workers} process{'es' if workers > 1 else ''})"
    serve(settings, listen, workers, lambda: render.note(say))


def _path(path: Path | None) -> str | None:
    return None if path is None else str(path.resolve())


@users.command("add")
def users_add(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="The user's name.")],
    team: Annotated[list[str], typer.Option("--team", help="A team their jobs may be charged to.")],
    role: Annotated[str, typer.Option(help="user, team-admin or platform-admin.")] = "user",
    store: StoreOption = None,
) -> None:
    """Add a user; print their API token (shown this once).

    A user has teams their jobs may be charged to and a role: user,
    team-admin or platform-admin. Tokens are kept as digests.

    Examples:
      meshctl admin users add ana --team vision
      meshctl admin users add bo --team llm --team search --role team-admin
    """
    from meshctl.cli import render
    from meshctl.server.identity import add_user, check_role

    checked = check_role(role)
    with open_store_for(app_context(ctx), store) as opened:
        user, token = add_user(opened, name, team, checked, time.time())
    teams = ", ".join(user.teams)
    render.note(f"{user.name} ({checked.value}; {teams}): their API token, shown this once:")
    render.plain(token)


@users.command("list")
def users_list(
    ctx: typer.Context, store: StoreOption = None, output: OutputOption = Output.table
) -> None:
    """Every user: role, teams, live tokens.

    Examples:
      meshctl admin users list
      meshctl admin users list -o json
    """
    from meshctl.cli import render
    from meshctl.state import TokenRecord, UserRecord

    with open_store_for(app_context(ctx), store) as opened:
        found = opened.list(UserRecord)
        live = {
            u.name: sum(1 for t in opened.list(TokenRecord, username=u.name) if not t.revoked_at_s)
            for u in found
        }
    rows = [
        {"name": u.name, "role": u.role.value, "teams": list(u.teams), "tokens": live[u.name]}
        for u in found
    ]
    columns = [Column("name", "User"), Column("role", "Role"), Column("teams", "Teams"),
               Column("tokens", "Live tokens", "right")]  # fmt: skip
    render.emit(rows, columns, output)


@users.command("token")
def users_token(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="The user's name.")],
    store: StoreOption = None,
) -> None:
    """Issue another token for a user; print it (shown this once).

    Examples:
      meshctl admin users token ana
    """
    from meshctl.cli import render
    from meshctl.server.identity import issue_token

    with open_store_for(app_context(ctx), store) as opened:
        render.plain(issue_token(opened, name, time.time()))


@users.command("revoke")
def users_revoke(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="The user's name.")],
    store: StoreOption = None,
) -> None:
    """Revoke every token of a user: their requests get 401 from now on.

    Examples:
      meshctl admin users revoke ana
    """
    from meshctl.cli import render
    from meshctl.server.identity import revoke_tokens

    with open_store_for(app_context(ctx), store) as opened:
        count = revoke_tokens(opened, name, time.time())
    render.plain(f"{name}: {count} token{'s' if count != 1 else ''} revoked")


@admin.command("audit")
def audit(
    ctx: typer.Context,
    after: Annotated[int, typer.Option(help="Entries after this sequence number.", min=0)] = 0,
    limit: Annotated[int, typer.Option(help="At most this many entries.", min=1)] = 1000,
    store: StoreOption = None,
    output: OutputOption = Output.table,
) -> None:
    """Administrative actions, allowed and refused, oldest first.

    Run on the server's host, against its store.

    Examples:
      meshctl admin audit
      meshctl admin audit --after 120 --limit 50 -o json
    """
    from dataclasses import asdict

    from meshctl.cli import render
    from meshctl.jsondata import timestamp

    with open_store_for(app_context(ctx), store) as opened:
        entries = opened.audit(after_seq=after, limit=limit)
    rows = [{**asdict(e), "at": timestamp(e.at_s), "detail": dict(e.detail)} for e in entries]
    columns = [Column("seq", "Seq", "right"), Column("at", "At"), Column("actor", "Actor"),
               Column("role", "Role"), Column("action", "Action"), Column("target", "Target"),
               Column("outcome", "Outcome"), Column("detail", "Detail")]  # fmt: skip
    render.emit(rows, columns, output)
