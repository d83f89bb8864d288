"""``meshctl up | down | status``: bring the mesh up on this machine, stop it, watch it.

``up`` starts each ``local`` pool's Ray cluster (the embedded default: a head and emulated GPU
nodes) and the controller daemon; ``ray`` pools are existing clusters, only checked. ``down``
(``down_cmd.py``) stops exactly what ``up`` started. ``status`` is the one-screen view: pools,
GPUs in use, the queue by class, events (counted by ``meshctl.controller.status``, rendered
here).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from meshctl.app.context import UP_FILE, AppContext
from meshctl.app.pools import PoolHealth
from meshctl.app.status import collect
from meshctl.cli.context import app_context
from meshctl.cli.options import OutputOption
from meshctl.cli.render import Output, clock_of
from meshctl.errors import EXIT_FAILURE, CommandError

if TYPE_CHECKING:
    from meshctl.controller.status import Status

HEARTBEAT_TIMEOUT_S = 90.0


def up(
    ctx: typer.Context,
    policies: Annotated[
        Path | None, typer.Option("--policies", "-p", help="The policy folder to enforce.")
    ] = None,
    interval: Annotated[float, typer.Option(help="Seconds between controller cycles.")] = 1.0,
) -> None:
    """Start the local pools and the controller; check every pool.

    Starts each local pool's Ray cluster (a head plus the nodes of mesh.yaml;
    GPUs declared with --num-gpus, rack and switch labels as Ray node labels)
    and the controller daemon; what is up already stays up, and a local pool
    already up has each dead node (its raylet gone) started again. A ray pool
    (an existing cluster) is checked, not started. Every pool is checked, and
    those that cannot be used are shown with why (warning: lines). With no
    mesh.yaml: the embedded default mesh.

    Exit codes:
      0  everything started
      1  a local pool or node could not start (the others and the
         controller still come up; the message says which and why)
      2  the mesh or the policies are invalid: nothing started

    Examples:
      meshctl up
      meshctl up --policies policies/ --interval 0.5
    """
    from meshctl.cli import render
    from meshctl.controller.rundir import make_run_dir
    from meshctl.state.private import write_private

    context = app_context(ctx)
    remote = context.remote()
    if remote is not None:  # the server's host brings its mesh up
        from meshctl.errors import InvalidRequestError

        if policies is not None:
            raise InvalidRequestError("--policies: the server enforces the folder it runs with")
        render.relayed(remote.call("POST", "/v1/mesh/up", {"interval": interval}, timeout_s=900))
        return
    mesh = context.mesh()
    policy_dir = (policies or context.policy_dir()).resolve()
    context.policy_set(policy_dir, mesh)  # invalid policies stop here, before anything starts
    run = make_run_dir(context.home)
    started = time.monotonic()
    failed = _start_pools(mesh, run, context.accelerators().spec)
    _show_health(context, mesh, failed)
    catalogs = context.catalog_dir()
    record = {
        "mesh": str(context.mesh_file().resolve()),
        "policies": _enforced_dir(context, str(policy_dir)),
        "providers": str(catalogs.resolve()) if catalogs else "",
    }
    write_private(run / UP_FILE, json.dumps(record, indent=2))
    _start_controller(context, record, interval)
    render.say(
        f"mesh {mesh.metadata.name} is up in {time.monotonic() - started:.1f} s; "
        "submit with [bold]meshctl submit[/], watch with [bold]meshctl status --watch[/]"
    )
    if failed:
        render.problems(f"pool {name}: could not start: {why}" for name, why in failed.items())
        raise typer.Exit(EXIT_FAILURE)


def _start_pools(mesh: Any, run: Path, registry: Any) -> dict[str, str]:
    """Start each local pool that is not up, each node declaring its devices in its vendor's
    Ray resource (the accelerator ``registry``'s); the ones that could not start, and why."""
    from meshctl.cli import render
    from meshctl.model.mesh import LocalPool
    from meshctl.pools import local

    failed: dict[str, str] = {}
    for pool in mesh.spec.pools:
        if not isinstance(pool, LocalPool):
            continue
        path = local.run_file(run, pool.name)
        if path.is_file():
            cluster = local.LocalCluster.load(path)
            if local.running(cluster):
                _restart_dead(pool, cluster, run, registry, failed)
                continue
            local.stop(cluster)  # what is left of a crashed one
        with render.progress(f"pool {pool.name}: starting") as step:
            try:
                cluster = local.start(pool, run, step, registry)
            except local.LocalPoolError as err:
                failed[pool.name] = str(err)
                continue
        nodes = sum(g.count for g in pool.nodes)
        render.say(f"pool {pool.name}: up, {nodes} nodes ({cluster.dashboard})")
    return failed


def _restart_dead(
    pool: Any, cluster: Any, run: Path, registry: Any, failed: dict[str, str]
) -> None:
    """A local pool already up: each node whose raylet is gone started again; one that could
    not be is added to ``failed`` with why."""
    from meshctl.cli import render
    from meshctl.pools.local_nodes import dead_nodes, restart

    dead = dead_nodes(cluster, pool)
    if not dead:
        render.say(f"pool {pool.name}: already up ({cluster.dashboard})")
        return
    with render.progress(f"pool {pool.name}: starting dead nodes {', '.join(dead)}"):
        refused = restart(cluster, pool, dead, run, registry)
    back = [name for name in dead if name not in refused]
    if back:
        render.say(f"pool {pool.name}: up; started again: {', '.join(back)}")
    if refused:
        failed[pool.name] = "; ".join(
            f"node {name} could not be started again: {why}" for name, why in refused.items()
        )


def _show_health(context: AppContext, mesh: Any, failed: dict[str, str]) -> None:
    """Every pool checked: an existing Ray cluster, whether it answers; a warning for each
    pool that cannot be used (a cloud pool without credentials ...), with why."""
    from meshctl.app.pools import pool_health
    from meshctl.cli import render
    from meshctl.model.mesh import RayPool

    for row in pool_health(context, mesh):
        pool = mesh.pool(row["pool"])
        if isinstance(pool, RayPool):  # checked, not started
            answers = "answers" if row["available"] else "does not answer"
            render.say(f"pool {pool.name}: existing Ray cluster at {pool.address}, {answers}")
        if not row["available"] and row["pool"] not in failed:
            render.warnings([f"pool {row['pool']}: unavailable: {row['reason']}"])


def _enforced_dir(context: AppContext, asked: str) -> str:
    """The policy folder to record: the one asked for, unless a controller already runs with
    another (``up`` does not restart it); then say how to switch, and keep its."""
    from meshctl.cli import render

    running = context.enforced()
    theirs = running.get("policies") if running else None
    if theirs is None or theirs == asked:
        return asked
    render.warnings(
        [
            f"the controller already runs with the policies in {theirs} "
            f"(hash {running.get('policy_hash') if running else None}), not {asked}; "
            f"to switch: meshctl reload --policies {asked}"
        ]
    )
    return str(theirs)


def _start_controller(context: AppContext, record: dict[str, str], interval: float) -> None:
    from meshctl.cli import render
    from meshctl.controller import daemon

    pid = daemon.running(context.home)
    if pid is not None:
        render.say(f"controller: already running (pid {pid})")
        return
    args = ["--home", str(context.home.resolve()), "--mesh", record["mesh"]]
    if context.store_url:
        args += ["--store", context.store_url]
    if record["providers"]:
        args += ["--providers", record["providers"]]
    args += ["controller", "run", "--policies", record["policies"], "--interval", str(interval)]
    pid = daemon.start(context.home, args)
    deadline = time.monotonic() + HEARTBEAT_TIMEOUT_S
    with render.progress("controller: starting"):
        while daemon.heartbeat(context.home) is None:
            if daemon.running(context.home) is None or time.monotonic() > deadline:
                raise CommandError(f"controller did not start; see {daemon.log_file(context.home)}")
            time.sleep(0.2)
    render.say(f"controller: running (pid {pid}, log {daemon.log_file(context.home)})")


def _served_status(context: AppContext, watch: bool) -> Any:
    """The status document as the API server says it, or as the home's local API says it
    while a controller runs there (it has the mesh read and the models imported: this command
    then costs a round trip, not those); None: collected in this process (no controller, or
    ``--watch``, which redraws for a while and pays that once)."""
    remote = context.remote()
    if remote is not None:
        return remote.call("GET", "/v1/status")
    api = context.local_api()
    answered = api.get("/v1/status") if api is not None and not watch else None
    if answered is None:
        return None
    if answered.warnings:
        context.warn(answered.warnings)
    return answered.document


def status(
    ctx: typer.Context,
    watch: Annotated[bool, typer.Option("--watch", "-w", help="Refresh until Ctrl-C.")] = False,
    output: OutputOption = Output.table,
) -> None:
    """One screen: pools, GPUs in use, policies, queue and recent events.

    Shows the controller's last cycle, the policy hash it enforces (folder,
    git commit; a change it refused), the pools (GPUs in use of the total;
    those that cannot be used now, with why), the queue by priority class and
    recent events. With --watch it redraws until Ctrl-C.

    Exit codes:
      0  a controller runs and its last cycle is recent
      1  after drawing it: no controller runs, or its last cycle is over
         90 s old

    Examples:
      meshctl status
      meshctl status --watch
      meshctl status -o json
    """
    from meshctl.cli import render

    context = app_context(ctx)
    said = _served_status(context, watch)
    if said is not None:
        if output is not Output.table:
            render.emit_data(said, output)
        else:
            render.show(render_status(said))
        _fail_if_down(said)
        return
    health = PoolHealth(context)
    with context.store() as store:
        if output is not Output.table or not watch:
            data = collect(context, store, health)
            if output is not Output.table:
                render.emit_data(data, output)
            else:
                render.show(render_status(data))
            _fail_if_down(data)
            return
        try:
            with render.live(watched(collect(context, store, health))) as update:
                while True:
                    time.sleep(1.0)
                    update(watched(collect(context, store, health)))
        except KeyboardInterrupt:
            raise typer.Exit(0) from None


def _fail_if_down(data: Status) -> None:
    from meshctl.app.status import controller_down

    down = controller_down(data["controller"])
    if down is not None:
        raise CommandError(down)


def watched(data: Status, size: tuple[int, int] | None = None) -> Any:
    """``status --watch``'s screen: every cell on one line, and as many of the latest events
    as the terminal (``size``: columns, lines) has room for."""
    from meshctl.cli import render

    return render.fitted(
        lambda events: render_status(data, events, one_line=True), len(data["events"]), size
    )


def _cut(flexible: bool) -> dict[str, Any]:
    """A column that takes the width the others leave and cuts what does not fit on one
    line with an ellipsis (``one_line``); else rich's default, wrapping."""
    return {"ratio": 1, "no_wrap": True, "overflow": "ellipsis"} if flexible else {}


def render_status(data: Status, events: int | None = None, one_line: bool = False) -> Any:
    """The status screen as one rich renderable: the latest ``events`` (None: all the
    document holds; 0: no events table); ``one_line``: long cells cut with an ellipsis
    rather than wrapped (a watched screen must fit)."""
    from rich.console import Group
    from rich.table import Table

    ctl = data["controller"]
    if ctl["pid"] is None:
        head = f"mesh [bold]{data['mesh']}[/]: controller [red]not running[/] (meshctl up)"
    else:
        head = (
            f"mesh [bold]{data['mesh']}[/]: controller pid {ctl['pid']}, last cycle "
            f"{ctl['last_cycle_age_s']} s ago ({(ctl['cycle_s'] or 0) * 1000:.0f} ms)"
        )
    lines = [head]
    if ctl.get("policy_hash"):
        commit = ctl["policy_commit"]
        at = f", commit {commit[:12]}" if commit else ""
        lines.append(f"policies {ctl['policy_hash']} ({ctl['policies']}{at})")
    if ctl.get("policy_error"):
        lines.append(
            f"[red]policy change refused[/] (the set above runs on): {ctl['policy_error']}"
        )
    jobs = ", ".join(f"{n} {s}" for s, n in sorted(data["jobs"].items())) or "no jobs"
    pools = Table(title="Pools", title_justify="left", expand=one_line)
    for header, justify in (
        ("Pool", "left"),
        ("Provider", "left"),
        ("State", "left"),
        ("Nodes", "right"),
        ("GPUs used / total", "right"),
    ):
        pools.add_column(header, justify=justify, **_cut(one_line and header == "State"))  # type: ignore[arg-type]
    for p in data["pools"]:
        total = "-" if p["gpus"] is None else f"{p['gpus_used']:g} / {p['gpus']}"
        state = str(p["state"]) if p["available"] else f"[red]unavailable[/]: {p['reason']}"
        pools.add_row(
            p["pool"],
            p["provider"],
            state,
            str(p["nodes"] if p["nodes"] is not None else "-"),
            total,
        )
    queue = Table(title="Queue by priority class", title_justify="left")
    for header in ("Class", "Priority", "Queued", "Oldest wait"):
        queue.add_column(header)
    for q in data["queue"]:
        queue.add_row(
            q["priority_class"] or "-", str(q["priority"]), str(q["queued"]),
            f"{q['oldest_wait_s']:.0f} s",
        )  # fmt: skip
    budgets = Table(title="Budgets this month", title_justify="left")
    for header, justify in (("Budget", "left"), ("Scope", "left"), ("Spent / limit USD", "right"),
                            ("State", "left")):  # fmt: skip
        budgets.add_column(header, justify=justify)  # type: ignore[arg-type]
    for b in data["budgets"]:
        mark = {"warn": "[yellow]warn[/]", "exceeded": "[red]exceeded[/]"}.get(b["state"], "ok")
        budgets.add_row(b["budget"], b["scope"], f"{b['spent_usd']:,.2f} / {b['limit_usd']:,.2f}",
                        mark)  # fmt: skip
    latest = data["events"] if events is None else data["events"][-events:] if events else []
    recent = Table(title="Recent events", title_justify="left", expand=one_line)
    for header in ("At", "Job", "Event", "Message"):
        recent.add_column(header, **_cut(one_line and header == "Message"))
    for e in latest:
        recent.add_row(clock_of(e["occurred_at"]), e["job_id"] or "", e["kind"], e["message"])
    shown = (
        [pools, queue] + ([budgets] if data["budgets"] else []) + ([recent] if events != 0 else [])
    )
    return Group(*lines, f"jobs: {jobs}", *shown)
