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
from meshctl.errors import InvalidInput

if TYPE_CHECKING:
    from meshctl.model import Catalog, Mesh
    from meshctl.state import Store

app = typer.Typer(
    help="The mesh's pools: capacity and price as configured, and what runs there now.",
    no_args_is_help=True,
)


def _capacities(ctx: typer.Context) -> list[dict[str, Any]]:
    context = app_context(ctx)
    mesh = context.mesh()
    catalogs = context.catalog_map()
    if not context.has_store():
        return pool_rows(mesh, catalogs, None)  # nothing ran here: no store made to be read
    with context.store() as store:
        return pool_rows(mesh, catalogs, store)


def pool_rows(mesh: Mesh, catalogs: Mapping[str, Catalog], store: Store | None) -> list[Any]:
    """Each pool as data (``shapes.PoolRow``): configured capacity, prices, and what the
    controller last recorded (null where nothing was). For the CLI and the API server."""
    from meshctl.model.capacity import pool_capacity

    live = _live(store) if store is not None else {}
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


def _live(store: Store) -> dict[str, dict[str, Any]]:
    """Per pool, what the controller last saw (state) and the GPUs its jobs hold now."""
    from meshctl.controller.status import pool_state
    from meshctl.state import ACTIVE_ATTEMPT, AttemptRecord, PoolRecord

    live: dict[str, dict[str, Any]] = {
        p.name: {
            "state": pool_state(p),
            "gpus_in_use": 0.0,
            "spend_usd_month": p.observed.get("spend_usd"),
        }
        for p in store.list(PoolRecord)
    }
    for attempt in store.list(AttemptRecord, state=ACTIVE_ATTEMPT):
        if attempt.pool in live:
            held = attempt.detail.allocations
            live[attempt.pool]["gpus_in_use"] += sum(h.gpus() for h in held)
    return live


@app.command("list")
def list_pools(ctx: typer.Context, output: OutputOption = Output.table) -> None:
    """Each pool: provider, where, nodes, GPUs, accelerators, USD per GPU-hour."""
    from meshctl.cli import render

    remote = app_context(ctx).remote()
    rows = remote.call("GET", "/v1/pools") if remote is not None else _capacities(ctx)
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

    context = app_context(ctx)
    remote = context.remote()
    if remote is not None:  # the server's mesh
        from meshctl.cli.remote import resource_path

        data = remote.call("GET", resource_path("pools", name))
    else:
        data = pool_data(context.mesh(), context.catalog_map(), name)
    if output is Output.table:  # one pool's settings read best as YAML; prices as a table
        render.emit_data({k: v for k, v in data.items() if k != "prices"}, Output.yaml)
        if data["prices"]:
            _price_table(data["prices"])
        return
    render.emit_data(data, output)


def pool_data(mesh: Mesh, catalogs: Mapping[str, Catalog], name: str) -> dict[str, Any]:
    """``pools show -o json``: the pool's settings with defaults filled in, and its prices."""
    from meshctl.cli.errors import InvalidRequestError

    pool = mesh.pool(name)
    if pool is None:
        names = ", ".join(p.name for p in mesh.spec.pools)
        raise InvalidRequestError(f"pool: expected one of {names}, got {name!r}")
    return pool.model_dump(mode="json") | {"prices": _prices(pool, catalogs)}


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
def check_pools(
    ctx: typer.Context,
    pool: Annotated[str | None, typer.Argument(help="Check this pool only.")] = None,
    output: OutputOption = Output.table,
) -> None:
    """Whether each pool can be used, one PASS, FAIL or SKIP line per check with the fix: a
    local pool that is up, a Ray pool whose dashboard answers; for a cloud pool a preflight
    that launches nothing (the settings a real account needs, credentials, zones, image,
    subnets and security groups or network and firewall, instance types, GPU quota).
    Exit 1 on any FAIL."""
    from meshctl.cli import render
    from meshctl.cli.errors import CommandError

    context = app_context(ctx)
    remote = context.remote()
    if remote is not None:  # from the server's host, with its mesh and credentials
        rows = remote.call("POST", "/v1/pools/check", {"pool": pool}, timeout_s=300)
    else:
        mesh, catalogs = context.mesh_and_catalogs()
        rows = checked(mesh, context.mesh_file(), context.home, catalogs, pool)
    lines = [
        {"pool": r["pool"], **c, "result": c["result"].upper()} for r in rows for c in r["checks"]
    ]
    render.emit(
        rows if output is not Output.table else lines,
        [
            Column("pool", "Pool"),
            Column("check", "Check"),
            Column("result", "Result"),
            Column("detail", "Found"),
            Column("fix", "Fix"),
        ],
        output,
        title="Can each pool be used?",
    )
    down = [r["pool"] for r in rows if not r["available"]]
    if down:
        raise CommandError(f"{len(down)} of {len(rows)} pools unavailable: {', '.join(down)}")


