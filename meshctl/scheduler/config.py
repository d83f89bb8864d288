"""How a scheduling cycle runs: candidate limits, aging, backfill, queue depth, explanations."""

from __future__ import annotations

from dataclasses import dataclass, field

from meshctl.scheduler.queue import Aging


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    max_candidates: int = 32  # feasible nodes scored per pool for a single-node job
    top_candidates: int = 3  # kept in each decision's explanation
    aging: Aging = field(default_factory=Aging)
    backfill: bool = True
    fragmentation: bool = True
    # At most this many pending jobs, in queue order, are decided per cycle; None: all. Like
    # Slurm's default_queue_depth, it bounds a cycle's cost when thousands of jobs wait.
    queue_depth: int | None = None
    # Explain waiting jobs (filters per reason, the exhausted resource, nodes held for others):
    # one scan of the nodes per request shape. The simulator, which reads no explanation,
    # turns it off.
    explain: bool = True


DEFAULT_CONFIG = SchedulerConfig()
