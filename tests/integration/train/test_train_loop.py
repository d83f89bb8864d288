"""The example train loop (examples/train/model.py) under real Ray Train V2, on a local Ray
instance, without meshctl's controller: a worker that crashes mid-run is restarted from the
latest checkpoint, and the run ends with bitwise the same weights as one that never crashed.

Ray Train's controller takes at most one report per worker per poll (every 2 s by default) and
the loop reports every step, so the module's Ray instance polls every 0.05 s.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import ray
import torch
from ray.train import CheckpointConfig, FailureConfig, Result, RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer

from tests.conftest import ROOT

pytestmark = pytest.mark.integration

EXAMPLE = ROOT / "examples" / "train"
STEPS, EVERY, FAIL_AT = 40, 10, 25

sys.path.insert(0, str(EXAMPLE))
train_loop = importlib.import_module("model").train_loop


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    """A Ray instance of this test's own: ``address="local"`` starts one even where RAY_ADDRESS
    or another cluster on the machine would be found. Its workers start in the example's
    folder (as a meshctl job's do in its working_dir), so ``model`` imports there too."""
    ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        runtime_env={
            "working_dir": str(EXAMPLE),
            "env_vars": {
                "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.05",
                # a failure a year: Young/Daly's interval is minutes even for a 1 ms
                # checkpoint, so auto checkpoints only at once and at the end, however busy
                # the machine
                "MESHCTL_POOL_MTBF_S": str(365 * 24 * 3600),
            },
        },
    )
    try:
        yield
    finally:
        ray.shutdown()


def fit(storage: Path, name: str, **config: Any) -> Result:
    trainer = TorchTrainer(
        train_loop,
        train_loop_config={"steps": STEPS, "checkpoint_every_steps": EVERY, **config},
        scaling_config=ScalingConfig(num_workers=2, resources_per_worker={"CPU": 0.5}),
        run_config=RunConfig(
            name=name,
            storage_path=str(storage),
            failure_config=FailureConfig(max_failures=2),
            checkpoint_config=CheckpointConfig(num_to_keep=3),
        ),
    )
    result = trainer.fit()
    assert result.error is None
    return result


@pytest.fixture(scope="module")
def clean(local_ray: None, tmp_path_factory: pytest.TempPathFactory) -> Result:
    """Seed 0, never interrupted: the weights every other seed-0 run must end with."""
    result = fit(tmp_path_factory.mktemp("clean"), "clean")
    assert result.return_value["start_step"] == 0
    return result


def test_a_worker_crash_resumes_from_the_latest_checkpoint_with_identical_weights(
    clean: Result, tmp_path: Path
) -> None:
    marker, output = tmp_path / "crashed-once", tmp_path / "weights.json"
    crashed = fit(
        tmp_path,
        "crashed",
        output=str(output),
        fail_at_step=FAIL_AT,
        fail_rank=0,
        fail_marker=str(marker),
    )

    assert marker.exists()  # rank 0 did exit at step 25
    # The worker group that finished resumed from the step-19 checkpoint: steps 20-24 redone.
    resumed_from = crashed.return_value["start_step"] - 1
    assert resumed_from == 19
    assert FAIL_AT - resumed_from <= EVERY
    assert crashed.return_value["sha256"] == clean.return_value["sha256"]

    assert crashed.metrics["step"] == STEPS - 1
    assert crashed.checkpoint is not None
    with crashed.checkpoint.as_directory() as directory:
        state = torch.load(Path(directory) / "checkpoint.pt", weights_only=True)
    assert state["step"] == STEPS - 1
    assert set(state["optimizer"]["state"]) == {0, 1, 2, 3}  # a momentum buffer per tensor

    # The output file: the final weights, and the hash over their bytes in key order.
    out = json.loads(output.read_text(encoding="utf-8"))
    digest = hashlib.sha256()
    for weights in out["weights"].values():
        digest.update(torch.tensor(weights, dtype=torch.float32).numpy().tobytes())
    assert (out["step"], out["sha256"]) == (STEPS - 1, clean.return_value["sha256"])
    assert digest.hexdigest() == out["sha256"]


def test_another_seed_gives_other_weights_with_meshctls_checkpointing(
    clean: Result, tmp_path: Path
) -> None:
    """Without ``checkpoint_every_steps`` the loop asks ``meshctl.workload.train.Checkpointing`` (a
    collective over both workers): ``auto`` checkpoints at once to measure the cost, then on
    Young/Daly's interval (far longer than this run), and the loop at its last step."""
    other = fit(tmp_path, "other-seed", seed=1, checkpoint_every_steps=None)

    assert other.return_value["sha256"] != clean.return_value["sha256"]
    steps = [metrics["step"] for _, metrics in other.best_checkpoints or []]
    assert steps[0] == 0
    assert steps[-1] == STEPS - 1
