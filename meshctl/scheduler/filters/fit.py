"""Room on every dimension: GPUs (whole, or a share of one physical GPU), CPUs, memory, NIC.

A rejection is ``never`` when even an empty node would be too small, so the job can be told
it is unschedulable rather than left pending.
"""

from __future__ import annotations

from meshctl.scheduler.framework import CycleContext, Rejection
from meshctl.scheduler.request import Request
from meshctl.scheduler.working import EPS, NodeState

NAME = "fit"


def _short(dimension: str, wanted: str, never: bool) -> Rejection:
    """Reasons read after a count of nodes: "1,100 lack 8 free GPUs"."""
    reason = f"have fewer than {wanted.replace('free ', '')} in all" if never else f"lack {wanted}"
    return Rejection(NAME, reason, never=never, dimension=dimension)


def check(req: Request, node: NodeState) -> Rejection | None:
    """Pure: the first dimension on which ``node`` cannot take ``req`` now, if any."""
    n = node.node
    if req.fractional:
        if node.shared_gpu_for(req.gpus) is None:
            return _short("gpus", f"{req.gpus:g} of a free GPU", never=False)
    elif req.whole_gpus > node.whole_free:
        return _short(
            "gpus",
            f"{req.whole_gpus} free GPU{'' if req.whole_gpus == 1 else 's'}",
            never=req.whole_gpus > n.gpus,
        )
    if req.cpus > node.cpus_free + EPS:
        return _short("cpus", f"{req.cpus:g} free CPUs", never=req.cpus > n.cpus + EPS)
    if req.memory_gib > node.memory_free + EPS:
        return _short(
            "memory",
            f"{req.memory_gib:g} GiB of free memory",
            never=req.memory_gib > n.memory_gib + EPS,
        )
    if req.nic_gbps > node.nic_free + EPS:
        return _short(
            "nic",
            f"{req.nic_gbps:g} Gbps of free NIC bandwidth",
            never=req.nic_gbps > n.nic_gbps + EPS,
        )
    return None


class FitFilter:
    name = NAME

    def __call__(self, req: Request, node: NodeState, ctx: CycleContext) -> Rejection | None:
        return check(req, node)
