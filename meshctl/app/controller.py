"""Running the controller (``meshctl controller run``; ``meshctl up`` starts it in the
background): its loop wired from the home's files (the mesh, policies and catalogs, checked as
``validate`` checks them), with its cloud side, health signals, reloader, log copier, node
agents' watch, Serve deployer and data sync; the lead over the store's lease; the home's local
API beside it (``meshctl submit`` sends its requests there); metrics when asked. It runs until
SIGTERM (or Ctrl-C), or one cycle."""

from __future__ import annotations

import contextlib
import faulthandler
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from meshctl.errors import CommandError

if TYPE_CHECKING:
    from meshctl.app.context import AppContext
    from meshctl.controller.leadership import Leadership
    from meshctl.controller.loop import Controller, CycleReport
    from meshctl.controller.metrics import Address
    from meshctl.controller.reload import RuleFiles
    from meshctl.state import Store


@dataclass(frozen=True, slots=True)
class Settings:
    """How the controller runs: the policy folder to enforce (None: the home's), seconds
    between cycles, seconds the lead lasts unless renewed, where to serve metrics (None: off)."""

    policies: Path | None = None
    interval_s: float = 1.0
    lease_ttl_s: float = 10.0
    metrics_address: str | None = None


def once(context: AppContext, settings: Settings) -> CycleReport:
    """One cycle, as the leader (another controller leading is an error)."""
    from meshctl.controller.leadership import Leadership

    with context.store(local=True) as store:
        leadership = Leadership(store, settings.lease_ttl_s)
        _lead_once(leadership)
        controller = _controller(context.home, context.rule_files(settings.policies), store, True)
        try:
            return controller.cycle()
        finally:
            leadership.release()


def run(context: AppContext, settings: Settings) -> None:
    """Cycle every ``interval_s`` while leading, until SIGTERM or Ctrl-C."""
    import logging
    import signal
    import threading

    from meshctl.controller.leadership import Deposed, Leadership

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    address = settings.metrics_address
    where = _metrics_address(address) if address is not None else None
    with context.store(local=True) as store:
        leadership = Leadership(store, settings.lease_ttl_s)
        files = context.rule_files(settings.policies)
        controller = _controller(context.home, files, store, False)
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
        server = _local_api(context)
        faulthandler.enable(all_threads=True)  # a crash in native code says where, in the log
        try:
            with contextlib.suppress(KeyboardInterrupt):
                controller.run(
                    settings.interval_s, stop, wake, leadership=leadership, stalls=sys.stderr
                )
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
    from meshctl.errors import InvalidInput

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


def _local_api(context: AppContext) -> subprocess.Popen[bytes]:
    """The home's local API (``server/local.py``) beside the loop, with this controller's
    files: ``meshctl submit`` sends its request there while this controller runs. It logs
    where the controller does, and stops when the controller does."""
    named = {"--mesh": context.mesh_path, "--providers": context.providers_dir,
             "--store": context.store_url}  # fmt: skip
    options = [word for flag, value in named.items() if value is not None
               for word in (flag, str(value))]  # fmt: skip
    return subprocess.Popen(
        [sys.executable, "-m", "meshctl.server.local", str(context.home), str(os.getpid()),
         *options],
        stdin=subprocess.DEVNULL,
    )  # fmt: skip


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
