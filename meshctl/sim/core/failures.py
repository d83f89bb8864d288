"""Node failures, repairs, and what a checkpointed job loses: the simulator's fault model.

Failures hit each on-prem node independently, exponentially distributed with the node's
MTBF; a failed node is out for a repair time drawn from the preset's distribution. Presets:

- ``stepfun``: the StepFun GPU-server fault trace (InfiniteHBD, SIGCOMM'25; 584 faults on
  400 servers over 348 days: per-node MTBF about 239 days) with its repair times sampled
  from the trace itself (median 0.85 days). Built by the caller from the trace file
  (``meshctl.sim.run.traces.stepfun_failures``), since reading it is I/O.
- ``llama3``: Meta's Llama 3 pre-training (Dubey et al., 2024, section 3.3.4): 419
  unexpected interruptions in 54 days on 16,384 GPUs, i.e. one per 2,111 GPU-days, so an
  8-GPU node fails every 264 days. The paper gives no repair times; the log-normal fitted to
  the StepFun trace's median (0.85 d) and mean (5.5 d) stands in.

A job's checkpoints: every ``interval`` seconds of computing it writes one, which takes
``cost`` seconds of wall time during which it makes no progress; a failure loses what it
computed since the last finished checkpoint. With no interval given, the interval is
Young/Daly's (``meshctl.lifecycle.checkpointing.young_daly``), the function the jobs meshctl
runs use too, so production and the simulator checkpoint alike.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from meshctl.lifecycle.checkpointing import young_daly

DAY_S = 86_400.0


@dataclass(frozen=True, slots=True)
class FailureModel:
    name: str
    node_mtbf_s: float
    repair_samples_s: tuple[float, ...] = ()  # drawn uniformly when given
    repair_median_s: float = 0.85 * DAY_S  # otherwise log-normal with this median and mean
    repair_mean_s: float = 5.5 * DAY_S

    def repair_s(self, rng: random.Random) -> float:
        if self.repair_samples_s:
            return rng.choice(self.repair_samples_s)
        mu = math.log(self.repair_median_s)
        sigma = math.sqrt(2.0 * math.log(max(self.repair_mean_s / self.repair_median_s, 1.0)))
        return rng.lognormvariate(mu, sigma)


LLAMA3 = FailureModel("llama3", node_mtbf_s=54 * DAY_S * 16_384 / 8 / 419)


def from_fault_trace(
    name: str, nodes: int, days: float, repairs_s: tuple[float, ...], faults: int | None = None
) -> FailureModel:
    """A preset from a fault trace: ``faults`` faults (default: one per repair) on ``nodes``
    nodes watched for ``days``; repair times drawn from ``repairs_s``."""
    count = len(repairs_s) if faults is None else faults
    if not repairs_s or count <= 0:
        raise ValueError(f"{name}: the fault trace has no faults")
    return FailureModel(name, nodes * days * DAY_S / count, tuple(sorted(repairs_s)))


@dataclass(frozen=True, slots=True)
class Checkpoints:
    """How jobs checkpoint in the simulation.

    ``interval_s``: seconds of computing between checkpoints; None means Young/Daly from
    ``cost_s`` and the job's MTBF (the node MTBF over its node count), or no checkpoints
    when no failures are simulated. ``restart_s``: wall time a restarted attempt spends
    before it computes again (rescheduling, start-up, loading the checkpoint)."""

    interval_s: float | None = None
    cost_s: float = 60.0
    restart_s: float = 300.0

    def interval_for(self, nodes: int, node_mtbf_s: float | None) -> float:
        if self.interval_s is not None:
            return self.interval_s
        if node_mtbf_s is None:
            return math.inf
        return young_daly(self.cost_s, node_mtbf_s / max(nodes, 1))


@dataclass(frozen=True, slots=True)
class Segment:
    """One attempt's timeline: ``restart_s`` of start-up, then rounds of ``interval_s`` of
    computing and ``cost_s`` of writing a checkpoint, until ``compute_s`` is done (no
    checkpoint after the last round)."""

    restart_s: float
    compute_s: float  # wall seconds of computing this attempt needs to finish
    interval_s: float
    cost_s: float

    @property
    def checkpoints(self) -> int:
        if math.isinf(self.interval_s) or self.compute_s <= 0:
            return 0
        return max(0, math.ceil(self.compute_s / self.interval_s - 1e-9) - 1)

    @property
    def wall_s(self) -> float:
        return self.restart_s + self.compute_s + self.checkpoints * self.cost_s

    def saved_at(self, elapsed_s: float) -> tuple[float, int]:
        """(computing saved by the last finished checkpoint, checkpoints finished) after
        ``elapsed_s`` of this attempt."""
        if math.isinf(self.interval_s):
            return 0.0, 0
        rounds = (elapsed_s - self.restart_s) // (self.interval_s + self.cost_s)
        done = int(min(max(rounds, 0), self.checkpoints))
        return done * self.interval_s, done

    def computed_at(self, elapsed_s: float) -> tuple[float, int]:
        """(computing done, checkpoints finished) after ``elapsed_s`` of this attempt."""
        active = elapsed_s - self.restart_s
        if active <= 0:
            return 0.0, 0
        if math.isinf(self.interval_s):
            return min(active, self.compute_s), 0
        round_s = self.interval_s + self.cost_s
        rounds = int(min(active // round_s, self.checkpoints))
        rest = active - rounds * round_s
        return min(rounds * self.interval_s + min(rest, self.interval_s), self.compute_s), rounds
