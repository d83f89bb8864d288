"""``meshctl pools list|show|check``: the pools of the mesh, their capacity and price per
GPU-hour, and whether each can be used now.

A price the provider catalog marks uncertain is shown with a ``~`` (and ``price_uncertain:
true`` in JSON), with a caption saying what the mark means."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from meshctl.cli.context import app_context
from meshctl.cli.options import OutputOption
from meshctl.cli.render import Column, Output

if TYPE_CHECKING:
    from meshctl.model import Catalog

app = typer.Typer(
    help="The mesh's pools: capacity and price as configured, and what runs there now.",
    no_args_is_help=True,
)


def _capacities(ctx: typer.Context) -> list[dict[str, Any]]:
    """Each pool as data (``shapes.PoolRow``): configured capacity, prices, and what the
    controller last recorded (null where nothing was)."""
    from meshctl.model.capacity import pool_capacity

    context = app_context(ctx)
    mesh = context.mesh()
    catalogs = context.catalog_map()
    live = _live(context.home)
    rows = []
    for pool in mesh.spec.pools:
        cap = asdict(pool_capacity(pool, catalogs))
        cap["pool"] = cap.pop("name")
        cap["accelerators"] = list(cap["accelerators"])
        seen = live.get(pool.name, {})
        rows.append(
            cap
            | {
                "state": seen.get("state"),
                "gpus_in_use": seen.get("gpus_in_use"),
                "spend_usd_month": seen.get("spend_usd_month"),
            }
        )
    return rows


def _live(home: Path) -> dict[str, dict[str, Any]]:
    """Per pool, what the controller last saw (state) and the GPUs its jobs hold now."""
    from meshctl.state import ACTIVE_ATTEMPT, STATE_DB, AttemptRecord, PoolRecord, open_store

    if not (home / STATE_DB).is_file():
        return {}  # nothing has run here: do not create a store just to read it
    with open_store(home) as store:
        live: dict[str, dict[str, Any]] = {
            p.name: {
                "state": p.state,
                "gpus_in_use": 0.0,
                "spend_usd_month": p.observed.get("spend_usd"),
            }
            for p in store.list(PoolRecord)
        }
        for attempt in store.list(AttemptRecord):
            if attempt.state in ACTIVE_ATTEMPT and attempt.pool in live:
                held = attempt.detail.allocations
                live[attempt.pool]["gpus_in_use"] += sum(h.gpus() for h in held)
    return live


@app.command("list")
def list_pools(ctx: typer.Context, output: OutputOption = Output.table) -> None:
    """Each pool: provider, where, nodes, GPUs, accelerators, USD per GPU-hour."""
    from meshctl.cli import render

    rows = _capacities(ctx)
    columns = [
        Column("pool", "Pool"),
        Column("provider", "Provider"),
        Column("location", "Where"),
        Column("nodes", "Nodes (max)", "right"),
        Column("gpus", "GPUs (max)", "right"),
        Column("state", "State"),
        Column("gpus_in_use", "GPUs in use", "right"),
        Column("spend_usd_month", "Spent this month $", "right"),
        Column("accelerators", "Accelerators"),
        Column("usd_per_gpu_hour", "$/GPU-h", "right"),
        Column("spot_usd_per_gpu_hour", "Spot $/GPU-h", "right"),
    ]
    caption = (
        "configured capacity; state and GPUs in use as the controller last saw them; "
        "cloud prices are list prices from the catalogs"
    )
    if any(r["price_uncertain"] for r in rows):
        caption += "; " + render.uncertain_caption()
    if output is Output.table:
        rows = render.marked(rows, ("usd_per_gpu_hour", "spot_usd_per_gpu_hour"))
    render.emit(
        rows, columns, output, title=f"Pools of {app_context(ctx).mesh_file()}", caption=caption
    )


@app.command("show")
def show_pool(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="The pool's name.")],
    output: OutputOption = Output.yaml,
) -> None:
    """One pool's full configuration, with defaults filled in, and its node types' prices."""
    from meshctl.cli import render
    from meshctl.cli.errors import InvalidRequestError

    context = app_context(ctx)
    mesh = context.mesh()
    pool = mesh.pool(name)
    if pool is None:
        names = ", ".join(p.name for p in mesh.spec.pools)
        raise InvalidRequestError(f"pool: expected one of {names}, got {name!r}")
    data = pool.model_dump(mode="json") | {"prices": _prices(pool, context.catalog_map())}
    if output is Output.table:  # one pool's settings read best as YAML; prices as a table
        render.emit_data({k: v for k, v in data.items() if k != "prices"}, Output.yaml)
        if data["prices"]:
            _price_table(data["prices"])
        return
    render.emit_data(data, output)


def _prices(pool: Any, catalogs: Mapping[str, Catalog]) -> list[dict[str, Any]]:
    """A cloud pool's node types priced in its region (``shapes.PriceData``); on-prem: none."""
    from meshctl.model.mesh import AwsPool, GcpPool

    if not isinstance(pool, AwsPool | GcpPool):
        return []
    catalog = catalogs.get(pool.provider)
    discount = 1 - pool.cost.discount_pct / 100
    rows = []
    for node_type in pool.node_types:
        found = catalog.instance_type(node_type.name) if catalog else None
        price = found.prices.get(pool.region) if found else None
        spot = price.spot_usd_per_hour if price and node_type.spot else None
        rows.append(
            {
                "node_type": node_type.name,
                "on_demand_usd_per_hour": (
                    round(price.on_demand_usd_per_hour * discount, 6) if price else None
                ),
                "spot_usd_per_hour": spot,
                "price_uncertain": bool(price and price.uncertain),
            }
        )
    return rows


def _price_table(prices: list[dict[str, Any]]) -> None:
    from meshctl.cli import render

    marked = render.marked(prices, ("on_demand_usd_per_hour", "spot_usd_per_hour"))
    uncertain = any(p["price_uncertain"] for p in prices)
    render.emit(
        marked,
        [
            Column("node_type", "Node type"),
            Column("on_demand_usd_per_hour", "On-demand $/h", "right"),
            Column("spot_usd_per_hour", "Spot $/h", "right"),
        ],
        Output.table,
        title="Prices in the pool's region",
        caption=render.uncertain_caption() if uncertain else "",
    )


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
