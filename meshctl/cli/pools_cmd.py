"""``meshctl pools list|show|check``: the pools of the mesh, their capacity and price per
GPU-hour, and whether each can be used now.

A price the provider catalog marks uncertain is shown with a ``~`` (and ``price_uncertain:
true`` in JSON), with a caption saying what the mark means."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from meshctl.app import pools
from meshctl.cli.context import app_context
from meshctl.cli.options import OutputOption
from meshctl.cli.render import Column, Output

if TYPE_CHECKING:
    pass

app = typer.Typer(
    help="The mesh's pools: capacity, price, use and whether each can be used.",
    no_args_is_help=True,
)


@app.command("list")
def list_pools(ctx: typer.Context, output: OutputOption = Output.table) -> None:
    """Each pool: provider, where, nodes, GPUs, accelerators, USD/GPU-hour.

    Configured capacity, and each pool's spend (per pool and team). A price the
    catalog marks uncertain is shown with ~.

    Examples:
      meshctl pools list
      meshctl pools list -o json
    """
    from meshctl.cli import render

    context = app_context(ctx)
    remote = context.remote()
    rows = remote.call("GET", "/v1/pools") if remote is not None else pools.capacities(context)
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
    render.emit(rows, columns, output, title="Pools", caption=caption)


@app.command("show")
def show_pool(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="The pool's name.")],
    output: OutputOption = Output.yaml,
) -> None:
    """One pool's full configuration, defaults filled in, with its prices.

    Examples:
      meshctl pools show onprem
      meshctl pools show aws-burst -o json
    """
    from meshctl.cli import render

    context = app_context(ctx)
    remote = context.remote()
    if remote is not None:  # the server's mesh
        from meshctl.app.remote import resource_path

        data = remote.call("GET", resource_path("pools", name))
    else:
        data = pools.pool_data(context.mesh(), context.catalog_map(), name)
    if output is Output.table:  # one pool's settings read best as YAML; prices as a table
        render.emit_data({k: v for k, v in data.items() if k != "prices"}, Output.yaml)
        if data["prices"]:
            _price_table(data["prices"])
        return
    render.emit_data(data, output)


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
    """Check whether each pool can be used: PASS, FAIL or SKIP, with the fix.

    One line per check. A local pool: up, with every node running (a node
    whose raylet is gone fails it). A ray pool: its dashboard answers the
    token. A cloud pool: a preflight that launches nothing: the settings a
    real account needs, credentials, zones, image, subnets and security groups
    (AWS) or network, subnetwork and firewall rules (GCP) letting the
    controller reach the dashboard and agent ports and the instances reach each
    other, instance types offered in the zones, GPU quota against max_nodes
    (docs/CLOUD.md).

    Exit codes:
      0  no check failed
      1  a check failed

    Examples:
      meshctl pools check
      meshctl pools check aws-burst
    """
    from meshctl.cli import render
    from meshctl.errors import CommandError

    context = app_context(ctx)
    remote = context.remote()
    if remote is not None:  # from the server's host, with its mesh and credentials
        rows = remote.call("POST", "/v1/pools/check", {"pool": pool}, timeout_s=300)
    else:
        mesh, catalogs = context.mesh_and_catalogs()
        rows = pools.checked(context, mesh, catalogs, pool)
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