FIXES = {  # what to do about a pool that cannot be reached at all
    "local": "meshctl up starts it",
    "ray": "check address and auth in mesh.yaml, and that the cluster's dashboard runs",
    "aws": "check the pool's credentials: profile in mesh.yaml, or AWS_PROFILE and its files",
    "gcp": "check the pool's credentials: credentials_file, or application default credentials",
}


def checked(
    mesh: Mesh, where: Path, home: Path, catalogs: Mapping[str, Catalog], pool: str | None
) -> list[dict[str, Any]]:
    """``pools check -o json``: each pool (or the one named) with its checks."""
    if pool is not None and mesh.pool(pool) is None:
        known = ", ".join(p.name for p in mesh.spec.pools)
        raise InvalidInput(f"{where}: pool {pool!r}: not in the mesh; pools: {known}")
    return preflight_rows(mesh, home, catalogs, pool)


def preflight_rows(
    mesh: Any, home: Path, catalogs: Mapping[str, Catalog], only: str | None = None
) -> list[dict[str, Any]]:
    """``pool_health``'s rows with each pool's checks: a cloud pool that answers gets its
    preflight; ``available`` is false when any check failed."""
    from concurrent.futures import ThreadPoolExecutor

    from meshctl.cli import render
    from meshctl.controller.runtime import preflight, settings_missing

    rows = [r for r in pool_health(mesh, home) if only is None or r["pool"] == only]
    clouds = [  # those that answer, or whose only fault is a setting mesh.yaml lacks
        r
        for r in rows
        if r["provider"] in ("aws", "gcp")
        and (r["available"] or r["reason"] == settings_missing(mesh.pool(r["pool"])))
    ]
    with render.progress(f"preflight of {len(clouds)} cloud pools"), ThreadPoolExecutor(4) as run:
        found = dict(
            zip(
                [r["pool"] for r in clouds],
                run.map(lambda r: preflight(mesh.pool(r["pool"]), catalogs), clouds),
                strict=True,
            )
        )
    for row in rows:
        checks = found.get(row["pool"])
        if checks is None:  # not a cloud pool, or its provider refused us: that one check
            name = "credentials" if row["provider"] in ("aws", "gcp") else "reachable"
            result, detail = ("pass", "yes") if row["available"] else ("fail", row["reason"])
            fix = None if row["available"] else FIXES[row["provider"]]
            row["checks"] = [{"check": name, "result": result, "detail": detail, "fix": fix}]
            if row["provider"] == "local" and row["available"]:
                _check_local_nodes(row, mesh.pool(row["pool"]), home)
            continue
        row["checks"] = [
            {"check": c.name, "result": c.result, "detail": c.detail, "fix": c.fix or None}
            for c in checks
        ]
        first = next((c for c in checks if not c.ok), None)
        if first is not None and row["available"]:
            row["available"], row["reason"] = False, f"{first.name}: {first.detail}"
    return rows


def _check_local_nodes(row: dict[str, Any], pool: Any, home: Path) -> None:
    """A local pool that answers: whether each of its nodes runs (a node whose raylet was
    killed leaves the head answering)."""
    from meshctl.controller.rundir import run_dir
    from meshctl.pools import local
    from meshctl.pools.local_nodes import dead_nodes

    cluster = local.LocalCluster.load(local.run_file(run_dir(home), pool.name))
    dead = dead_nodes(cluster, pool)
    detail = f"dead: {', '.join(dead)}" if dead else "every node runs"
    fix = "meshctl up starts them again" if dead else None
    row["checks"].append(
        {"check": "nodes", "result": "fail" if dead else "pass", "detail": detail, "fix": fix}
    )
    if dead:
        row["available"], row["reason"] = False, f"nodes: {detail}"


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
