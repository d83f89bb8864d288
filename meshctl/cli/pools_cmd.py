"""``meshctl pools list|show``: the pools of the mesh, their capacity and price per GPU-hour."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated, Any

import typer

from meshctl.cli.context import app_context
from meshctl.cli.options import OutputOption
from meshctl.cli.render import Column, Output

app = typer.Typer(help="The mesh's pools: capacity and price, as configured.", no_args_is_help=True)


def _capacities(ctx: typer.Context) -> list[dict[str, Any]]:
    from meshctl.model.capacity import pool_capacity

    context = app_context(ctx)
    mesh = context.mesh()
    catalogs = context.catalog_map()
    return [asdict(pool_capacity(pool, catalogs)) for pool in mesh.spec.pools]


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
        Column("accelerators", "Accelerators"),
        Column("usd_per_gpu_hour", "$/GPU-h", "right"),
        Column("spot_usd_per_gpu_hour", "Spot $/GPU-h", "right"),
    ]
    render.emit(
        rows,
        columns,
        output,
        title=f"Pools of {app_context(ctx).mesh_file()}",
        caption="configured capacity; cloud prices are list prices from the catalogs",
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
