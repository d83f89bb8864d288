"""``meshctl controller run``: the reconcile loop in the foreground (``meshctl up`` runs it in
the background)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from meshctl.app.policies import reload_rules
from meshctl.cli.context import app_context
from meshctl.cli.options import OutputOption
from meshctl.cli.render import Output
from meshctl.errors import InvalidRequestError

if TYPE_CHECKING:
    pass

app = typer.Typer(help="The controller: the reconcile loop that runs jobs.", no_args_is_help=True)


@app.command("run")
def run(
    ctx: typer.Context,
    once: Annotated[bool, typer.Option("--once", help="Run one cycle and exit.")] = False,
    interval: Annotated[float, typer.Option(help="Seconds between cycles.", min=0.05)] = 1.0,
    policies: Annotated[
        Path | None, typer.Option("--policies", "-p", help="The policy folder to enforce.")
    ] = None,
    lease_ttl: Annotated[
        float,
        typer.Option(
            "--lease-ttl",
            help="Seconds the lead lasts unless renewed: a standby takes over after this.",
            min=1.0,
        ),
    ] = 10.0,
    metrics_address: Annotated[
        str | None,
        typer.Option(
            "--metrics-address",
            metavar="HOST:PORT",
            help="Serve the controller's Prometheus metrics at /metrics there (default: off).",
        ),
    ] = None,
) -> None:
    """Run the reconcile loop here, in the foreground (up runs it behind).

    Observes the pools, schedules, dispatches and records, every --interval
    seconds. Changes to the mesh, policies or catalogs are taken (or refused,
    keeping the old set) as they are noticed, and on meshctl reload. With a
    shared store, one controller leads and a standby takes over when the lead
    lapses (--lease-ttl).

    Examples:
      meshctl controller run --once
      meshctl controller run --interval 5 --metrics-address 127.0.0.1:9110
    """
    from meshctl.app import controller
    from meshctl.cli import render

    context = app_context(ctx)
    settings = controller.Settings(policies, interval, lease_ttl, metrics_address)
    if once:
        report = controller.once(context, settings)
        render.plain(
            f"cycle: {report.jobs} jobs, {report.dispatched} dispatched, "
            f"{report.transitions} transitions, {report.duration_s * 1000:.0f} ms"
        )
        render.warnings(report.errors)  # the cycle ran; what failed in it is retried
        return
    controller.run(context, settings)


RELOAD_TIMEOUT_S = 60.0


def reload(
    ctx: typer.Context,
    policies: Annotated[
        Path | None,
        typer.Option("--policies", "-p", help="Switch to this policy folder (default: the same)."),
    ] = None,
    timeout: Annotated[
        float, typer.Option(help="Seconds to wait for the controller to confirm.", min=1)
    ] = RELOAD_TIMEOUT_S,
    output: OutputOption = Output.table,
) -> None:
    """Have the controller take changed mesh, policy and catalog files.

    Re-reads the mesh, policies and catalogs the controller runs with
    (--policies switches the folder), checks them all as validate does, then
    has the controller take them at its next cycle. Prints each part it took
    with its old and new hash (mesh OLD -> NEW; policies OLD -> NEW), or, with
    nothing new, the hash of each part that runs and how long ago a change to
    it was taken (the controller may have noticed the edit first: it also takes
    or refuses changed files on its own).

    An invalid change is refused and the old set keeps running; meanwhile
    submit, explain and status say the refused file's problems as warnings and
    plan with the set the controller runs (with none running, they fail on
    them, exit 2). A new local pool still needs up.

    Exit codes:
      0  taken, or nothing new
      1  no controller runs, or it did not confirm within --timeout
      2  an invalid change: refused, the old set keeps running

    Examples:
      meshctl reload
      meshctl reload --policies policies-next/
    """
    from meshctl.cli import render

    context = app_context(ctx)
    remote = context.remote()
    if remote is not None:
        if policies is not None:
            raise InvalidRequestError("--policies: the server reloads the folder it runs with")
        data = remote.call("POST", "/v1/policies/reload", {"timeout_s": timeout})
    else:
        data = reload_rules(context, policies, timeout)
    if data["outcome"] == "refused":  # changed again after it was checked here
        render.problems([str(data["message"])])
        raise typer.Exit(2)
    _show(data, output)


def _show(said: dict[str, Any], output: Output) -> None:
    from meshctl.cli import render

    data = {k: v for k, v in said.items() if k != "message"}
    if output is not Output.table:
        render.emit_data(data, output)
        return
    render.plain(str(said["message"]))
    render.warnings(data["notes"])
