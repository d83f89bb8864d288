"""``meshctl providers list|prices|heads|accelerators``: the instance types and list prices
meshctl plans with, and the accelerator registry.

What a catalog marks uncertain (a region's prices, a shape figure such as NIC bandwidth) is
shown with a ``~`` and a caption, and as ``price_uncertain`` / ``uncertain_fields`` in JSON."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from meshctl.cli.context import app_context
from meshctl.cli.options import OutputOption
from meshctl.cli.render import Column, Output

if TYPE_CHECKING:
    from meshctl.catalog import Found
    from meshctl.model.catalog import InstanceType

app = typer.Typer(
    help="Provider catalogs: GPU instance types and their prices.", no_args_is_help=True
)

ProviderOption = Annotated[
    list[str] | None,
    typer.Option("--provider", "-p", help="aws or gcp (repeatable; default: both)."),
]
GpuOption = Annotated[
    str | None, typer.Option("--gpu", help="Only this accelerator model, e.g. H100.")
]


def _catalogs(ctx: typer.Context, providers: list[str] | None) -> list[Found]:
    from meshctl.catalog import PROVIDERS, load_catalogs
    from meshctl.errors import InvalidRequestError

    chosen = providers or list(PROVIDERS)
    unknown = [p for p in chosen if p not in PROVIDERS]
    if unknown:
        raise InvalidRequestError(
            f"--provider: expected one of {', '.join(PROVIDERS)}, got {', '.join(unknown)}"
        )
    wanted = tuple(p for p in PROVIDERS if p in chosen)
    return load_catalogs(wanted, directory=app_context(ctx).catalog_dir())


def _caption(found: list[Found], marked: bool, what: str = "a price") -> str:
    from meshctl.cli.render import uncertain_caption

    dates = "; ".join(f"{f.provider}: list prices as of {f.catalog.spec.as_of}" for f in found)
    return dates + ("; " + uncertain_caption(what) if marked else "")


def _matches(model: str, gpu: str | None) -> bool:
    return gpu is None or model.lower() == gpu.lower()


@app.command("list")
def list_types(
    ctx: typer.Context,
    provider: ProviderOption = None,
    gpu: GpuOption = None,
    output: OutputOption = Output.table,
) -> None:
    """GPU instance types: accelerators, vCPUs, memory, network, regions.

    Each type's shape (vendor, model, devices) and the regions it is priced in.

    Examples:
      meshctl providers list
      meshctl providers list --provider aws --gpu H100
    """
    from meshctl.cli import render

    found = _catalogs(ctx, provider)
    types = [
        (f.provider, t)
        for f in found
        for t in f.catalog.spec.instance_types
        if _matches(t.accelerator.model, gpu)
    ]
    rows = [_type_row(name, t) for name, t in types]
    columns = [
        Column("provider", "Provider"),
        Column("node_type", "Type"),
        Column("gpus", "Devices", "right"),
        Column("vendor", "Vendor"),
        Column("accelerator", "Accelerator"),
        Column("gpu_memory_gib", "GiB each", "right"),
        Column("vcpus", "vCPUs", "right"),
        Column("memory_gib", "RAM GiB", "right"),
        Column("nic_gbps", "NIC Gbps", "right"),
        Column("regions", "Regions priced"),
    ]
    marked = any(r["price_uncertain"] or r["uncertain_fields"] for r in rows)
    caption = _caption(found, marked, "a price or figure")
    table = output is Output.table
    shown = [_marked_type(r, t) for r, (_, t) in zip(rows, types, strict=True)] if table else rows
    render.emit(shown, columns, output, title="GPU instance types", caption=caption)


def _type_row(provider: str, t: InstanceType) -> dict[str, Any]:
    """An instance type as data (``shapes.ProviderType``)."""
    return {
        "provider": provider,
        "node_type": t.name,
        "gpus": t.accelerator.count,
        "vendor": t.accelerator.vendor,
        "accelerator": t.accelerator.model,
        "gpu_memory_gib": t.accelerator.memory_gib,
        "vcpus": t.vcpus,
        "memory_gib": t.memory_gib,
        "nic_gbps": t.nic_gbps,
        "regions": sorted(t.prices),
        "price_uncertain": any(p.uncertain for p in t.prices.values()),
        "uncertain_fields": list(t.uncertain),
    }


def _marked_type(row: dict[str, Any], t: InstanceType) -> dict[str, Any]:
    """``t``'s table row with ``~`` on its uncertain figures and on the regions where its
    prices are uncertain."""
    from meshctl.cli.render import UNCERTAIN, cell

    marked = {k: f"{UNCERTAIN}{cell(row[k])}" for k in t.uncertain if k in row}
    regions = [f"{UNCERTAIN}{r}" if t.prices[r].uncertain else r for r in row["regions"]]
    return row | marked | {"regions": regions}


def _price_rows(found: list[Found], region: str | None, gpu: str | None) -> list[dict[str, Any]]:
    rows = []
    for f in found:
        for t in f.catalog.spec.instance_types:
            for where, price in sorted(t.prices.items()):
                if (region and where != region) or not _matches(t.accelerator.model, gpu):
                    continue
                rows.append(
                    {
                        "provider": f.provider,
                        "region": where,
                        "node_type": t.name,
                        "gpus": t.accelerator.count,
                        "accelerator": t.accelerator.model,
                        "on_demand_usd_per_hour": price.on_demand_usd_per_hour,
                        "spot_usd_per_hour": price.spot_usd_per_hour,
                        "on_demand_usd_per_gpu_hour": round(
                            price.on_demand_usd_per_hour / t.accelerator.count, 4
                        ),
                        "price_uncertain": price.uncertain,
                    }
                )
    return sorted(
        rows, key=lambda r: (r["on_demand_usd_per_gpu_hour"], r["node_type"], r["region"])
    )


@app.command("prices")
def prices(
    ctx: typer.Context,
    provider: ProviderOption = None,
    gpu: GpuOption = None,
    region: Annotated[str | None, typer.Option(help="Only this region.")] = None,
    output: OutputOption = Output.table,
) -> None:
    """List prices per region, cheapest GPU-hour first.

    A price the catalog marks uncertain is shown with ~ (price_uncertain: true
    in JSON).

    Examples:
      meshctl providers prices --gpu H100
      meshctl providers prices --provider gcp --region us-central1
    """
    from meshctl.cli import render
    from meshctl.errors import InvalidRequestError

    found = _catalogs(ctx, provider)
    rows = _price_rows(found, region, gpu)
    if not rows and region:
        known = sorted({r for f in found for t in f.catalog.spec.instance_types for r in t.prices})
        if region not in known:
            raise InvalidRequestError(
                f"--region: expected a region priced in the catalogs ({', '.join(known)}), "
                f"got {region!r}"
            )
    columns = [
        Column("provider", "Provider"),
        Column("region", "Region"),
        Column("node_type", "Type"),
        Column("gpus", "GPUs", "right"),
        Column("accelerator", "Accelerator"),
        Column("on_demand_usd_per_hour", "On-demand $/h", "right"),
        Column("spot_usd_per_hour", "Spot $/h", "right"),
        Column("on_demand_usd_per_gpu_hour", "$/GPU-h", "right"),
    ]
    caption = _caption(found, any(r["price_uncertain"] for r in rows))
    if output is Output.table:
        prices = ("on_demand_usd_per_hour", "spot_usd_per_hour", "on_demand_usd_per_gpu_hour")
        rows = render.marked(rows, prices)
    render.emit(rows, columns, output, title="List prices (USD)", caption=caption)


@app.command("heads")
def heads(
    ctx: typer.Context,
    provider: ProviderOption = None,
    output: OutputOption = Output.table,
) -> None:
    """CPU types a cloud pool's own Ray head may run on, with their prices.

    The small types head_node_type may name, with their on-demand prices per
    region.

    Examples:
      meshctl providers heads
      meshctl providers heads --provider aws
    """
    from meshctl.cli import render

    found = _catalogs(ctx, provider)
    types = [(f.provider, t) for f in found for t in f.catalog.spec.head_types]
    rows = [
        {
            "provider": name,
            "node_type": t.name,
            "vcpus": t.vcpus,
            "memory_gib": t.memory_gib,
            "prices": [
                {
                    "region": region,
                    "on_demand_usd_per_hour": price.on_demand_usd_per_hour,
                    "price_uncertain": price.uncertain,
                }
                for region, price in sorted(t.prices.items())
            ],
        }
        for name, t in types
    ]
    columns = [
        Column("provider", "Provider"),
        Column("node_type", "Type"),
        Column("vcpus", "vCPUs", "right"),
        Column("memory_gib", "RAM GiB", "right"),
        Column("prices", "On-demand $/h by region"),
    ]
    shown = rows
    if output is Output.table:  # ``~`` before a price the catalog marks uncertain
        shown = [
            {**row, "prices": ", ".join(
                f"{region} {'~' if price.uncertain else ''}{price.on_demand_usd_per_hour:g}"
                for region, price in sorted(t.prices.items())
            )}
            for row, (_, t) in zip(rows, types, strict=True)
        ]  # fmt: skip
    marked = any(p.uncertain for _, t in types for p in t.prices.values())
    render.emit(shown, columns, output, title="Head types", caption=_caption(found, marked))


@app.command("accelerators")
def accelerators(ctx: typer.Context, output: OutputOption = Output.table) -> None:
    """The accelerator registry: vendor, memory, interconnect, throughput.

    Each model's vendor, memory and interconnect, the Ray resource and the
    visibility variable it is reached by, its torch backend and its throughput
    against an H100 (docs/ACCELERATORS.md).

    Examples:
      meshctl providers accelerators
      meshctl providers accelerators -o yaml
    """
    from meshctl.cli import render

    registry = app_context(ctx).accelerators().spec
    rows: list[dict[str, Any]] = []
    for m in registry.models:
        vendor = registry.vendor(m.vendor)
        assert vendor is not None  # the registry refuses a model of an unlisted vendor
        rows.append(
            {
                "vendor": m.vendor,
                "model": m.model,
                "memory_gib": m.memory_gib,
                "interconnect": m.interconnect,
                "ray_resource": vendor.ray_resource,
                "ray_units": m.ray_units,
                "visibility": vendor.visibility.variable,
                "visible_by": vendor.visibility.by,
                "torch_backend": vendor.torch_backend,
                "chips_per_host": m.chips_per_host,
                "throughput": m.throughput,
                "reference": m.model == registry.reference,
                "uncertain_fields": list(m.uncertain),
            }
        )
    columns = [
        Column("vendor", "Vendor"),
        Column("model", "Model"),
        Column("memory_gib", "GiB", "right"),
        Column("interconnect", "Interconnect"),
        Column("ray_resource", "Ray resource"),
        Column("visibility", "Visibility"),
        Column("torch_backend", "Backend"),
        Column("throughput", f"x {registry.reference}", "right"),
    ]
    shown = rows
    if output is Output.table:
        shown = [
            {**r, "visibility": f"{r['visibility']} (by {r['visible_by']})",
             "throughput": "-" if r["throughput"] is None else (
                 f"~{r['throughput']:g}" if "throughput" in r["uncertain_fields"]
                 else f"{r['throughput']:g}")}
            for r in rows
        ]  # fmt: skip
    marked = any(r["uncertain_fields"] for r in rows)
    said = f"accelerator registry as of {registry.as_of}"
    caption = f"{said}; ~ marks a figure that may be wrong (see the file's notes)"
    render.emit(shown, columns, output, title="Accelerators", caption=caption if marked else said)


@app.command("refresh")
def refresh(
    ctx: typer.Context,
    provider: Annotated[str, typer.Argument(help="aws or gcp.")],
    region: Annotated[
        list[str] | None, typer.Option("--region", help="Regions to read (default: the catalog's).")
    ] = None,
    endpoint_url: Annotated[
        str | None, typer.Option("--endpoint-url", help="API endpoint override (emulators).")
    ] = None,
    project: Annotated[
        str | None,
        typer.Option(envvar="GOOGLE_CLOUD_PROJECT", help="GCP project to read through (gcp)."),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Show changes; write nothing.")
    ] = False,
) -> None:
    """Read instance types from a cloud's API and rewrite its catalog.

    Reads instance or machine types (and AWS spot price history) through boto3
    or google-cloud-compute and rewrites the catalog in your providers/ folder.
    List prices and notes are kept (the APIs do not publish them); a failed
    refresh leaves the file as it was.

    Examples:
      meshctl providers refresh aws --region us-east-1 --dry-run
      meshctl providers refresh gcp --project my-project
    """
    import datetime as dt

    from meshctl.catalog import load_catalog
    from meshctl.catalog import refresh as rf
    from meshctl.cli import render
    from meshctl.errors import CommandError, InvalidRequestError

    if provider not in ("aws", "gcp"):
        raise InvalidRequestError(f"provider: expected aws or gcp, got {provider!r}")
    folder = app_context(ctx).catalog_dir()
    if folder is None:
        raise InvalidRequestError(
            "refresh rewrites the catalog in your mesh's providers/ folder: give --providers DIR "
            "(meshctl init makes one)"
        )
    found = load_catalog(provider, folder)  # type: ignore[arg-type]
    path = folder / f"{provider}.yaml"
    regions = region or rf.regions(found.catalog)
    try:
        if provider == "aws":
            fresh = rf.read_aws(regions, endpoint_url, rf.families(found.catalog))
        else:
            if not project:
                raise InvalidRequestError("--project: gcp refresh reads through a project")
            fresh = rf.read_gcp(project, regions, endpoint_url, rf.families(found.catalog))
    except InvalidRequestError:
        raise
    except Exception as err:  # an SDK's error: nothing was written
        raise CommandError(f"refresh {provider}: {err}; {path} is unchanged") from None
    today = dt.date.today()
    source = f"{provider} APIs read by meshctl providers refresh on {today}; " + (
        "on-demand prices and notes kept from the previous catalog: "
        + found.catalog.spec.source.strip()
    )
    updated, changes = rf.merge(found.catalog, fresh, today, source[:4000])
    for line in changes or ["no changes"]:
        render.plain(line)
    if dry_run:
        return
    rf.write(updated, path, f"{provider} GPU instance catalog for meshctl; refreshed {today}.")
    render.plain(f"wrote {path}: {len(updated.spec.instance_types)} types, {len(changes)} changes")
