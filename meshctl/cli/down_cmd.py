"""``meshctl down``: stop what ``up`` started, and say what happens to the jobs that run.

It stops exactly the processes ``up`` started (the controller, the embedded clusters, from the
run files under ``$MESHCTL_HOME/run``, also after a crash) and terminates the cloud instances
the controller launched. Jobs running there would stop with them, so ``down`` refuses while
there are any (exit 1, nothing stopped) unless told what to do:

- ``--drain``: the controller starts nothing new (``daemon.hold``) and ``down`` waits, with a
  progress line, until the running jobs end, up to ``--deadline``; then it stops. Past the
  deadline it fails and lifts the hold, leaving the mesh as it was; with ``--force`` too, it
  stops what still runs.
- ``--force``: the jobs are stopped with their pools; each is recorded requeued ("stopped by
  meshctl down --force"), so the next ``up`` runs it again (``controller/shutdown.py``).

Before the clusters go, the running jobs' logs are copied to their end
(``controller/logs.py``), so ``meshctl jobs logs`` shows them after ``down``. Jobs on ``ray``
pools (clusters meshctl did not start) keep running there and are not counted.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from meshctl.app.context import UP_FILE, AppContext
from meshctl.cli.context import app_context
from meshctl.errors import EXIT_FAILURE, CommandError, InvalidRequestError
from meshctl.units import count_of

if TYPE_CHECKING:
    from meshctl.model import Mesh
    from meshctl.pools.local import LocalCluster
    from meshctl.state import AttemptRecord, JobRecord, Store

DRAIN_POLL_S = 1.0
DRAIN_DEFAULT = "10m"


def down(
    ctx: typer.Context,
    force: Annotated[
        bool,
        typer.Option(
            "--force", help="Stop running jobs too: each is requeued, to run at the next up."
        ),
    ] = False,
    drain: Annotated[
        bool,
        typer.Option(
            "--drain", help="Start nothing new; wait for the running jobs to end, then stop."
        ),
    ] = False,
    deadline: Annotated[
        str | None,
        typer.Option(help="How long --drain waits (default 10m); then it fails, or --force."),
    ] = None,
) -> None:
    """Stop the controller and the local pools: what up started, no more.

    Stops exactly the processes up started (by the run files under
    $MESHCTL_HOME/run, also after a crash) and the cloud instances the mesh
    launched. With jobs running there it refuses and stops nothing. --drain
    starts nothing new and waits for them to end (a progress line); past
    --deadline it fails and the mesh goes on, or with --force stops the rest.
    --force stops them and records each requeued ("stopped by meshctl down
    --force"), so the next up runs it again. Their logs are kept.

    Exit codes:
      0  stopped
      1  jobs are running (nothing was stopped), or --drain ran out of time

    Examples:
      meshctl down
      meshctl down --drain --deadline 10m
      meshctl down --force
    """
    from meshctl.state import STATE_DB

    wait_s = _deadline(deadline, drain)
    context = app_context(ctx)
    remote = context.remote()
    if remote is not None:  # the server's host brings its mesh down
        from meshctl.cli import render

        body = {"force": force, "drain": drain, "deadline": deadline}
        render.relayed(remote.call("POST", "/v1/mesh/down", body, timeout_s=wait_s + 120))
        return
    with contextlib.ExitStack() as opened:  # the store, once for the whole command (if any)
        store = (
            opened.enter_context(context.store())
            if context.store_url or (context.home / STATE_DB).is_file()
            else None
        )
        _down(context, store, force, drain, wait_s, deadline or DRAIN_DEFAULT)


def _down(
    context: AppContext, store: Store | None, force: bool, drain: bool, wait_s: float, said: str
) -> None:
    from meshctl.cli import render
    from meshctl.controller import daemon

    pools, alive = _stopping_pools(context, store)
    running = [(j, a) for j, a in _running(store, pools) if a.pool in alive]
    if running and not (force or drain):
        where = ", ".join(sorted({a.pool for _, a in running}))
        render.problems(
            [
                f"{_jobs(running)} running on {where}; nothing was stopped. meshctl down "
                "--drain waits for them to end; --force stops them (they run again at the next "
                "meshctl up)"
            ]
        )
        raise typer.Exit(EXIT_FAILURE)
    if running and drain:
        _drain(context, store, alive, wait_s, said, force)
    try:
        stopped = daemon.stop(context.home)
        if stopped:
            render.say(f"controller: stopped ({count_of(len(stopped), 'process', 'processes')})")
        _stop_pools(context, store, pools, force)
    finally:
        daemon.lift_hold(context.home)
    if not stopped and not pools:
        render.say("nothing was up")


def _deadline(deadline: str | None, drain: bool) -> float:
    from meshctl.units import parse_duration_s

    if deadline is not None and not drain:
        raise InvalidRequestError(
            f"--deadline: goes with --drain (how long it waits), got {deadline!r} alone"
        )
    try:
        return parse_duration_s(deadline or DRAIN_DEFAULT)
    except ValueError as err:
        raise InvalidRequestError(f"--deadline: {err}") from None


def _stop_pools(context: AppContext, store: Store | None, pools: set[str], force: bool) -> None:
    """Copy the running jobs' logs, stop the clusters and instances, record what stopped.
    The controller has stopped: what runs where is read once more, and then holds."""
    from meshctl.cli import render
    from meshctl.controller.rundir import run_dir
    from meshctl.controller.shutdown import FORCED, active_on, ended
    from meshctl.pools import local

    run = run_dir(context.home)
    mesh = context.mesh() if store is not None else None
    attempts = active_on(store, pools) if store is not None and pools else []
    _keep_logs(context, mesh, attempts)
    unterminated = _terminate_instances(store, mesh)
    left: list[int] = []
    # Read again, not kept from the start: the controller, stopping, may have finished a
    # launch that started a cluster or added a node to one, and a drain may have seen nodes go.
    for path, cluster in _clusters(run):
        with render.progress(f"pool {cluster.pool}: stopping"):
            pids = local.stop(cluster)
        left += local.leftover(cluster)
        render.say(f"pool {cluster.pool}: stopped ({count_of(len(pids), 'process', 'processes')})")
        path.unlink(missing_ok=True)
        Path(cluster.token_file).unlink(missing_ok=True)
    (run / UP_FILE).unlink(missing_ok=True)
    reason = FORCED if force else "stopped by meshctl down"
    requeued = ended(store, attempts, reason, time.time()) if store is not None else []
    if requeued:
        render.say(f"requeued (they run again at the next meshctl up): {', '.join(requeued)}")
    if left:
        raise CommandError(f"processes still alive after stopping: {left}")
    if unterminated:  # the clusters are stopped; what the clouds refused is a failure
        raise CommandError("; ".join([*unterminated, "run meshctl gc once the cause is fixed"]))


def _clusters(run: Path) -> list[tuple[Path, LocalCluster]]:
    """The clusters ``up`` or the controller started, by their run files."""
    from meshctl.pools import local

    return [(path, local.LocalCluster.load(path)) for path in sorted(run.glob("pool-*.json"))]


def _terminate_instances(store: Store | None, mesh: Mesh | None) -> list[str]:
    """Cloud instances the controller launched and has not terminated: never leave money
    running behind a stopped mesh. Returns what could not be terminated."""
    from dataclasses import replace

    from meshctl.cli import render
    from meshctl.controller.runtime import adapter_for
    from meshctl.state import INSTANCE_LIVE, InstanceRecord, InstanceState

    if store is None or mesh is None:
        return []
    going = INSTANCE_LIVE | {InstanceState.TERMINATING}  # asked to go, not yet confirmed
    live = [i for i in store.list(InstanceRecord) if i.state in going]
    problems = []
    for pool in mesh.spec.pools:
        mine = [i for i in live if i.pool == pool.name]
        try:
            cloud = adapter_for(pool) if mine else None  # whatever mesh.yaml lacks now
        except Exception as err:  # no SDK or credentials: say so, stop the rest anyway
            problems.append(
                f"pool {pool.name}: cannot terminate {count_of(len(mine), 'instance')}: {err}"
            )
            continue
        if cloud is None:
            continue
        errors = cloud.terminate([i.id for i in mine], f"down-{int(time.time())}")
        if errors:  # gc finds what is left
            problems.append(f"pool {pool.name}: terminate failed: {errors[0].message}")
            continue
        for record in mine:
            changed = replace(record, state=InstanceState.TERMINATED, updated_at_s=time.time())
            store.update(changed, expected_version=record.version)
        render.say(f"pool {pool.name}: terminated {count_of(len(mine), 'instance')}")
    return problems


def _stopping_pools(context: AppContext, store: Store | None) -> tuple[set[str], set[str]]:
    """The pools ``down`` takes away (those with a cluster ``up`` or the controller started,
    by their run files, and cloud pools with live instances), and those of them still alive:
    a cluster whose processes are gone (a crash) runs no job, whatever the store says."""
    from meshctl.controller.rundir import run_dir
    from meshctl.pools import local
    from meshctl.state import INSTANCE_LIVE, InstanceRecord

    clusters = [cluster for _, cluster in _clusters(run_dir(context.home))]
    alive = {c.pool for c in clusters if local.running(c)}
    if store is not None:
        alive |= {i.pool for i in store.list(InstanceRecord) if i.state in INSTANCE_LIVE}
    return {c.pool for c in clusters} | alive, alive


def _running(store: Store | None, pools: set[str]) -> list[tuple[JobRecord, AttemptRecord]]:
    from meshctl.controller.shutdown import running_on

    if not pools or store is None:
        return []
    return running_on(store, pools)


def _jobs(running: list[tuple[JobRecord, AttemptRecord]]) -> str:
    ids = [job.id for job, _ in running]
    shown = ", ".join(ids[:5]) + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")
    return f"{len(ids)} job{'s' if len(ids) != 1 else ''} ({shown})"


def _drain(
    context: AppContext,
    store: Store | None,
    pools: set[str],
    wait_s: float,
    said: str,
    force: bool,
) -> None:
    """Hold new work and wait until nothing runs on ``pools``, or the deadline."""
    from meshctl.cli import render
    from meshctl.controller import daemon

    if daemon.running(context.home) is None:
        raise CommandError(
            "--drain: the controller is not running, so nothing would see the jobs end; "
            "meshctl up starts it again, or --force stops them"
        )
    why = "not started: the mesh is draining (meshctl down --drain)"
    daemon.hold(context.home, why, time.time())
    daemon.nudge(context.home)
    until = time.monotonic() + wait_s
    gives_up = time.strftime("%H:%M:%S", time.localtime(time.time() + wait_s))
    try:
        with render.progress(f"draining: nothing new starts; waiting up to {said}") as step:
            while running := _running(store, pools):
                if time.monotonic() >= until:
                    break
                step(f"{_jobs(running)} still running; gives up at {gives_up}")
                time.sleep(DRAIN_POLL_S)
    except BaseException:  # Ctrl-C: the mesh stays up and takes new work again
        daemon.lift_hold(context.home)
        raise
    if running and not force:
        daemon.lift_hold(context.home)
        raise CommandError(
            f"--drain: {_jobs(running)} still running after {said}; nothing was stopped and "
            "new work starts again (add --force to stop them at the deadline)"
        )
    if not running:
        render.say("drained: no job is running")


def _keep_logs(context: AppContext, mesh: Mesh | None, attempts: list[AttemptRecord]) -> None:
    """Copy the logs of what runs on the pools ``down`` stops to their end before the
    clusters go."""
    from meshctl.controller.logs import LogCopier
    from meshctl.controller.runtime import clients

    if attempts and mesh is not None:
        LogCopier(context.home).flush(attempts, clients(mesh, context.home))
