"""The simulator's model of a job: its attempts, what each computes and saves, and where its
GPU-seconds went.

An attempt's timeline is its ``Segment`` (``failures.py``): a restart, then rounds of
computing and writing a checkpoint. When an attempt ends early it keeps what its last
finished checkpoint saved; a job asked to checkpoint (a preemption's grace, a spot notice)
also keeps what it had computed when asked, if the time it had covers a checkpoint's cost.
GPU-seconds held = useful + slowdown + checkpoints + restarts + lost, per job.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from meshctl.lifecycle.actions import Fail, Leave
from meshctl.scheduler import Allocation, Running
from meshctl.scheduler.snapshot import CheckpointPlan
from meshctl.sim.core.failures import Segment
from meshctl.sim.core.workload import SimJob


@dataclass(slots=True)
class JobResult:
    job: SimJob
    priority: int = 0
    first_start_s: float | None = None
    end_s: float | None = None
    rejected: str | None = None
    failed_reason: str | None = None  # failed for good (deadline, max_runtime, max_restarts)
    pools: set[str] = field(default_factory=set)
    last_pool: str | None = None  # the pool of its latest attempt
    priority_class: str | None = None  # the policies' class for it (its file's, or its kind's)
    attempts: int = 0
    preempted: int = 0
    resized: int = 0  # an elastic job: stopped to lend nodes or to grow back
    failed: int = 0  # attempts ended by a node failure or a spot reclaim
    failures: int = 0  # what max_restarts is judged against (evictions)
    backfilled: int = 0  # attempts started around a reservation held for another job
    held_gpu_s: float = 0.0
    useful_gpu_s: float = 0.0
    lost_gpu_s: float = 0.0
    checkpoint_gpu_s: float = 0.0
    restart_gpu_s: float = 0.0
    slowdown_gpu_s: float = 0.0
    data_stall_gpu_s: float = 0.0  # waiting for its dataset to reach its nodes
    progress_s: float = 0.0  # work done and saved, in seconds at full speed

    def account(
        self,
        wall_s: float,
        work_s: float,
        checkpoints: int,
        restart_s: float,
        speed: float,
        checkpoint_cost_s: float,
        gpus: float | None = None,
        scale: float = 1.0,
        stall_s: float = 0.0,
    ) -> None:
        """``gpus``: what the attempt held (default: the job's); ``scale``: its most nodes
        over those it ran on (an elastic job on fewer: as much work in as many GPU-seconds,
        over a longer time, not a slowdown; ``speed`` includes it); ``stall_s``: of
        ``restart_s``, the time its nodes fetched its dataset."""
        g = self.job.total_gpus if gpus is None else gpus
        held = wall_s * g
        useful = work_s * g * scale
        slow = work_s * (speed - scale) * g
        ckpt = min(checkpoints * checkpoint_cost_s, wall_s) * g
        stall = min(stall_s, restart_s) * g
        restart = restart_s * g - stall
        self.data_stall_gpu_s += stall
        self.held_gpu_s += held
        self.useful_gpu_s += useful
        self.slowdown_gpu_s += slow
        self.checkpoint_gpu_s += ckpt
        self.restart_gpu_s += restart
        self.lost_gpu_s += max(0.0, held - useful - slow - ckpt - restart - stall)


@dataclass(slots=True)
class Attempt:
    job_id: str
    token: int
    pool: str
    allocations: tuple[Allocation, ...]
    started_s: float
    speed: float  # slowdown: wall seconds per work second
    segment: Segment
    running: Running
    scale: float = 1.0  # an elastic job: its most nodes over those it runs on (in speed)
    stall_s: float = 0.0  # of its restart, waiting for its dataset (``data.py``)
    asked_s: float | None = None  # when it was asked to checkpoint (it is leaving)
    stopped_s: float | None = None  # when it stopped working (its GPUs are still held)
    why: Leave | Fail | None = None  # why it is leaving
    lost: tuple[str, ...] = ()  # its nodes that died, to be replaced or left at the next cycle
    # when it stopped working because a node died under it while its driver lives on (its
    # Ray job runs until it is replaced or stopped)
    halted_s: float | None = None
    # a replaced node's: when the controller's attempt began (it goes on through replacements)
    since_s: float | None = None

    @property
    def began_s(self) -> float:
        """When the controller's attempt began: its start, or before a node was replaced."""
        return self.started_s if self.since_s is None else self.since_s

    @property
    def leaving(self) -> bool:
        return self.running.leaving

    def saved(self, at_s: float, cost_s: float) -> tuple[float, int]:
        """(work saved, checkpoints written) if the attempt stops at ``at_s``: its last
        finished checkpoint, or what it had computed when asked to checkpoint when the time
        to ``at_s`` covered a checkpoint's cost."""
        seg, elapsed = self.segment, at_s - self.started_s
        saved, checkpoints = seg.saved_at(elapsed)
        asked = self.asked_s
        if asked is not None and at_s - asked >= cost_s and asked - self.started_s > seg.restart_s:
            computed, rounds = seg.computed_at(asked - self.started_s)
            if computed > saved:
                saved, checkpoints = computed, rounds + 1
        return saved / self.speed, checkpoints


def checkpoint_plan(started_s: float, seg: Segment) -> CheckpointPlan | None:
    """When the attempt's periodic checkpoints finish: the k-th at start + restart +
    k * (interval + cost)."""
    if seg.checkpoints <= 0:
        return None
    every = seg.interval_s + seg.cost_s
    return CheckpointPlan(started_s + seg.restart_s + every, every, seg.checkpoints)
