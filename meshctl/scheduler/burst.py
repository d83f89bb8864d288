"""Bursting: choose the cloud capacity to launch for a job that policy lets burst.

Among the burst targets' node types that fit one of the job's nodes, the cheapest per hour
for all its nodes wins: the spot price where the target allows spot and the pool offers it,
else on-demand; within the target's (and the job's) USD/hour limit, the pool's remaining
budget per hour, the node type's cap and the pool's cap over all its node types, all charged
for every launch already planned in the cycle. A target pool that is unavailable (no
credentials, refused ones) is skipped, and says why.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from meshctl.policy.verdict import BurstTarget, Verdict
from meshctl.scheduler.plan import Decision, Provision
from meshctl.scheduler.request import Request, shortfall
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
    if req.gpus > 0 and req.vendor and offer.vendor != req.vendor:
        return f"{offer.node_type} has {offer.vendor} GPUs"
    if req.gpus > 0 and req.accelerators and offer.accelerator.lower() not in req.accelerators:
        return f"{offer.node_type} has {offer.accelerator}"
    share = req.gpus if req.fractional else 1.0
    if req.gpus > 0 and req.gpu_memory_gib > offer.gpu_memory_gib * share + EPS:
        what = f"{share:g} of a {offer.gpu_memory_gib:g} GiB GPU" if share < 1 else "a GPU"
        return f"{offer.node_type}: {what} has less than {req.gpu_memory_gib:g} GiB"
    short = shortfall(req, offer.cpus, offer.memory_gib, offer.nic_gbps)
    if short is not None:
        return f"{offer.node_type} has fewer than {short[0]:g} {short[1]}"
    return None


def price(offer: Offer, target: BurstTarget) -> tuple[float, bool]:
    if target.spot and offer.spot_allowed and offer.spot_usd_per_hour is not None:
        return offer.spot_usd_per_hour, True
    return offer.on_demand_usd_per_hour, False


@dataclass
class Headroom:
    """What the pools may still take this cycle: nodes (all types together) and USD/hour of
    budget. None: no limit. The cycle charges every launch it plans against it."""

    nodes: dict[str, int | None]
    usd_per_hour: dict[str, float | None]

    @classmethod
    def of(cls, pools: Sequence[PoolInfo]) -> Headroom:
        return cls(
            {p.name: p.max_new_nodes for p in pools}, {p.name: p.budget_usd_per_hour for p in pools}
        )

    def charge(self, launch: Launch) -> None:
        pool = launch.offer.pool
        nodes, usd = self.nodes.get(pool), self.usd_per_hour.get(pool)
        if nodes is not None:
            self.nodes[pool] = nodes - launch.count
        if usd is not None:
            self.usd_per_hour[pool] = usd - launch.usd_per_hour


def _refusal(
    req: Request, offer: Offer, target: BurstTarget, total: float, room: Headroom
) -> str | None:
    reason = fits(req, offer)
    nodes_left, usd_left = room.nodes.get(offer.pool), room.usd_per_hour.get(offer.pool)
    if reason is None and req.nodes > offer.max_nodes:
        reason = f"{offer.node_type}: only {offer.max_nodes} more of this type allowed"
    if reason is None and nodes_left is not None and req.nodes > nodes_left:
        reason = f"{offer.node_type}: the pool may launch only {max(nodes_left, 0)} more nodes"
    limit = target.max_usd_per_hour
    if reason is None and limit is not None and total > limit + EPS:
        reason = f"{offer.node_type}: {total:g} USD/h over the {limit:g} limit"
    if reason is None and usd_left is not None and total > usd_left + EPS:
        reason = f"{offer.node_type}: {total:g} USD/h over the pool's remaining budget"
    return reason


def choose_launch(
    req: Request,
    targets: Sequence[BurstTarget],
    offers: Sequence[Offer],
    room: Headroom,
    rank: Callable[[str], int],
    unavailable: Mapping[str, str],
) -> tuple[Launch | None, list[str]]:
    """The cheapest launch that serves ``req``, and why each other option was not taken;
    ``unavailable``: pools not to launch in, and why ("gcp-spill: no credentials")."""
    options: list[Launch] = []
    why_not: list[str] = []
    for target in targets:
        if target.pool in unavailable:
            why_not.append(f"{target.pool}: {unavailable[target.pool]}")
            continue
        for offer in (o for o in offers if o.pool == target.pool):
            each, spot = price(offer, target)
            total = each * req.nodes
            reason = _refusal(req, offer, target, total, room)
            if reason is None:
                options.append(Launch(offer, req.nodes, spot, total))
            else:
                why_not.append(reason)
    if not options:
        return None, why_not
    best = min(options, key=lambda o: (o.usd_per_hour, rank(o.offer.pool), o.offer.node_type))
    return best, why_not


def less(offer: Offer, count: int) -> Offer:
    """The offer with ``count`` fewer nodes left to launch (this cycle planned them)."""
    return replace(offer, max_nodes=offer.max_nodes - count)


def note(verdict: Verdict | None) -> str:
    """What policy says of bursting for a job that waits."""
    if verdict is None:
        return "burst not allowed: no policy"
    b = verdict.burst
    if b.allowed:
        return "burst allowed"
    if b.blocked:
        return "burst blocked: " + "; ".join(f"{pool}: {why}" for pool, why in b.blocked)
    return "burst not allowed: no burst rule applies to this job now"


def provisioned(job_id: str, launch: Launch) -> tuple[Provision, Decision]:
    """What a launch chosen for a job does: the action, and the job's decision saying it."""
    offer = launch.offer
    action = Provision(
        job_id, offer.pool, offer.node_type, launch.count, launch.spot, launch.usd_per_hour
    )
    kind = "spot" if launch.spot else "on-demand"
    said = (
        f"launching {launch.count} x {offer.node_type} ({kind}, "
        f"{launch.usd_per_hour:g} USD/h) in {offer.pool}"
    )
    return action, Decision(job_id, "provisioning", said)
