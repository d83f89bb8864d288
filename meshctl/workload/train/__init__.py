"""Helpers for a Ray Train loop that meshctl runs. All optional: a loop written the normal
Ray Train V2 way (``ray.train.report(metrics, checkpoint=...)``, ``ray.train.get_checkpoint()``)
runs unchanged; these decide *when* to checkpoint.

    from meshctl.workload.train import Checkpointing

    def train_loop(config):
        checkpointing = Checkpointing()          # the job's interval: a duration, or auto
        for step in range(start, steps):
            loss = train_step(step)
            if checkpointing.due(step):          # the same answer on every worker
                with checkpointing.saving():     # measures what a checkpoint costs
                    torch.save(state, f"{tmp}/checkpoint.pt")
                ray.train.report({"step": step, "loss": loss}, checkpoint=...)
            else:
                ray.train.report({"step": step, "loss": loss})

Time the write in ``saving()``, not the ``report``: a report also waits for the other workers
and for Ray Train's controller to collect it (seconds), which is not what a checkpoint costs.

``due`` is true when the interval has passed since the last checkpoint, or when meshctl asks
the job to checkpoint now (its spot instance was given notice, it was preempted: see
``meshctl.workload``). With ``auto`` the interval is Young/Daly's
(``meshctl.lifecycle.checkpointing``, the function the simulator uses too), sqrt(2 * C * MTBF): C
the measured cost of a checkpoint, MTBF the mean time between failures the controller observed on
the job's pool (``MESHCTL_POOL_MTBF_S``). Rank 0 decides and the answer is broadcast (when
``torch.distributed`` is initialized), because ``ray.train.report`` with a checkpoint is a
collective: every worker must make the same call.

Importing this module imports neither Ray nor torch.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Iterator

from meshctl.lifecycle.checkpointing import MAX_INTERVAL_S, MIN_INTERVAL_S, young_daly
from meshctl.workload import checkpoint_requested

__all__ = ["MAX_INTERVAL_S", "MIN_INTERVAL_S", "Checkpointing", "exporting", "young_daly"]

DEFAULT_MTBF_S = 24 * 3600.0  # assumed for a pool with no failure observed yet
DEFAULT_COST_S = 10.0  # assumed when the loop checkpoints without timing it (``saving``)


def exporting() -> str | None:
    """The format the job asked its model exported to (``train.export``: ``"onnx"``), or None
    (no export asked, or not a meshctl job). A loop returns ``{"model": module, "example":
    inputs}`` (rank 0) when this says so: meshctl exports them in the worker and hands Ray
    Train the rest (Ray Train refuses tensors in a return value)."""
    spec = json.loads(os.environ.get("MESHCTL_TRAIN", "{}"))
    found = spec.get("export")
    return str(found) if found else None


class Checkpointing:
    """When to checkpoint: every ``interval_s`` seconds, or Young/Daly's interval (``"auto"``),
    or at once when meshctl asks. Defaults come from the job (``MESHCTL_TRAIN``)."""

    def __init__(
        self,
        interval_s: float | str | None = None,
        mtbf_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        spec = json.loads(os.environ.get("MESHCTL_TRAIN", "{}"))
        chosen = interval_s if interval_s is not None else spec.get("interval", "auto")
        self.auto = chosen == "auto"
        self.fixed_s = None if self.auto else float(chosen)
        self.mtbf_s = mtbf_s or float(os.environ.get("MESHCTL_POOL_MTBF_S") or DEFAULT_MTBF_S)
        self.clock = clock
        self.cost_s: float | None = None  # the last checkpoint's measured cost
        self.last_s = clock()
        self.requested_for: int | None = None  # the attempt a request was honoured for
        self.measured_once = False  # a checkpoint was due once (timed by ``saving`` or not)

    @property
    def interval_s(self) -> float:
        if self.fixed_s is not None:
            return self.fixed_s
        if self.cost_s is None and not self.measured_once:
            return 0.0  # checkpoint once early, to measure what it costs
        return young_daly(self.cost_s or DEFAULT_COST_S, self.mtbf_s)

    def due(self, step: int | None = None) -> bool:
        """Whether to checkpoint now; the same answer on every worker. A yes starts the next
        interval (``saving`` starts it again once the checkpoint is written)."""
        yes = _agree(self._due_here())
        if yes:
            self.last_s, self.measured_once = self.clock(), True
        return yes

    @contextlib.contextmanager
    def saving(self) -> Iterator[None]:
        """Wrap the report that carries a checkpoint: its duration is the checkpoint's cost."""
        started = self.clock()
        yield
        self.cost_s = self.clock() - started
        self.last_s = self.clock()

    def _due_here(self) -> bool:
        if _rank() != 0:
            return False  # rank 0 decides; ``_agree`` tells the others
        request = checkpoint_requested()
        if request is not None and self.requested_for != request.get("attempt"):
            self.requested_for = request.get("attempt")
            return True
        return self.clock() - self.last_s >= self.interval_s


def _rank() -> int:
    with contextlib.suppress(Exception):
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return int(dist.get_rank())
    return int(os.environ.get("RANK", "0"))


def _agree(mine: bool) -> bool:
    """Rank 0's answer, on every rank (one tiny broadcast when there are several)."""
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        return mine
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return mine
    device = "cuda" if dist.get_backend() == "nccl" else "cpu"  # NCCL moves GPU tensors only
    flag = torch.tensor([1 if mine else 0], dtype=torch.int32, device=device)
    dist.broadcast(flag, src=0)
    return bool(flag.item())
