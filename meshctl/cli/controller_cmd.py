"""``meshctl controller run``: the reconcile loop in the foreground (``meshctl up`` runs it in
the background)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Annotated

import typer

from meshctl.cli.context import app_context

app = typer.Typer(help="The controller: the reconcile loop that runs jobs.", no_args_is_help=True)


@app.command("run")
def run(
    ctx: typer.Context,
    once: Annotated[bool, typer.Option("--once", help="Run one cycle and exit.")] = False,
    interval: Annotated[float, typer.Option(help="Seconds between cycles.", min=0.05)] = 1.0,
    policies: Annotated[
        Path | None, typer.Option("--policies", "-p", help="The policy folder to enforce.")
    ] = None,
) -> None:
    """Observe the pools, schedule, dispatch, record; every ``--interval`` seconds."""
    import logging
    import signal
    import threading

    from meshctl.cli import render
    from meshctl.controller import daemon, runtime
    from meshctl.controller.burst import Burst
    from meshctl.controller.logs import LogCopier
    from meshctl.controller.loop import Controller, PoolClient
    from meshctl.controller.runtime import clients, make_run_dir, run_dir
    from meshctl.pools.emulated import EmulatedInstances
    from meshctl.pools.health import unhealthy

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    context = app_context(ctx)
    rules = context.rules(policies)
    make_run_dir(context.home)
    with context.store() as store:
        driven: dict[str, PoolClient] = {**clients(rules.mesh, context.home)}
        controller = Controller(
            store,
            rules,
            driven,
            heartbeat=daemon.heartbeat_file(context.home),
            resolve=lambda: {**clients(rules.mesh, context.home)},
            burst=Burst(
                store,
                rules.mesh,
                rules.catalogs,
                runtime.clouds(rules.mesh),
                EmulatedInstances(run_dir(context.home), dict(rules.catalogs)),
                background=not once,
            ),
            health=lambda: unhealthy(context.home),
            logs=LogCopier(context.home),
            hold=lambda: daemon.held(context.home),
        )
        if once:
            report = controller.cycle()
            render.plain(
                f"cycle: {report.jobs} jobs, {report.dispatched} dispatched, "
                f"{report.transitions} transitions, {report.duration_s * 1000:.0f} ms"
            )
            render.warnings(report.errors)  # the cycle ran; what failed in it is retried
            return
        stop, wake = threading.Event(), threading.Event()

        def stopping(*_: object) -> None:
            stop.set()
            wake.set()

        signal.signal(signal.SIGTERM, stopping)
        signal.signal(signal.SIGUSR1, lambda *_: wake.set())  # meshctl submit's nudge
        logging.getLogger("meshctl.controller").info(
            "controller up: pools %s", ", ".join(controller.clients) or "(none driven)"
        )
        try:
            with contextlib.suppress(KeyboardInterrupt):
                controller.run(interval, stop, wake)
        finally:
            if controller.burst is not None:
                controller.burst.close()
