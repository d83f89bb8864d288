"""The plugin shapes: a filter says why a node cannot take a job; a scorer rates one that can.

Like the Kubernetes scheduler framework, a rejection says whether waiting could help
(``never=False``: resources are busy now) or not (``never=True``: the node can never hold this
request), which is what separates "pending" from "unschedulable".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from meshctl.scheduler.request import Request
from meshctl.scheduler.working import NodeState


@dataclass(frozen=True, slots=True)
class Rejection:
    filter: str
    reason: str  # for people: "lacks 8 free GPUs", "cordoned"
    never: bool = False
    dimension: str | None = None  # the resource that ran out, if one did


# A task shape of the workload: (GPUs per node, CPUs per node, accepted GPU models; empty: any)
Task = tuple[float, float, frozenset[str]]


@dataclass
class CycleContext:
    """Per-cycle data computed once and read by the plugins."""

    now_s: float
    usable_pools: frozenset[str] = frozenset()
    max_usd_per_gpu_hour: float = 1.0
    pool_wait_s: Mapping[str, float] = field(default_factory=dict)
    workload: tuple[tuple[Task, float], ...] = ()  # the queue's GPU task shapes, how often
    # Pools the job could use but that are unavailable now, and what their nodes are told
    unavailable: Mapping[str, Rejection] = field(default_factory=dict)
    # pool -> data set home -> USD a GiB moved from there to the pool's nodes costs
    egress_usd_per_gib: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    runtime_s: float | None = None  # the deciding job's, declared or estimated; None: unknown

    def for_job(
        self,
        usable: frozenset[str],
        unavailable: Mapping[str, Rejection] | None = None,
        runtime_s: float | None = None,
    ) -> CycleContext:
        """This cycle's context for one job (``dataclasses.replace`` without its cost, paid
        once per pending job)."""
        return CycleContext(
            now_s=self.now_s,
            usable_pools=usable,
            max_usd_per_gpu_hour=self.max_usd_per_gpu_hour,
            pool_wait_s=self.pool_wait_s,
            workload=self.workload,
            unavailable=self.unavailable if unavailable is None else unavailable,
            egress_usd_per_gib=self.egress_usd_per_gib,
            runtime_s=runtime_s,
        )


class Filter(Protocol):
    name: str

    def __call__(self, req: Request, node: NodeState, ctx: CycleContext) -> Rejection | None: ...


class Scorer(Protocol):
    name: str

    def __call__(self, req: Request, node: NodeState, ctx: CycleContext) -> float:
        """A score in [0, 1]; higher is better."""
        ...
