"""The scheduler's output: actions for the controller to apply, and a decision per job.

Every decision explains itself: how many nodes each filter turned away and why, the resource
that ran out, and the top candidates' per-scorer scores; ``summary`` is the one line people see
("pending: 1,250 nodes; 1,100 lack 8 GPUs free; 150 cordoned; burst not allowed: ...").
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal

from meshctl.scheduler.snapshot import Allocation

Status = Literal["placed", "pending", "preempting", "provisioning", "unschedulable"]
# what keeps a job from running other than GPUs being busy: its team's quota, the policies
# (every pool denied it, an undefined class), its size (no pool it may use could ever hold it);
# no wait is forecast for it
Blocker = Literal["quota", "policy", "size"]


def _no_counts() -> Counter[str]:
    """An empty ``Counter`` without running ``Counter.__init__`` (Python code, with nothing
    to count): a cycle makes one for every decision, a hundred thousand in a large one."""
    return Counter.__new__(Counter)


@dataclass(frozen=True, slots=True)
class Place:
    job_id: str
    pool: str
    allocations: tuple[Allocation, ...]
    score: float
    backfill: bool = False  # placed around a reservation held for a job ahead of it


@dataclass(frozen=True, slots=True)
class Preempt:
    victim_job_id: str
    for_job_id: str
    grace_s: float
    rule: str | None


@dataclass(frozen=True, slots=True)
class Shrink:
    """An elastic job lends its node ``node`` to ``for_job_id``: it is asked to checkpoint,
    stopped after its grace and runs on with one worker fewer (a loan, given back later)."""

    victim_job_id: str
    for_job_id: str
    node: str
    grace_s: float
    rule: str | None


@dataclass(frozen=True, slots=True)
class Grow:
    """A running elastic job below its size grows onto these nodes: checkpointed, stopped
    and resumed with their workers added (the nodes are held for it meanwhile)."""

    job_id: str
    pool: str
    allocations: tuple[Allocation, ...]


@dataclass(frozen=True, slots=True)
class Provision:
    job_id: str
    pool: str
    node_type: str
    count: int
    spot: bool
    usd_per_hour: float


@dataclass(frozen=True, slots=True)
class Evict:
    job_id: str
    reason: str


Action = Place | Preempt | Shrink | Grow | Provision | Evict


@dataclass(frozen=True, slots=True)
class Candidate:
    nodes: tuple[str, ...]
    total: float
    scores: tuple[tuple[str, float], ...]  # (scorer, score) before weighting
    # Of the job's data sets that give a size: the GiB held whole on the candidate's node (for
    # a gang, on its node holding least: it computes once its slowest node has its data), and
    # the GiB in all. None: the job has no data sets.
    data_local_gib: float | None = None
    data_gib: float | None = None


@dataclass
class Decision:
    job_id: str
    status: Status
    reason: str = ""
    nodes_considered: int = 0
    filtered: Counter[str] = field(default_factory=_no_counts)  # "lacks 8 GPUs free" -> nodes
    exhausted: str | None = None  # the dimension most nodes ran out of
    candidates: tuple[Candidate, ...] = ()
    notes: list[str] = field(default_factory=list)  # burst, quota, preemption remarks
    blocked_by: Blocker | None = None

    def summary(self) -> str:
        head = f"{self.status}"
        if self.status == "placed" and self.candidates:
            return f"placed on {', '.join(self.candidates[0].nodes)}"
        parts = [head + (f": {self.reason}" if self.reason else "")]
        if self.nodes_considered:
            parts.append(f"{self.nodes_considered:,} nodes")
            parts += [f"{n:,} {why}" for why, n in self.filtered.most_common()]
        parts += self.notes
        return "; ".join(parts)

    def explanation(self) -> dict[str, Any]:
        """The decision as plain data (lists and maps of numbers and text): what the
        controller records for it and what ``-o json`` shows of it."""
        return {
            "status": self.status,
            "reason": self.reason,
            "nodes_considered": self.nodes_considered,
            "filtered": dict(self.filtered),
            "exhausted": self.exhausted,
            "candidates": [
                {
                    "nodes": list(c.nodes),
                    "total": c.total,
                    "scores": dict(c.scores),
                    "data_local_gib": c.data_local_gib,
                    "data_gib": c.data_gib,
                }
                for c in self.candidates
            ],
            "notes": list(self.notes),
        }


@dataclass
class Plan:
    now_s: float
    actions: list[Action] = field(default_factory=list)
    decisions: dict[str, Decision] = field(default_factory=dict)
    # the queued job backfill holds nodes for (next in line): its id -> those "pool/node"s
    reserved: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def placed(self) -> list[Place]:
        return [a for a in self.actions if isinstance(a, Place)]

    def of(self, kind: type[Action]) -> list[Action]:
        return [a for a in self.actions if isinstance(a, kind)]
