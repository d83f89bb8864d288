"""Bursting: choose the cloud capacity to launch for a job that policy lets burst.

Among the burst targets' node types that fit one of the job's nodes, the cheapest per hour
for all its nodes wins: the spot price where the target allows spot and the pool offers it,
else on-demand; within the target's (and the job's) USD/hour limit, the pool's remaining
budget per hour, and the node type's remaining capacity.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from meshctl.policy.verdict import BurstTarget
from meshctl.scheduler.request import Request
from meshctl.scheduler.snapshot import Offer, PoolInfo

EPS = 1e-9


@dataclass(frozen=True, slots=True)
class Launch:
    offer: Offer
    count: int
    spot: bool
    usd_per_hour: float


def fits(req: Request, offer: Offer) -> str | None:
    """Why one node of this type cannot hold one node of ``req``, or None."""
    if req.gpus > offer.gpus + EPS:
        return f"{offer.node_type} has {offer.gpus} GPUs"
    if req.accelerators and offer.accelerator.lower() not in req.accelerators:
        return f"{offer.node_type} has {offer.accelerator}"
    share = req.gpus if req.fractional else 1.0
    if req.gpus > 0 and req.gpu_memory_gib > offer.gpu_memory_gib * share + EPS:
        what = f"{share:g} of a {offer.gpu_memory_gib:g} GiB GPU" if share < 1 else "a GPU"
        return f"{offer.node_type}: {what} has less than {req.gpu_memory_gib:g} GiB"
    for need, has, what in (
        (req.cpus, offer.cpus, "vCPUs"),
        (req.memory_gib, offer.memory_gib, "GiB memory"),
        (req.nic_gbps, offer.nic_gbps, "Gbps"),
    ):
        if need > has + EPS:
            return f"{offer.node_type} has {has:g} {what}"
    return None


def price(offer: Offer, target: BurstTarget) -> tuple[float, bool]:
    if target.spot and offer.spot_allowed and offer.spot_usd_per_hour is not None:
        return offer.spot_usd_per_hour, True
    return offer.on_demand_usd_per_hour, False


def choose_launch(
    req: Request,
    targets: Sequence[BurstTarget],
    offers: Sequence[Offer],
    pools: Mapping[str, PoolInfo],
    rank: Callable[[str], int],
) -> tuple[Launch | None, list[str]]:
    """The cheapest launch that serves ``req``, and why each other option was not taken."""
    options: list[Launch] = []
    why_not: list[str] = []
    for target in targets:
        for offer in (o for o in offers if o.pool == target.pool):
            reason = fits(req, offer)
            each, spot = price(offer, target)
            total = each * req.nodes
            budget = pools[offer.pool].budget_usd_per_hour if offer.pool in pools else None
            if reason is None and req.nodes > offer.max_nodes:
                reason = f"{offer.node_type}: only {offer.max_nodes} more nodes allowed"
            if (
                reason is None
                and target.max_usd_per_hour is not None
                and total > target.max_usd_per_hour
            ):
                reason = (
                    f"{offer.node_type}: {total:g} USD/h over the {target.max_usd_per_hour:g} limit"
                )
            if reason is None and budget is not None and total > budget:
                reason = f"{offer.node_type}: {total:g} USD/h over the pool's remaining budget"
            if reason is None:
                options.append(Launch(offer, req.nodes, spot, total))
            else:
                why_not.append(reason)
    if not options:
        return None, why_not
    best = min(options, key=lambda o: (o.usd_per_hour, rank(o.offer.pool), o.offer.node_type))
    return best, why_not
