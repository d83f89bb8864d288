"""The TorchTrainer meshctl builds from a train job (built, not fitted: no cluster)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.unit


def spec(tmp_path: Path, **over: Any) -> dict[str, Any]:
    return {
        "loop": "model:train_loop",
        "workers": 4,
        "workers_per_node": 2,
        "min_workers": None,
        "nodes": ["n1", "n2"],
        "node_label": "ray.io/node-id",
        "node_ids": ["id1", "id2"],
        "per_worker": {"CPU": 0.5, "GPU": 1.0, "memory": 2**30},
        "max_failures": 5,
        "keep": 2,
        "config": {"steps": 3},
        "run_name": "job-1",
        "storage": f"file://{tmp_path}",
        "endpoint_url": None,
        **over,
    }


def test_workers_are_pinned_to_the_nodes_meshctl_chose_with_a_stable_run(tmp_path: Path) -> None:
    from meshctl.workload.train.run import trainer

    built = trainer(spec(tmp_path), attempt=2)
    scaling, run = built.scaling_config, built.run_config
    assert scaling.num_workers == 4
    assert [s["ray.io/node-id"] for s in scaling.label_selector] == ["id1", "id1", "id2", "id2"]
    from meshctl.workload.train.run import cuda_here

    if not cuda_here():  # GPUs emulated on CPU nodes: the workers use gloo
        assert scaling.use_gpu is False
        assert "GPU" not in (scaling.resources_per_worker or {})
    else:
        assert scaling.use_gpu is True
        assert scaling.resources_per_worker["GPU"] == 1.0
    assert (run.name, run.storage_path) == ("job-1", str(tmp_path))
    assert run.failure_config.max_failures == 5
    assert run.checkpoint_config.num_to_keep == 2
    assert built.train_loop_config == {"steps": 3}


def test_elastic_workers_range_from_the_minimum_to_all(tmp_path: Path) -> None:
    from meshctl.workload.train.run import trainer

    built = trainer(spec(tmp_path, min_workers=2), attempt=1)
    assert built.scaling_config.num_workers == (2, 4)


def test_no_dataset_manager_is_started_for_a_run_without_datasets(tmp_path: Path) -> None:
    """Ray Train's other callbacks stay; given datasets, its dataset callback stays too."""
    from ray.train.v2._internal.callbacks import DatasetsCallback
    from ray.train.v2.torch.torch_trainer import TorchTrainer

    from meshctl.workload.train.run import Trainer, trainer

    built = trainer(spec(tmp_path), attempt=1)
    assert isinstance(built, Trainer)
    ours = [type(c) for c in built._create_default_callbacks()]
    plain = TorchTrainer(
        built.train_loop_per_worker,
        scaling_config=built.scaling_config,
        run_config=built.run_config,
    )
    theirs = [type(c) for c in plain._create_default_callbacks()]
    assert DatasetsCallback in theirs
    assert DatasetsCallback not in ours
    assert ours == [t for t in theirs if t is not DatasetsCallback]
    given = Trainer(
        built.train_loop_per_worker,
        scaling_config=built.scaling_config,
        run_config=built.run_config,
        datasets={"train": [1, 2, 3]},
    )
    assert DatasetsCallback in [type(c) for c in given._create_default_callbacks()]


@pytest.mark.parametrize(
    ("cuda", "devices", "backend"),
    [
        (False, {"vendor": "amd", "backend": "nccl"}, "gloo"),  # emulated: no device here
        (True, {"vendor": "amd", "backend": "nccl"}, "nccl"),  # RCCL, under torch's name
        (True, {"vendor": "acme", "backend": "xccl"}, "xccl"),  # whatever the registry says
        (True, None, "nccl"),  # no registry entry: CUDA's own
    ],
    ids=["no-device-gloo", "amd-rccl", "a-registry-backend", "no-registry"],
)
def test_the_distributed_backend_is_the_registrys_for_the_nodes_vendor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cuda: bool, devices: Any, backend: str
) -> None:
    from meshctl.workload.train import run

    monkeypatch.setattr(run, "cuda_here", lambda: cuda)
    built = run.trainer(spec(tmp_path, devices=devices), attempt=1)
    assert built.backend_config.backend == backend


@pytest.mark.parametrize(
    ("resource", "backend", "runtime", "held", "expected_backend"),
    [
        ("TPU", "xla", False, {}, "gloo"),  # an emulated TPU host: its placement holds the chips
        ("TPU", "xla", True, {}, "xla"),  # Ray Train's own TPU path pins by its labels: not used
        ("neuron_cores", "xla", False, {"neuron_cores": 4.0}, "gloo"),  # Ray sets the cores
        ("neuron_cores", "xla", True, {"neuron_cores": 4.0}, "xla"),
    ],
    ids=["tpu-emulated", "tpu-with-torch-xla", "neuron-emulated", "neuron-with-torch-xla"],
)
def test_tpu_and_neuron_workers_never_hold_a_gpu(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    resource: str,
    backend: str,
    runtime: bool,
    held: dict[str, float],
    expected_backend: str,
) -> None:
    from meshctl.workload.train import run

    monkeypatch.setattr(run, "runtime_here", lambda r, b: runtime)
    devices = {"vendor": "v", "backend": backend, "resource": resource, "units": 2}
    per_worker = {"CPU": 0.5, resource: 4.0, "memory": 2**30}
    built = run.trainer(spec(tmp_path, devices=devices, per_worker=per_worker), attempt=1)
    scaling = built.scaling_config
    assert not scaling.use_gpu
    others = {k: v for k, v in (scaling.resources_per_worker or {}).items() if k == resource}
    assert others == held
    assert "GPU" not in (scaling.resources_per_worker or {})
    assert built.backend_config.backend == expected_backend
