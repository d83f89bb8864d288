"""Each team's use of the mesh: what fair share (queue.py) and quotas (quota.py) weigh.

A team uses what its running jobs asked for (GPUs, CPUs, memory GiB, GPU memory GiB) plus
what the snapshot counts beside them (``Snapshot.team_usage``). Each sum is the correctly
rounded sum of the jobs' figures (``math.fsum``), not a running float total: it does not
depend on the order of the running jobs, so the controller and the simulator, which list
them in orders of their own, weigh a team alike, and a sum kept from cycle to cycle gives
exactly what one made afresh gives.

On a busy mesh (a thousand jobs running) walking every running job at every cycle costs more
than deciding a quiet cycle. A caller that runs cycle after cycle (the simulator) keeps one
``RunningUsage`` and hands it to ``schedule``: it finds the jobs that came and went since the
last snapshot by identity (an unchanged job is the same ``Running`` object, as the simulator
keeps them; a job that changed is a new one) and charges or refunds only those, in exact
integer arithmetic. ``tests/unit/scheduler/test_usage.py`` holds it to the fresh sum. Pure.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from itertools import compress
from operator import attrgetter, mul

from meshctl.scheduler.request import Request
from meshctl.scheduler.snapshot import Running, Snapshot

_NODES, _GPUS, _CPUS, _MEMORY, _GPU_MEMORY = map(
    attrgetter, ("nodes", "total_gpus", "cpus", "memory_gib", "gpu_memory_gib")
)
Usage = defaultdict[str, list[float]]  # team -> GPUs, CPUs, memory GiB, GPU memory GiB
SCALE = 2**1074  # every finite float times this is an integer: sums of them are exact


def figures(req: Request) -> tuple[float, float, float, float]:
    """A job's whole request as its team's use counts it: GPUs, CPUs, memory GiB, GPU
    memory GiB."""
    return (
        req.total_gpus,
        req.cpus * req.nodes,
        req.memory_gib * req.nodes,
        req.gpu_memory_gib * req.total_gpus,
    )


def team_usage(snap: Snapshot, kept: RunningUsage | None = None) -> Usage:
    """Each team's use now (a team not seen uses nothing); ``kept``: the caller's
    ``RunningUsage``, brought to this snapshot's running jobs, else summed afresh. A new
    dict: the cycle charges the jobs it places to it."""
    usage: Usage = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])
    if kept is not None:
        usage.update(kept.update(snap.running).sums())
    else:
        by_team: dict[str, list[Request]] = defaultdict(list)
        for job in snap.running:
            by_team[job.team].append(job.request)
        usage.update((team, _summed(requests)) for team, requests in by_team.items())
    for team, (team_gpus, gpu_memory) in snap.team_usage.items():
        usage[team][0] += team_gpus
        usage[team][3] += gpu_memory
    return usage


def _summed(requests: list[Request]) -> list[float]:
    """``figures`` summed over ``requests``, each column in C (a thousand jobs run)."""
    nodes, gpus = list(map(_NODES, requests)), list(map(_GPUS, requests))
    return [
        math.fsum(gpus),
        math.fsum(map(mul, map(_CPUS, requests), nodes)),
        math.fsum(map(mul, map(_MEMORY, requests), nodes)),
        math.fsum(map(mul, map(_GPU_MEMORY, requests), gpus)),
    ]


def charge(used: list[float], req: Request, sign: float = 1.0) -> None:
    """Add (``sign=-1``: take off) a job's whole request to a team's use this cycle."""
    for i, value in enumerate(figures(req)):
        used[i] += sign * value


def _exact(value: float) -> int:
    numerator, denominator = value.as_integer_ratio()  # the denominator: a power of two
    return numerator * (SCALE // denominator)


class RunningUsage:
    """The running jobs' use per team, kept exact from one snapshot to the next."""

    def __init__(self) -> None:
        self._held: dict[int, Running] = {}  # by id(): holding a job keeps its id() its own
        self._twice = False  # the last snapshot listed a job twice: sum afresh
        self._sums: dict[str, list[int]] = {}  # team -> its figures times SCALE
        self._jobs: dict[str, int] = {}  # team -> its running jobs: a team with none is dropped

    def update(self, running: Sequence[Running]) -> RunningUsage:
        """Bring the sums to ``running``; returns itself. Each pass over the thousand jobs
        is in C; only those that came or went are charged or refunded in Python."""
        ids = list(map(id, running))
        held = self._held
        if self._twice:
            return self._afresh(running, ids)
        changed = held.keys() ^ ids  # the jobs that went, and those that came
        for key in changed & held.keys():
            self._charge(held.pop(key), -1)
        for job in compress(running, map(changed.__contains__, ids)):
            held[id(job)] = job
            self._charge(job, 1)
        if len(held) != len(ids):  # one job listed twice
            return self._afresh(running, ids)
        return self

    def _afresh(self, running: Sequence[Running], ids: list[int]) -> RunningUsage:
        self._sums, self._jobs = {}, {}
        for job in running:
            self._charge(job, 1)
        self._held = dict(zip(ids, running, strict=True))
        self._twice = len(self._held) != len(ids)
        return self

    def sums(self) -> dict[str, list[float]]:
        """Per team with a job running: its figures, each the correctly rounded exact sum."""
        return {team: [s / SCALE for s in sums] for team, sums in self._sums.items()}

    def _charge(self, job: Running, sign: int) -> None:
        sums = self._sums.setdefault(job.team, [0, 0, 0, 0])
        for i, value in enumerate(figures(job.request)):
            sums[i] += sign * _exact(value)
        count = self._jobs[job.team] = self._jobs.get(job.team, 0) + sign
        if count == 0:
            del self._sums[job.team], self._jobs[job.team]
