"""The GPU itself: the vendor and model the job accepts, and enough memory per GPU."""

from __future__ import annotations

from meshctl.scheduler.framework import CycleContext, Rejection
from meshctl.scheduler.request import Request
from meshctl.scheduler.snapshot import Node
from meshctl.scheduler.working import NodeState

NAME = "accelerator"
NO_GPUS = Rejection(NAME, "have no GPUs", never=True, dimension="gpus")
WRONG_MODEL = Rejection(NAME, "have a GPU model the job does not accept", never=True)
WRONG_VENDOR = Rejection(NAME, "have another GPU vendor", never=True)
TOO_LITTLE_MEMORY = Rejection(
    NAME, "have too little memory per GPU", never=True, dimension="gpu_memory"
)


def check(req: Request, node: Node) -> Rejection | None:
    """Pure: whether ``node``'s GPUs can ever serve ``req`` (free capacity aside)."""
    if req.gpus <= 0:
        return None
    if node.gpus == 0:
        return NO_GPUS
    if req.accelerators and (node.accelerator or "").lower() not in req.accelerators:
        return WRONG_MODEL
    if req.vendor and node.vendor and req.vendor != node.vendor:
        return WRONG_VENDOR
    # A fraction of a GPU gets that share of its memory.
    usable = node.gpu_memory_gib * (req.gpus if req.fractional else 1.0)
    if req.gpu_memory_gib > usable + 1e-9:
        return TOO_LITTLE_MEMORY
    return None


class AcceleratorFilter:
    name = NAME

    def __call__(self, req: Request, node: NodeState, ctx: CycleContext) -> Rejection | None:
        return check(req, node.node)
