"""``meshctl controller run``: the reconcile loop in the foreground (``meshctl up`` runs it in
the background)."""

from __future__ import annotations

import contextlib
import faulthandler
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from meshctl.app.policies import reload_rules
from meshctl.cli.context import app_context
from meshctl.cli.options import OutputOption
from meshctl.cli.render import Output
from meshctl.errors import CommandError, InvalidRequestError

if TYPE_CHECKING:
    from meshctl.controller.leadership import Leadership
    from meshctl.controller.loop import Controller
    from meshctl.controller.metrics import Address
    from meshctl.controller.reload import RuleFiles
    from meshctl.state import Store

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
    """Observe the pools, schedule, dispatch, record; every ``--interval`` seconds. Changes to
    the mesh, policies or catalogs are taken (or refused) as they are noticed, and on
    ``meshctl reload``."""
    import logging
    import signal
    import threading

    from meshctl.cli import render
    from meshctl.controller.leadership import Deposed, Leadership

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    where = _metrics_address(metrics_address) if metrics_address is not None else None
    context = app_context(ctx)
    with context.store(local=True) as store:
        leadership = Leadership(store, lease_ttl)
        if once:
            _lead_once(leadership)
        controller = _controller(context.home, context.rule_files(policies), store, once)
        if once:
            try:
                report = controller.cycle()
            finally:
                leadership.release()
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

        if where is not None:
            _serve_metrics(controller, where, leadership)
        signal.signal(signal.SIGTERM, stopping)
        signal.signal(signal.SIGUSR1, lambda *_: wake.set())  # meshctl submit's nudge
        logging.getLogger("meshctl.controller").info(
            "controller up: pools %s", ", ".join(controller.clients) or "(none driven)"
        )
        server = _command_server(context.home)
        faulthandler.enable(all_threads=True)  # a crash in native code says where, in the log
        try:
            with contextlib.suppress(KeyboardInterrupt):
                controller.run(interval, stop, wake, leadership=leadership, stalls=sys.stderr)
        except Deposed as err:
            raise CommandError(str(err)) from None
        finally:
            leadership.release()
            server.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                server.wait(timeout=5)
            if controller.burst is not None:
                controller.burst.close()
            if controller.agents is not None:
                controller.agents.close()
            # a log without this line and without stacks ends in a process killed outright
            logging.getLogger("meshctl.controller").info("controller stopped")


def _lead_once(leadership: Leadership) -> None:
    """``--once`` cycles only as the leader: another controller leading is an error."""
    from meshctl.state.lease import current

    if not leadership.lead():
        held = current(leadership.store)
        who = held.holder if held is not None else "another controller"
        raise CommandError(f"{who} leads this mesh; --once cycles only when none does")


def _metrics_address(address: str) -> Address:
    """``--metrics-address`` checked before anything starts; prometheus_client is imported
    only here, when metrics are asked for."""
    from meshctl.errors import CommandError, InvalidInput

    try:
        from meshctl.controller.metrics import Address
    except ModuleNotFoundError as err:  # prometheus_client: the metrics extra
        needs = f"--metrics-address needs {err.name}: pip install 'meshctl[metrics]'"
        raise CommandError(needs) from None
    try:
        return Address.parse(address)
    except ValueError as err:
        raise InvalidInput(f"--metrics-address: {err}") from None


def _serve_metrics(controller: Controller, where: Address, leadership: Leadership) -> None:
    """The controller's metrics (``controller/metrics.py``), observed each cycle and served
    from a thread."""
    import logging

    from meshctl.controller.metrics import ControllerMetrics, Reading
    from meshctl.errors import CommandError

    metrics = ControllerMetrics(Reading(controller))
    try:
        port = metrics.serve(where)
    except OSError as err:
        raise CommandError(f"cannot serve metrics at {where.host}:{where.port}: {err}") from None
    controller.on_cycle = lambda r: metrics.observe(r.at_s, r.duration_s, r.errors)
    metrics.leading.set_function(lambda: 1.0 if leadership.leading else 0.0)
    logging.getLogger("meshctl.controller").info(
        "metrics at http://%s:%d/metrics", where.host, port
    )


