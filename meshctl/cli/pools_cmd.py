"""``meshctl pools list|show|check``: the pools of the mesh, their capacity and price per
GPU-hour, and whether each can be used now."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any

import typer

from meshctl.cli.context import app_context
from meshctl.cli.options import OutputOption
from meshctl.cli.render import Column, Output

app = typer.Typer(
    help="The mesh's pools: capacity and price as configured, and what runs there now.",
    no_args_is_help=True,
)


def _capacities(ctx: typer.Context) -> list[dict[str, Any]]:
    from meshctl.model.capacity import pool_capacity

    context = app_context(ctx)
    mesh = context.mesh()
    catalogs = context.catalog_map()
    live = _live(context.home)
    return [
        asdict(pool_capacity(pool, catalogs)) | live.get(pool.name, {"state": "-"})
        for pool in mesh.spec.pools
    ]


def _live(home: Path) -> dict[str, dict[str, Any]]:
    """Per pool, what the controller last saw (state) and the GPUs its jobs hold now."""
    from meshctl.controller.decide import ACTIVE_ATTEMPT
    from meshctl.controller.world import gpus_held
    from meshctl.state import STATE_DB, AttemptRecord, PoolRecord, open_store

    if not (home / STATE_DB).is_file():
        return {}  # nothing has run here: do not create a store just to read it
    with open_store(home) as store:
        live: dict[str, dict[str, Any]] = {
            p.name: {
                "state": p.state,
                "gpus_in_use": 0.0,
                "spend_usd": p.observed.get("spend_usd"),
            }
            for p in store.list(PoolRecord)
        }
        for attempt in store.list(AttemptRecord):
            if attempt.state in ACTIVE_ATTEMPT and attempt.pool in live:
                held = attempt.detail.get("allocations", [])
                live[attempt.pool]["gpus_in_use"] += sum(gpus_held(a) for a in held)
    return live


@app.command("list")
def list_pools(ctx: typer.Context, output: OutputOption = Output.table) -> None:
    """Each pool: provider, where, nodes, GPUs, accelerators, USD per GPU-hour."""
    from meshctl.cli import render

    rows = _capacities(ctx)
    columns = [
        Column("name", "Pool"),
        Column("provider", "Provider"),
        Column("location", "Where"),
        Column("nodes", "Nodes (max)", "right"),
        Column("gpus", "GPUs (max)", "right"),
        Column("state", "State"),
        Column("gpus_in_use", "GPUs in use", "right"),
        Column("spend_usd", "Spent this month $", "right"),
        Column("accelerators", "Accelerators"),
        Column("usd_per_gpu_hour", "$/GPU-h", "right"),
        Column("spot_usd_per_gpu_hour", "Spot $/GPU-h", "right"),
    ]
    render.emit(
        rows,
        columns,
        output,
        title=f"Pools of {app_context(ctx).mesh_file()}",
        caption="configured capacity; state and GPUs in use as the controller last saw them; "
        "cloud prices are list prices from the catalogs",
    )


@app.command("show")
def show_pool(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="The pool's name.")],
    output: OutputOption = Output.yaml,
) -> None:
    """One pool's full configuration, with defaults filled in."""
    from meshctl.cli import render
    from meshctl.cli.errors import InvalidRequestError

    mesh = app_context(ctx).mesh()
    pool = mesh.pool(name)
    if pool is None:
        names = ", ".join(p.name for p in mesh.spec.pools)
        raise InvalidRequestError(f"pool: expected one of {names}, got {name!r}")
    render.emit_data(pool.model_dump(mode="json"), output)


@app.command("check")
def check_pools(ctx: typer.Context, output: OutputOption = Output.table) -> None:
    """Whether each pool can be used now: a local pool that is up, a Ray pool whose dashboard
    answers, a cloud pool whose provider accepts its credentials. Exit 1 if any cannot."""
    from meshctl.cli import render
    from meshctl.cli.errors import CommandError

    context = app_context(ctx)
    rows = pool_health(context.mesh(), context.home)
    table = [r | {"available": "yes" if r["available"] else "no"} for r in rows]
    render.emit(
        rows if output is not Output.table else table,
        [
            Column("pool", "Pool"),
            Column("provider", "Provider"),
            Column("available", "Available"),
            Column("reason", "Why not"),
        ],
        output,
        title="Can each pool be used now?",
    )
    down = [r["pool"] for r in rows if not r["available"]]
    if down:
        raise CommandError(f"{len(down)} of {len(rows)} pools unavailable: {', '.join(down)}")


def pool_health(mesh: Any, home: Path) -> list[dict[str, Any]]:
    """One row per pool: ``pool``, ``provider``, ``available``, ``reason`` (None when it is);
    the checks run side by side (a cloud provider may take seconds to answer)."""
    from concurrent.futures import ThreadPoolExecutor

    from meshctl.cli import render
    from meshctl.controller.runtime import unavailable

    pools = list(mesh.spec.pools)
    with render.progress(f"checking {len(pools)} pools"), ThreadPoolExecutor(4) as run:
        reasons = list(run.map(lambda pool: unavailable(pool, home), pools))
    return [
        {"pool": p.name, "provider": p.provider, "available": why is None, "reason": why}
        for p, why in zip(pools, reasons, strict=True)
    ]
