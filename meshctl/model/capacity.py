"""What a pool can hold, as configured: GPUs, accelerator models and the price of a GPU-hour.

Pure derivations from the mesh and the catalogs, shared by ``meshctl pools`` and (later) the
scheduler's cost scorer. Live use and health come from the pools themselves, not from here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from meshctl.model.catalog import Catalog, InstanceType
from meshctl.model.mesh import AwsPool, GcpPool, LocalPool, Pool, RayPool


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
    if isinstance(pool, AwsPool | GcpPool):
        return _cloud_capacity(pool, catalogs.get(pool.provider))
    groups = pool.nodes
    models = sorted({g.accelerator.model for g in groups if g.accelerator is not None})
    return PoolCapacity(
        name=pool.name,
        provider=pool.provider,
        location=_location(pool),
        nodes=sum(g.count for g in groups),
        gpus=int(sum(g.gpus * g.count for g in groups)),
        accelerators=tuple(models),
        usd_per_gpu_hour=pool.cost.usd_per_gpu_hour,
        spot_usd_per_gpu_hour=None,
    )


def _cloud_capacity(pool: AwsPool | GcpPool, catalog: Catalog | None) -> PoolCapacity:
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
        accelerators=tuple(sorted({t.accelerator.model for t, _, _ in types})),
        usd_per_gpu_hour=cheapest[0] if cheapest else None,
        spot_usd_per_gpu_hour=cheapest_spot[0] if cheapest_spot else None,
        price_uncertain=any(c[1] for c in (cheapest, cheapest_spot) if c is not None),
    )