def _command_server(home: Path) -> subprocess.Popen[bytes]:
    """The home's command server (``cli/cmdserver.py``) beside the loop: ``meshctl submit``
    runs there, warm, while this controller runs. It logs where the controller does, and
    stops when the controller does."""
    return subprocess.Popen(
        [sys.executable, "-m", "meshctl.cli.cmdserver", str(home), str(os.getpid())],
        stdin=subprocess.DEVNULL,
    )


def _controller(home: Path, files: RuleFiles, store: Store, once: bool) -> Controller:
    """The controller over the files given, with its cloud side, health signals and reloader
    (``once``: launches and credential checks in the cycle, not on worker threads)."""
    from meshctl.agent.watch import AgentWatch
    from meshctl.app.context import rules_from
    from meshctl.controller import daemon
    from meshctl.controller.access import CloudAccess
    from meshctl.controller.burst import Burst
    from meshctl.controller.data import DataSync
    from meshctl.controller.logs import LogCopier
    from meshctl.controller.loop import Controller
    from meshctl.controller.packages import Packages
    from meshctl.controller.reload import Reloader
    from meshctl.controller.rundir import make_run_dir, run_dir
    from meshctl.controller.runtime import clients, cloud_for, credentials_seen, driven
    from meshctl.controller.serving_apply import ServeDeployer
    from meshctl.pools.emulated import EmulatedInstances
    from meshctl.pools.health import forget_overruled, overruled, unhealthy

    rules = rules_from(home, files)
    make_run_dir(home)
    packages = Packages(store, home)  # jobs taken in on another host: their files from the store
    access = CloudAccess(rules.mesh, {}, cloud_for, credentials_seen, background=not once)
    burst = Burst(
        store,
        rules.mesh,
        rules.catalogs,
        access.clouds,
        EmulatedInstances(run_dir(home)),
        background=not once,
        access=access,
        registry=rules.registry,
    )
    controller: Controller = Controller(
        store,
        rules,
        {**clients(rules.mesh, home)},
        heartbeat=daemon.heartbeat_file(home),
        resolve=lambda: driven(controller.rules.mesh, home),  # a reload may add pools
        burst=burst,
        health=lambda: unhealthy(home),
        reloader=Reloader(
            files, home, lambda f: rules_from(home, f), lambda f: _record_up(home, f)
        ),
        logs=LogCopier(home),
        hold=lambda: daemon.held(home),
        agents=AgentWatch(
            lambda pool: _agent_settings(controller.rules.mesh, pool),
            lambda pool: getattr(controller.clients.get(pool), "token", None),
        ),
        overruled=lambda: overruled(home),
        forget_overruled=lambda key: forget_overruled(home, key),
        serve=ServeDeployer(home, packages),
        data=DataSync(lambda pool: getattr(controller.clients.get(pool), "token", None)),
        packages=packages,
    )
    return controller


def _agent_settings(mesh: Any, pool: str) -> Any:
    """The pool's node-agent settings (on-prem pools), or None."""
    found = mesh.pool(pool)
    return getattr(found, "agents", None)


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
    """Re-read the mesh, policies and catalogs the controller runs with, check them all, and
    have the controller take them at its next cycle (an invalid change is refused, exit 2)."""
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


def _record_up(home: Path, files: RuleFiles) -> None:
    """A reload switched files: ``up.json`` says what runs now (when ``up`` started it)."""
    import json
    from dataclasses import asdict

    from meshctl.app.context import UP_FILE
    from meshctl.controller.rundir import run_dir
    from meshctl.state.private import write_private

    path = run_dir(home) / UP_FILE
    if not path.is_file():
        return  # a controller run in the foreground, not by up: nothing recorded to update
    record = {**json.loads(path.read_text()), **asdict(files)}
    record["providers"] = record["providers"] or ""
    write_private(path, json.dumps(record, indent=2))
