"""A small, seeded, deterministic PyTorch training loop for Ray Train V2: an example to copy.

It fits an MLP (16 -> 32 -> 1) to synthetic regression data with SGD and momentum, on CPU.
``ray.train`` is used unchanged (``get_context``, ``get_checkpoint``, ``report``,
``Checkpoint.from_directory``, ``torch.prepare_model``), so the loop runs under a plain
``TorchTrainer`` as well as in a meshctl train job (``train.loop: model:train_loop``).

Bitwise deterministic across restarts: the model starts from ``torch.manual_seed(seed)``, the
batch at step ``s`` depends only on (seed, s, rank, world size), and a checkpoint holds the
model, the optimizer (its momentum) and the step. A run that crashes and resumes from its
latest checkpoint ends with exactly the weights of a run that never crashed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import ray.train
import ray.train.torch
import torch
from ray.train import Checkpoint
from torch.nn.parallel import DistributedDataParallel

from meshctl.workload.train import Checkpointing, exporting

SAMPLES, FEATURES, HIDDEN, BATCH = 4096, 16, 32, 64  # BATCH: the global batch, over all ranks
CHECKPOINT_FILE = "checkpoint.pt"


def make_data(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Synthetic regression data: y = sin(x . w) + noise, the same for the same seed."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(SAMPLES, FEATURES, generator=g)
    w = torch.randn(FEATURES, 1, generator=g) / FEATURES**0.5
    return x, torch.sin(x @ w) + 0.1 * torch.randn(SAMPLES, 1, generator=g)


def batch_indices(seed: int, step: int, rank: int, world_size: int) -> torch.Tensor:
    """This rank's contiguous shard of the global batch of ``step``."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + step)
    chosen = torch.randperm(SAMPLES, generator=g)[:BATCH]
    per_rank = BATCH // world_size
    return chosen[rank * per_rank : (rank + 1) * per_rank]


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    return model.module if isinstance(model, DistributedDataParallel) else model


def weights_sha256(model: torch.nn.Module) -> str:
    digest = hashlib.sha256()
    for tensor in unwrap(model).state_dict().values():
        digest.update(tensor.detach().cpu().numpy().tobytes())
    return digest.hexdigest()


def first_time(marker: str | None) -> bool:
    """False once ``marker`` exists, else create it: a fault injected once. No marker: always."""
    if marker and os.path.exists(marker):
        return False
    if marker:
        Path(marker).touch()
    return True


def inject_faults(config: dict[str, Any], step: int, rank: int) -> None:
    """On rank ``fail_rank``: crash at ``fail_at_step``, hang at ``hang_at_step``."""
    if rank != int(config.get("fail_rank", 0)):
        return
    if step == config.get("fail_at_step") and first_time(config.get("fail_marker")):
        print(f"fault injection: rank {rank} exits at step {step}", flush=True)
        os._exit(1)  # a worker crash: no exception, no cleanup
    if step == config.get("hang_at_step") and first_time(config.get("hang_marker")):
        print(f"fault injection: rank {rank} hangs at step {step}", flush=True)
        while True:  # alive, but no more reports (the others wait in theirs)
            time.sleep(60)


def save_and_report(
    metrics: dict[str, Any], state: dict[str, Any], checkpointing: Checkpointing | None
) -> None:
    """Report with a checkpoint: Ray Train copies the folder to the run's storage before
    ``report`` returns, so a temporary one will do. What is timed as the checkpoint's cost is
    the write (``report`` also waits for the other workers and Ray Train's controller)."""
    with tempfile.TemporaryDirectory() as tmp:
        with checkpointing.saving() if checkpointing else contextlib.nullcontext():
            torch.save(state, os.path.join(tmp, CHECKPOINT_FILE))
        ray.train.report(metrics, checkpoint=Checkpoint.from_directory(tmp))


def train_loop(config: dict[str, Any]) -> dict[str, Any] | None:
    """Every worker runs this. Config keys: README.md. Returns (rank 0) where this worker group
    started, the last step, its loss and the weights' hash: Ray Train's ``Result.return_value``;
    with the model and an example batch when the job asks for an export (``train.export``),
    which meshctl takes out before Ray Train sees them."""
    steps = int(config.get("steps", 300))
    lr, seed = float(config.get("lr", 0.05)), int(config.get("seed", 0))
    every = config.get("checkpoint_every_steps")
    delay = float(config.get("step_delay_s", 0.0))
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)

    context = ray.train.get_context()
    rank, world_size = context.get_world_rank(), context.get_world_size()
    x, y = make_data(seed)

    torch.manual_seed(seed)
    model = torch.nn.Sequential(
        torch.nn.Linear(FEATURES, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, 1)
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    start = 0
    checkpoint = ray.train.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as directory:
            state = torch.load(os.path.join(directory, CHECKPOINT_FILE), weights_only=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = state["step"] + 1
    if rank == 0:
        print(f"resumed from step {start - 1}" if start else "starting from scratch", flush=True)
    model = ray.train.torch.prepare_model(model)  # DDP when there are several workers

    # A fixed interval in steps (deterministic), else meshctl's: the job's, or Young/Daly's;
    # and whenever meshctl asks (a spot notice, a preemption, an unhealthy node).
    checkpointing = Checkpointing(interval_s=float("inf") if every else None)
    loss = float("nan")
    for step in range(start, steps):
        inject_faults(config, step, rank)
        mine = batch_indices(seed, step, rank, world_size)
        optimizer.zero_grad()
        batch_loss = torch.nn.functional.mse_loss(model(x[mine]), y[mine])
        batch_loss.backward()  # DDP averages the gradients over the workers
        optimizer.step()
        loss = batch_loss.item()

        metrics = {"step": step, "loss": loss}
        # ``due`` is a collective (rank 0 decides, the others hear it): every rank, every step.
        due = checkpointing.due(step) or bool(every and (step + 1) % int(every) == 0)
        if (due or step == steps - 1) and rank == 0:
            state = {
                "model": unwrap(model).state_dict(),
                "optimizer": optimizer.state_dict(),
                "step": step,
            }
            save_and_report(metrics, state, checkpointing)
        else:
            ray.train.report(metrics)  # every rank reports once a step, a checkpoint or not
        if delay:
            time.sleep(delay)

    if rank != 0:
        return None
    last, sha256 = steps - 1, weights_sha256(model)
    if config.get("output"):
        weights = {k: v.tolist() for k, v in unwrap(model).state_dict().items()}
        out = {"step": last, "sha256": sha256, "weights": weights}
        Path(config["output"]).write_text(json.dumps(out), encoding="utf-8")
    print(f"RESULT: step={last} loss={loss:.6f} sha256={sha256[:16]}", flush=True)
    returned: dict[str, Any] = {"start_step": start, "step": last, "loss": loss, "sha256": sha256}
    if exporting():  # the job asked for `train.export`: the model and a batch it takes
        returned |= {"model": unwrap(model), "example": x[:8]}
    return returned
