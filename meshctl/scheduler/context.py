"""The cycle's context (``CycleContext``), built once from the snapshot: what the plugins read
for every candidate (the dearest price, the pools' waits and egress prices, the queue's task
shapes), so none of it is worked out per node."""

from __future__ import annotations

from collections import Counter

from meshctl.scheduler.framework import CycleContext
from meshctl.scheduler.snapshot import Snapshot


def cycle_context(snap: Snapshot, max_usd_per_gpu_hour: float) -> CycleContext:
    """``max_usd_per_gpu_hour``: the dearest node's price (0: every node is free, and prices
    are judged against 1 USD)."""
    shapes = Counter(
        (r.gpus, r.cpus, r.accelerators)
        for r in (job.request for job in snap.pending)
        if r.gpus > 0
    )
    total = sum(shapes.values()) or 1
    return CycleContext(
        now_s=snap.now_s,
        max_usd_per_gpu_hour=max_usd_per_gpu_hour or 1.0,
        pool_wait_s={p.name: p.expected_wait_s for p in snap.pools},
        workload=tuple(
            (shape, n / total)
            for shape, n in sorted(
                shapes.items(), key=lambda kv: (kv[0][0], kv[0][1], sorted(kv[0][2]))
            )
        ),
        egress_usd_per_gib={
            p.name: p.egress_usd_per_gib for p in snap.pools if p.egress_usd_per_gib
        },
    )
