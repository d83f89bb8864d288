"""``meshctl providers refresh aws|gcp``: read shapes (and AWS spot prices) from the clouds'
own APIs and rewrite the catalog file, keeping what those APIs do not publish.

What each API gives: EC2 ``DescribeInstanceTypes`` (vCPUs, memory, GPUs with model, count and
memory, network) and ``DescribeSpotPriceHistory`` (the latest spot price per type and zone;
the lowest zone is the region's); Compute Engine ``machineTypes`` (vCPUs, memory, attached
accelerators) and ``acceleratorTypes``. Neither API publishes on-demand list prices (those
come from the price lists, kept as they are in the file), nor NIC bandwidth for GCE (kept).

The merge is pure (``merge``); the file is written to a temporary name, loaded back and
checked, then moved over the old one: a refresh that fails leaves the old catalog intact.
Uncertainty markers are kept: a region's ``uncertain`` price (the list prices come from the
file, not the API), and a type's ``uncertain`` shape figures except those the API gave.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from meshctl.model.catalog import Catalog, InstanceType

GIB_PER_MIB = 1 / 1024


@dataclass(frozen=True, slots=True)
class Shape:
    """What a cloud API says of one instance type."""

    name: str
    vcpus: float
    memory_gib: float
    gpu_model: str
    gpu_count: int
    gpu_memory_gib: float | None = None
    nic_gbps: float | None = None
    vendor: str = "nvidia"


@dataclass
class Refresh:
    shapes: list[Shape] = field(default_factory=list)
    spot: dict[tuple[str, str], float] = field(default_factory=dict)  # (type, region) -> USD/h


def merge(old: Catalog, fresh: Refresh, today: dt.date, source: str) -> tuple[Catalog, list[str]]:
    """The old catalog with the API's shapes and spot prices laid over it; new GPU types are
    added (their on-demand prices unknown until the price list is read); what changed is
    listed."""
    changes: list[str] = []
    shapes = {s.name: s for s in fresh.shapes}
    types: list[InstanceType] = []
    for known in old.spec.instance_types:
        shape = shapes.pop(known.name, None)
        updated = _apply(known, shape, changes) if shape else known
        types.append(_spot(updated, fresh.spot, changes))
    for shape in sorted(shapes.values(), key=lambda s: s.name):
        if shape.gpu_count == 0 or shape.gpu_memory_gib is None:
            continue
        changes.append(f"{shape.name}: new ({shape.gpu_count} x {shape.gpu_model})")
        types.append(_spot(_new(shape), fresh.spot, changes))
    spec = old.spec.model_copy(update={"as_of": today, "source": source, "instance_types": types})
    return old.model_copy(update={"spec": spec}), changes


def _apply(known: InstanceType, shape: Shape, changes: list[str]) -> InstanceType:
    update: dict[str, Any] = {}
    if abs(known.vcpus - shape.vcpus) > 1e-9:
        update["vcpus"] = shape.vcpus
    if abs(known.memory_gib - shape.memory_gib) > 0.5:
        update["memory_gib"] = round(shape.memory_gib, 2)
    if shape.nic_gbps is not None and abs(known.nic_gbps - shape.nic_gbps) > 1e-9:
        update["nic_gbps"] = shape.nic_gbps
    acc = known.accelerator
    acc_update: dict[str, Any] = {}
    if shape.gpu_count and shape.gpu_count != acc.count:
        acc_update["count"] = shape.gpu_count
    if shape.gpu_memory_gib and abs(shape.gpu_memory_gib - acc.memory_gib) > 1:
        acc_update["memory_gib"] = round(shape.gpu_memory_gib)
    if acc_update:
        update["accelerator"] = acc.model_copy(update=acc_update)
    # A figure the API gave is no longer uncertain; the others' markers (and every price's:
    # the APIs publish no list prices) are kept.
    reported = {"vcpus", "memory_gib"} | ({"nic_gbps"} if shape.nic_gbps is not None else set())
    still = [f for f in known.uncertain if f not in reported]
    if still != known.uncertain:
        update["uncertain"] = still
    for key, value in update.items():
        changes.append(f"{known.name}: {key} {getattr(known, key)} -> {value}")
    return known.model_copy(update=update) if update else known


def _spot(
    known: InstanceType, spot: Mapping[tuple[str, str], float], changes: list[str]
) -> InstanceType:
    prices = dict(known.prices)
    for (name, region), usd in spot.items():
        if name != known.name or region not in prices:
            continue
        before = prices[region].spot_usd_per_hour
        if before is None or abs(before - usd) > 1e-9:
            changes.append(f"{name}: spot in {region} {before} -> {usd}")
            prices[region] = prices[region].model_copy(update={"spot_usd_per_hour": usd})
    return known.model_copy(update={"prices": prices})


def _new(shape: Shape) -> InstanceType:
    return InstanceType.model_validate(
        {
            "name": shape.name,
            "family": shape.name.split(".")[0]
            if "." in shape.name
            else shape.name.rsplit("-", 1)[0],
            "accelerator": {
                "vendor": shape.vendor,
                "model": shape.gpu_model,
                "count": shape.gpu_count,
                "memory_gib": shape.gpu_memory_gib,
            },
            "vcpus": shape.vcpus,
            "memory_gib": round(shape.memory_gib, 2),
            "nic_gbps": shape.nic_gbps or 0,
            "notes": "added by providers refresh; no list price yet (not in the provider's API)",
            "prices": {},
        }
    )


# --- AWS ------------------------------------------------------------------------------------------


def read_aws(regions: Sequence[str], endpoint_url: str | None, families: Sequence[str]) -> Refresh:
    """GPU instance types of these families and the regions' latest spot prices."""
    import boto3

    fresh = Refresh()
    for index, region in enumerate(regions):
        ec2 = boto3.client("ec2", region_name=region, endpoint_url=endpoint_url)
        if index == 0:  # shapes are the same in every region
            pages = ec2.get_paginator("describe_instance_types").paginate(
                Filters=[{"Name": "instance-type", "Values": [f"{f}.*" for f in families]}]
            )
            for page in pages:
                fresh.shapes += [
                    _aws_shape(raw) for raw in page["InstanceTypes"] if raw.get("GpuInfo")
                ]
        names = [s.name for s in fresh.shapes]
        since = dt.datetime.now(dt.UTC) - dt.timedelta(hours=6)
        history = ec2.get_paginator("describe_spot_price_history").paginate(
            InstanceTypes=names, ProductDescriptions=["Linux/UNIX"], StartTime=since
        ) if names else []  # fmt: skip
        latest: dict[tuple[str, str], tuple[dt.datetime, float]] = {}
        for page in history:
            for row in page["SpotPriceHistory"]:
                key = (row["InstanceType"], row["AvailabilityZone"])
                if key not in latest or row["Timestamp"] > latest[key][0]:
                    latest[key] = (row["Timestamp"], float(row["SpotPrice"]))
        for (name, _zone), (_, usd) in latest.items():
            best = fresh.spot.get((name, region))
            fresh.spot[(name, region)] = usd if best is None else min(best, usd)
    return fresh


