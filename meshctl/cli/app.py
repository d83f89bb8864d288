"""The root command: global options, the command groups, and the entry point.

Each command group lives in its own module and imports its heavy dependencies inside the
command, so that ``meshctl --help`` loads typer and nothing else of weight.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Annotated

import typer

from meshctl.app.context import AppContext
from meshctl.cli import (
    agent_cmd,
    controller_cmd,
    deferred,
    down_cmd,
    explain_cmd,
    gc_cmd,
    init_cmd,
    jobs_cmd,
    leave,
    login_cmd,
    mesh_cmd,
    nodes_cmd,
    policy_cmd,
    pools_cmd,
    providers_cmd,
    queues_cmd,
    schema_cmd,
    server_cmd,
    submit_cmd,
    train_cmd,
    validate_cmd,
)
from meshctl.cli.argv import command_name
from meshctl.cli.errors import MeshGroup
from meshctl.cli.sim import commands as sim_cmd
from meshctl.host.home import default_home

deferred.defer(*deferred.UNUSED)  # before any command imports the packages that import them

app = typer.Typer(
    cls=MeshGroup,
    name="meshctl",
    help="Control plane for GPU compute meshes: Ray workloads on-prem and in clouds."
    "\n\nA command's detail, exit codes and examples: meshctl COMMAND --help;\n"
    "every command's: docs/CLI.md.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,  # never print local variables (credentials) on a crash
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.command("init")(init_cmd.init)
app.command("up")(mesh_cmd.up)
app.command("down")(down_cmd.down)
app.command("status")(mesh_cmd.status)
app.command("queues")(queues_cmd.queues)
app.command("reload")(controller_cmd.reload)
app.command("submit")(submit_cmd.submit)
app.command("train")(train_cmd.train)
app.command("gc")(gc_cmd.gc)
app.command("validate")(validate_cmd.validate)
app.command("schema")(schema_cmd.schema)
app.command("explain")(explain_cmd.explain)
app.command("server")(server_cmd.server)
app.command("login")(login_cmd.login)
app.command("logout")(login_cmd.logout)
app.add_typer(jobs_cmd.app, name="jobs")
app.add_typer(nodes_cmd.app, name="nodes")
app.add_typer(controller_cmd.app, name="controller")
app.add_typer(policy_cmd.app, name="policy")
app.add_typer(pools_cmd.app, name="pools")
app.add_typer(providers_cmd.app, name="providers")
app.add_typer(sim_cmd.app, name="sim")
app.add_typer(agent_cmd.app, name="agent")
app.add_typer(server_cmd.admin, name="admin")


@app.callback()
def root(
    ctx: typer.Context,
    home: Annotated[
        Path | None,
        typer.Option(
            help="State directory (default: $MESHCTL_HOME, else ~/.meshctl).", show_default=False
        ),
    ] = None,
    mesh: Annotated[
        Path | None,
        typer.Option(
            "--mesh",
            "-m",
            envvar="MESHCTL_MESH",
            help="The mesh file (default: ./mesh.yaml, else the embedded local mesh).",
        ),
    ] = None,
    providers: Annotated[
        Path | None,
        typer.Option(
            "--providers",
            envvar="MESHCTL_PROVIDERS",
            help="Directory of provider catalogs (default: the ones shipped with meshctl).",
        ),
    ] = None,
    store: Annotated[
        str | None,
        typer.Option(
            "--store",
            envvar="MESHCTL_STORE",
            help="The state store: postgresql://... (shared by controllers and the API "
            "server), or a SQLite file (default: the home's state.db).",
            show_default=False,
        ),
    ] = None,
) -> None:
    ctx.obj = AppContext(
        home=home or default_home(),
        mesh_path=mesh,
        providers_dir=providers,
        store_url=store,
        warn=_warn,
        busy=_busy,
    )


def _warn(lines: Sequence[str]) -> None:
    from meshctl.cli import render

    render.warnings(lines)


def _busy(message: str) -> AbstractContextManager[object]:
    from meshctl.cli import render

    return render.progress(message)


def main() -> None:
    args = sys.argv[1:]
    try:
        for_command(args)()
    except SystemExit as done:
        if command_name(args) in leave.AT_ONCE:
            leave.leave(done.code)  # without the interpreter's teardown
        raise


def for_command(args: Sequence[str]) -> typer.Typer:
    """The app with only the command or group that ``args`` run, when they name one that
    exists: typer builds every command's parameters before it runs one (about 50 ms for all
    of meshctl's), and a command line runs one. Anything else (no command, help or another
    option of the root before it, a name that is not a command) gets the whole app, so that
    typer lists or suggests the commands as ever."""
    name = command_name(args)
    return app if name is None else _only(name)


def _only(name: str) -> typer.Typer:
    commands = [c for c in app.registered_commands if c.name == name]
    groups = [g for g in app.registered_groups if g.name == name]
    if not commands and not groups:
        return app
    lean = copy.copy(app)
    lean.registered_commands, lean.registered_groups = commands, groups
    return lean
