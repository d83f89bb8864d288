"""Idle teardown: a cloud instance nobody uses goes after its pool's ``idle_minutes``.

Per instance, not per pool: an instance is idle from its launch or from the end of the last
job that held it, whichever is later; one that is still joining, that a job holds, or that a
job is placed on this cycle is busy. The first instance given is the head of the pool's Ray
cluster (its own, ``clusters``, idle since it is up or since the last job on any node of the
pool ended, whichever is later: a worker taken back leaves its job the pool's idle time to
come back to the same cluster; else its first worker): it goes only with the last of the
others (a head taken away takes its cluster's nodes with it), workers first, the head last.

The controller asks every cycle, the simulator when an instance's idle time is up; the same
instances give the same answer. Pure: time is an argument.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from meshctl.lifecycle.actions import Teardown


@dataclass(frozen=True, slots=True)
class CloudNode:
    """A live cloud instance as the idle rule sees it."""

    pool: str
    instance_id: str
    idle_since_s: float | None  # None: busy now (joining, held, or placed on this cycle)


def idle(instances: Sequence[CloudNode], idle_s: float, now_s: float) -> list[Teardown]:
    """What of one pool's live ``instances`` (in launch order: the first is the head) goes
    now: idle workers, and the head too when it is idle and the last to stay."""
    if not instances:
        return []
    why = f"idle for {idle_s / 60:g} min"

    def over(node: CloudNode) -> bool:
        return node.idle_since_s is not None and now_s - node.idle_since_s >= idle_s - 1e-9

    head, workers = instances[0], instances[1:]
    going = [w for w in workers if over(w)]
    out = [Teardown(w.pool, w.instance_id, why) for w in reversed(going)]
    if len(going) == len(workers) and over(head):
        out.append(Teardown(head.pool, head.instance_id, why))
    return out