def _aws_shape(raw: Mapping[str, Any]) -> Shape:
    gpu = raw["GpuInfo"]["Gpus"][0]
    network = str(raw.get("NetworkInfo", {}).get("NetworkPerformance", ""))
    match = re.search(r"(?:(\d+)x\s*)?(\d+(?:\.\d+)?)\s*Gigabit", network)  # "4x 100 Gigabit"
    return Shape(
        name=raw["InstanceType"],
        vcpus=float(raw["VCpuInfo"]["DefaultVCpus"]),
        memory_gib=raw["MemoryInfo"]["SizeInMiB"] * GIB_PER_MIB,
        gpu_model=str(gpu["Name"]),
        gpu_count=int(gpu["Count"]),
        gpu_memory_gib=gpu.get("MemoryInfo", {}).get("SizeInMiB", 0) * GIB_PER_MIB or None,
        nic_gbps=float(match.group(2)) * int(match.group(1) or 1) if match else None,
        vendor=str(gpu.get("Manufacturer", "nvidia")).lower(),
    )


# --- GCP ------------------------------------------------------------------------------------------

GCP_MODELS = {  # accelerator type -> the catalog's model name
    "nvidia-l4": "L4",
    "nvidia-tesla-a100": "A100",
    "nvidia-a100-80gb": "A100",
    "nvidia-h100-80gb": "H100",
    "nvidia-h100-mega-80gb": "H100",
    "nvidia-h200-141gb": "H200",
    "nvidia-tesla-t4": "T4",
    "nvidia-tesla-v100": "V100",
}


def read_gcp(
    project: str, regions: Sequence[str], endpoint_url: str | None, families: Sequence[str]
) -> Refresh:
    """Accelerator-optimized machine types of these families, as the first zone of each
    region offers them (GCE publishes no prices through this API)."""
    from google.cloud import compute_v1

    kwargs: dict[str, Any] = {"transport": "rest"}
    if endpoint_url:
        from google.auth.credentials import AnonymousCredentials

        anonymous: Any = AnonymousCredentials  # the library's constructor is not annotated
        kwargs |= {
            "credentials": anonymous(),
            "client_options": {"api_endpoint": endpoint_url},
        }
    client = compute_v1.MachineTypesClient(**kwargs)
    fresh, seen = Refresh(), set()
    for region in regions:
        for raw in client.list(project=project, zone=f"{region}-a"):
            family = raw.name.rsplit("-", 1)[0]
            if raw.name in seen or family not in families or not raw.accelerators:
                continue
            seen.add(raw.name)
            acc = raw.accelerators[0]
            fresh.shapes.append(
                Shape(
                    name=raw.name,
                    vcpus=float(raw.guest_cpus),
                    memory_gib=raw.memory_mb / 1024,
                    gpu_model=GCP_MODELS.get(
                        acc.guest_accelerator_type, acc.guest_accelerator_type
                    ),
                    gpu_count=int(acc.guest_accelerator_count),
                )
            )
    return fresh


# --- writing --------------------------------------------------------------------------------------


def write(catalog: Catalog, path: Path, header: str) -> None:
    """Write, read back, check, then replace: a failure leaves the old file as it was."""
    import yaml

    from meshctl.files import load_one

    body = catalog.model_dump(mode="json", exclude_defaults=False)
    text = f"# {header}\n" + yaml.safe_dump(body, sort_keys=False, allow_unicode=True, width=100)
    tmp = path.with_name(f".{path.name}.refresh")
    tmp.write_text(text)
    try:
        load_one(tmp, Catalog)
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)


def families(catalog: Catalog) -> list[str]:
    return sorted({t.family for t in catalog.spec.instance_types})


def regions(catalog: Catalog) -> list[str]:
    return sorted({r for t in catalog.spec.instance_types for r in t.prices})
