"""A cloud pool's Ray cluster: its head, and what one launch asks the provider for.

A cloud pool's instances form one Ray cluster, whose head starts it. With a
``head_node_type`` the head is an instance of its own: a small on-demand CPU type that takes
no work, so that a spot worker taken back never takes the cluster with it. Without one (the
emulated pools of the tests may leave it out), the pool's first worker is its head.

A launch for a job in a pool whose cluster runs asks for workers only. In a pool without
one it asks for the head first, then the workers (which join the head's address):

- with a head type: one head of that type, on demand, then the ``count`` workers;
- without: one of the workers, as the head, then the ``count - 1`` others.

The head is charged like any instance (on demand, less the pool's discount), to the team of
the job whose launch started the cluster; it goes by the idle rule (``teardown``) as the
pool's first instance: with the last of the workers. The controller and the simulator both
split launches here. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from meshctl.lifecycle.actions import Launch
from meshctl.model.catalog import Catalog
from meshctl.model.mesh import AwsPool, GcpPool, Pool


@dataclass(frozen=True, slots=True)
class HeadOffer:
    """A pool's own head: its type and what it costs per hour (never spot)."""

    pool: str
    node_type: str
    usd_per_hour: float


@dataclass(frozen=True, slots=True)
class Part:
    """One request to the provider: ``count`` instances of ``node_type``; ``head``: this
    part's one instance starts the pool's cluster; ``dedicated``: it is a head of its own
    (no GPUs, no work), not one of the job's workers."""

    node_type: str
    count: int
    spot: bool
    head: bool = False
    dedicated: bool = False


def head_of(pool: Pool, catalogs: Mapping[str, Catalog]) -> HeadOffer | None:
    """The pool's head offer when it names a ``head_node_type`` priced in its region."""
    catalog = catalogs.get(pool.provider)
    if not isinstance(pool, AwsPool | GcpPool) or not pool.head_node_type or catalog is None:
        return None
    found = catalog.head_type(pool.head_node_type)
    price = found.prices.get(pool.region) if found else None
    if found is None or price is None:
        return None
    usd = price.on_demand_usd_per_hour * (1 - pool.cost.discount_pct / 100)
    return HeadOffer(pool.name, found.name, usd)


def parts(want: Launch, running: bool, head: HeadOffer | None) -> list[Part]:
    """What ``want`` asks the provider for, in order: workers alone when the pool's cluster
    runs; else its head first (its own, or the first worker), then the workers."""
    if running:
        return [Part(want.node_type, want.count, want.spot)]
    if head is not None:
        first = Part(head.node_type, 1, False, head=True, dedicated=True)
        return [first, Part(want.node_type, want.count, want.spot)]
    first = Part(want.node_type, 1, want.spot, head=True)
    rest = [Part(want.node_type, want.count - 1, want.spot)] if want.count > 1 else []
    return [first, *rest]
