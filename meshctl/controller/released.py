"""GPUs meshctl's own attempts gave back a moment ago, per node.

Ray's node summary (what ``RayPoolClient`` reads as the GPUs taken on each node, by any work)
is refreshed every few seconds: for that long after a job ends, it still counts the job's
GPUs as taken. The controller takes the GPUs Ray counts beyond its own jobs' holds for other
work; without this, a node stayed full for 3 to 5 s after each of its jobs ended, and the
next job waited for the summary to catch up. An attempt seen active last cycle and not this
one gave its GPUs back now; they are left out of the other work for ``RELEASE_LAG_S``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from meshctl.state import ACTIVE_ATTEMPT, AttemptRecord

RELEASE_LAG_S = 10.0  # longer than Ray's node summary takes to see a job's GPUs freed


class Released:
    def __init__(self) -> None:
        self._holding: dict[str, AttemptRecord] = {}  # active last cycle, by id
        self._given: list[tuple[float, str, float]] = []  # (when, "pool/node", GPUs)

    def update(self, attempts: Iterable[AttemptRecord], now_s: float) -> dict[str, float]:
        """The attempts now (the active ones count); per "pool/node", the GPUs given back
        within ``RELEASE_LAG_S``."""
        holding = {a.id: a for a in attempts if a.state in ACTIVE_ATTEMPT}
        for gone in self._holding.keys() - holding.keys():
            attempt = self._holding[gone]
            self._given += [(now_s, f"{attempt.pool}/{hold.node}", hold.gpus())
                            for hold in attempt.detail.allocations]  # fmt: skip
        self._holding = holding
        self._given = [g for g in self._given if now_s - g[0] < RELEASE_LAG_S]
        released: dict[str, float] = defaultdict(float)
        for _, node, gpus in self._given:
            released[node] += gpus
        return dict(released)
