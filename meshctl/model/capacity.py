"""What a pool can hold, as configured: GPUs, accelerators and the price of a GPU-hour.

Pure derivations from the mesh and the catalogs, shared by ``meshctl pools`` and (later) the
scheduler's cost scorer. Live use and health come from the pools themselves, not from here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from meshctl.model.catalog import Catalog, InstanceType
from meshctl.model.mesh import Accelerator, AwsPool, GcpPool, LocalPool, Pool, RayPool


@dataclass(frozen=True, slots=True)
class PoolCapacity:
    name: str
    provider: str
    location: str
    nodes: int  # static nodes on-prem; the most a cloud pool may launch
    gpus: int  # GPUs on those nodes (a cloud pool: the most its node caps allow)
    accelerators: tuple[str, ...]
    usd_per_gpu_hour: float | None  # on-prem: amortised; cloud: cheapest on-demand node type
    spot_usd_per_gpu_hour: float | None
    price_uncertain: bool = False  # a price above is one the catalog marks uncertain


@dataclass(frozen=True, slots=True, order=True)
class AcceleratorType:
    """One kind of accelerator a pool's nodes carry (the policies' ``pool.accelerator_types``)."""

    vendor: str
    model: str
    memory_gib: float  # of one device


def accelerator_types(pool: Pool, catalogs: Mapping[str, Catalog]) -> tuple[AcceleratorType, ...]:
    """Each kind of accelerator on the pool's nodes, once, sorted: an on-prem pool's node groups
    say it; a cloud pool's node types through the catalog (a type the catalog lacks adds none,
    as it adds no GPUs)."""
    carried: list[Accelerator]
    if isinstance(pool, AwsPool | GcpPool):
        catalog = catalogs.get(pool.provider)
        found = [catalog.instance_type(t.name) if catalog else None for t in pool.node_types]
        carried = [t.accelerator for t in found if t is not None]
    else:
        carried = [g.accelerator for g in pool.nodes if g.accelerator is not None]
    kinds = {AcceleratorType(a.vendor, a.model, float(a.memory_gib)) for a in carried}
    return tuple(sorted(kinds))


def _location(pool: Pool) -> str:
    if isinstance(pool, LocalPool):
        return "this machine"
    if isinstance(pool, RayPool):
        return pool.address
    if isinstance(pool, GcpPool):
        return f"{pool.project}/{pool.region}"
    assert isinstance(pool, AwsPool)
    return pool.region


def pool_capacity(pool: Pool, catalogs: Mapping[str, Catalog]) -> PoolCapacity:
    models = tuple(sorted({a.model for a in accelerator_types(pool, catalogs)}))
    if isinstance(pool, AwsPool | GcpPool):
        return _cloud_capacity(pool, catalogs.get(pool.provider), models)
    groups = pool.nodes
    return PoolCapacity(
        name=pool.name,
        provider=pool.provider,
        location=_location(pool),
        nodes=sum(g.count for g in groups),
        gpus=int(sum(g.gpus * g.count for g in groups)),
        accelerators=models,
        usd_per_gpu_hour=pool.cost.usd_per_gpu_hour,
        spot_usd_per_gpu_hour=None,
    )


def _cloud_capacity(
    pool: AwsPool | GcpPool, catalog: Catalog | None, models: tuple[str, ...]
) -> PoolCapacity:
    types: list[tuple[InstanceType, int, bool]] = []
    for node_type in pool.node_types:
        found = catalog.instance_type(node_type.name) if catalog else None
        if found is not None:
            types.append((found, node_type.max_nodes, node_type.spot))
    discount = 1 - pool.cost.discount_pct / 100
    on_demand: list[tuple[float, bool]] = []  # (USD per GPU-hour, uncertain)
    spot: list[tuple[float, bool]] = []
    for t, _, spot_ok in types:
        price = t.prices.get(pool.region)
        if price is None:
            continue
        on_demand.append((price.on_demand_usd_per_hour * discount / t.gpus, price.uncertain))
        if spot_ok and price.spot_usd_per_hour is not None:
            spot.append((price.spot_usd_per_hour / t.gpus, price.uncertain))
    cheapest, cheapest_spot = min(on_demand, default=None), min(spot, default=None)
    gpus, room = 0, pool.max_nodes
    for t, cap, _ in sorted(types, key=lambda entry: -entry[0].gpus):  # greedy is optimal:
        take = min(cap, room)  # every node costs one of the same max_nodes, whatever its size
        gpus, room = gpus + take * t.gpus, room - take
    return PoolCapacity(
        name=pool.name,
        provider=pool.provider,
        location=_location(pool),
        nodes=pool.max_nodes,
        gpus=gpus,
        accelerators=models,
        usd_per_gpu_hour=cheapest[0] if cheapest else None,
        spot_usd_per_gpu_hour=cheapest_spot[0] if cheapest_spot else None,
        price_uncertain=any(c[1] for c in (cheapest, cheapest_spot) if c is not None),
    )
