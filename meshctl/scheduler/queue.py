"""Queue order: effective priority, then fair share between teams, then age.

Effective priority is the job's priority plus an aging bonus (``aging_step`` for every
``aging_period_s`` waited, up to ``aging_cap``), so nothing starves. Within one effective
priority, teams take turns by dominant-resource fairness (DRF): the team whose largest share
of any resource (GPUs, CPUs, memory) is smallest goes next, its oldest job first; the share
grows as the cycle places its jobs.
"""

from __future__ import annotations

import heapq
from collections import defaultdict, deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from meshctl.scheduler.snapshot import Pending


@dataclass(frozen=True, slots=True)
class Aging:
    period_s: float = 600.0
    step: int = 10
    cap: int = 1000

    def bonus(self, waited_s: float) -> int:
        return min(self.cap, int(max(0.0, waited_s) // self.period_s) * self.step)


def effective_priority(job: Pending, now_s: float, aging: Aging) -> int:
    return job.priority + aging.bonus(now_s - job.submitted_at_s)


@dataclass
class Totals:
    """The cluster's capacity, the denominator of every team's shares."""

    gpus: float
    cpus: float
    memory_gib: float


def dominant_share(usage: Sequence[float], totals: Totals) -> float:
    """The largest of a team's shares of GPUs, CPUs and memory (``usage`` in that order)."""
    gpus, cpus, memory = usage
    return max(
        gpus / (totals.gpus or 1), cpus / (totals.cpus or 1), memory / (totals.memory_gib or 1)
    )


def ordered(
    pending: Sequence[Pending],
    now_s: float,
    aging: Aging,
    share_of: Callable[[str], float],
) -> Iterator[Pending]:
    """Pending jobs in scheduling order; ``share_of(team)`` is read afresh at every turn."""
    levels: dict[int, list[Pending]] = defaultdict(list)
    for job in pending:
        levels[effective_priority(job, now_s, aging)].append(job)
    for level in sorted(levels, reverse=True):
        yield from _fair(levels[level], share_of)


def _fair(jobs: list[Pending], share_of: Callable[[str], float]) -> Iterator[Pending]:
    by_team: Mapping[str, deque[Pending]] = _fifo_by_team(jobs)
    heap = [(share_of(team), queue[0].submitted_at_s, team) for team, queue in by_team.items()]
    heapq.heapify(heap)
    while heap:
        _, _, team = heapq.heappop(heap)
        queue = by_team[team]
        yield queue.popleft()
        if queue:
            heapq.heappush(heap, (share_of(team), queue[0].submitted_at_s, team))


def _fifo_by_team(jobs: list[Pending]) -> dict[str, deque[Pending]]:
    out: dict[str, deque[Pending]] = defaultdict(deque)
    for job in sorted(jobs, key=lambda j: (j.submitted_at_s, j.job_id)):
        out[job.team].append(job)
    return out
