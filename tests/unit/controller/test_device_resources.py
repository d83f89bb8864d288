"""Devices are held in their vendor's Ray resource (the accelerator registry's): a TPU host's
chips as TPU, a Trainium node's NeuronCores as neuron_cores, never as GPU. The embedded pool
declares each node that way, a cloud instance joins that way, the controller counts a node's
devices that way, and a job placed there holds them that way (entrypoint, bundles, Ray Train
workers)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from meshctl.boot.join import parse, ray_args
from meshctl.boot.metadata import Identity
from meshctl.catalog import load_accelerators
from meshctl.controller.deciding.decide import decide
from meshctl.controller.deciding.nodes import nodes as nodes_of
from meshctl.controller.deciding.step import Rules
from meshctl.controller.deciding.world import JobView, World
from meshctl.model.mesh import NodeGroup
from meshctl.pools.local import _shape_args
from meshctl.pools.observed import ObservedNode
from tests import builders
from tests.builders import (
    batch_document,
    job_view,
    local_pool,
    mesh,
    node_group,
    observed_node,
    observed_pool,
    resources,
)

pytestmark = pytest.mark.unit

NOW = 1_800_000_000.0
REGISTRY = load_accelerators()
GROUPS: dict[str, dict[str, Any]] = {
    "gpu": {"gpus": 4, "accelerator": {"model": "H100", "memory_gib": "80GiB"}},
    "mi": {"gpus": 8, "accelerator": {"vendor": "amd", "model": "MI300X", "memory_gib": 192}},
    "tpu": {"gpus": 8, "accelerator": {"vendor": "google", "model": "TPU-v5e", "memory_gib": 16}},
    "trn": {"gpus": 16, "accelerator": {"vendor": "aws", "model": "Trainium", "memory_gib": 32}},
}
# what each node declares to Ray: (GPU, its other device resources)
DECLARED = {
    "gpu": (4, {}),
    "mi": (8, {}),
    "tpu": (0, {"TPU": 8.0}),
    "trn": (0, {"neuron_cores": 32.0}),
}
MESH = mesh(
    local_pool(
        "lab",
        *(node_group(n, cpus=4, memory_gib="16GiB", **g) for n, g in GROUPS.items()),
        checkpoint_storage={"uri": "file:///ckpt"},
    ),
    name="t",
)
RULES = Rules(MESH, {}, None, accelerators=REGISTRY)


def observed(name: str) -> ObservedNode:
    gpus, devices = DECLARED[name]
    return observed_node(
        name, gpus=gpus, cpus=4.0, memory_gib=16.0, accelerator=None, devices=devices
    )


def world(*views: JobView) -> World:
    seen = observed_pool("lab", *(observed(n) for n in GROUPS))
    return builders.world(*views, pools=(seen,), now_s=NOW)


def job(vendor: str, gpus: int, **spec: Any) -> JobView:
    asked = resources(gpus, cpus=1, accelerator={"vendor": vendor})
    return job_view(batch_document(working_dir="/pkg", resources=asked, **spec), at_s=NOW)


@pytest.mark.parametrize(
    ("group", "args"),
    [
        ("gpu", ("--num-gpus=4", {"accelerator_type:H100": 1, "gpu_memory_gib": 320.0})),
        ("mi", ("--num-gpus=8", {"accelerator_type:MI300X": 1, "gpu_memory_gib": 1536.0})),
        ("tpu", ("--num-gpus=0", {"accelerator_type:TPU-v5e": 1, "gpu_memory_gib": 128.0,
                                  "TPU": 8})),
        ("trn", ("--num-gpus=0", {"accelerator_type:Trainium": 1, "gpu_memory_gib": 512.0,
                                  "neuron_cores": 32})),
    ],
    ids=["nvidia-gpus", "amd-gpus", "a-tpu-host-its-chips", "trainium-two-cores-a-chip"],
)  # fmt: skip
def test_the_embedded_pool_declares_each_nodes_devices_in_its_vendors_resource(
    group: str, args: tuple[str, dict[str, float]]
) -> None:
    shape = NodeGroup.model_validate({"name": group, "cpus": 4, "memory_gib": 16, **GROUPS[group]})
    given = _shape_args(shape, group, registry=REGISTRY.spec)
    gpus, resources = args
    assert gpus in given
    assert json.loads(next(a for a in given if a.startswith("--resources="))[12:]) == resources


def test_without_a_registry_every_device_is_a_gpu() -> None:
    shape = NodeGroup.model_validate({"name": "tpu", "cpus": 4, "memory_gib": 16, **GROUPS["tpu"]})
    assert "--num-gpus=8" in _shape_args(shape, "tpu")


def test_a_cloud_instance_joins_with_its_devices_in_their_resource() -> None:
    me = Identity("i-0abc", "us-east-1a", "us-east-1", "10.0.0.5")
    args = parse(["--provider", "aws", "--mesh", "m", "--pool", "p", "--role", "worker",
                  "--secret", "s", "--where", "us-east-1", "--node-type", "trn1.32xlarge",
                  "--gpus", "16", "--accelerator", "Trainium", "--head", "10.0.0.1:6379",
                  "--device-resource", "neuron_cores:2"])  # fmt: skip
    given = ray_args(args, me, 9109)
    assert "--num-gpus=0" in given
    resources = json.loads(next(a for a in given if a.startswith("--resources="))[12:])
    assert resources["neuron_cores"] == 32


def test_the_controller_counts_a_nodes_devices_in_its_vendors_resource() -> None:
    found = {n.name: n.gpus for n in nodes_of(world(), MESH, [], {}, REGISTRY.spec)}
    assert found == {"gpu": 4, "mi": 8, "tpu": 8, "trn": 16}
    without = {n.name: n.gpus for n in nodes_of(world(), MESH, [], {})}
    assert without["tpu"] == 0  # no registry: Ray's GPU count, and a TPU host has none


@pytest.mark.parametrize(
    ("vendor", "gpus", "node", "held"),
    [
        ("nvidia", 2, "gpu", None),
        ("google", 4, "tpu", {"TPU": 4.0}),
        ("aws", 4, "trn", {"neuron_cores": 8.0}),
    ],
    ids=["gpus-as-gpus", "tpu-chips-as-tpu", "trainium-chips-as-neuron-cores"],
)
def test_a_job_holds_its_devices_in_their_resource_and_never_a_gpu_on_a_tpu_or_neuron_node(
    vendor: str, gpus: int, node: str, held: dict[str, float] | None
) -> None:
    [dispatch] = decide(world(job(vendor, gpus)), RULES).dispatches
    assert [a.node for a in dispatch.attempt.detail.allocations] == [node]
    sub = dispatch.submission
    if held is None:
        assert sub.num_gpus == gpus
        return
    assert sub.num_gpus is None
    assert {k: v for k, v in sub.resources.items() if k in held} == held
    assert "GPU" not in sub.resources


def test_a_tpu_jobs_workers_bundles_hold_tpu_not_gpu() -> None:
    [dispatch] = decide(world(job("google", 8, reserve="workers")), RULES).dispatches
    [bundle] = dispatch.attempt.detail.ray_bundles
    assert bundle["TPU"] == 8.0
    assert "GPU" not in bundle


def test_a_trainium_train_jobs_workers_hold_neuron_cores_not_gpus() -> None:
    view = job(
        "aws", 16, kind="train", entrypoint=None,
        train={"loop": "model:train_loop", "workers_per_node": 4},
    )  # fmt: skip
    [dispatch] = decide(world(view), RULES).dispatches
    spec = json.loads(dispatch.submission.runtime_env["env_vars"]["MESHCTL_TRAIN"])
    assert spec["per_worker"]["neuron_cores"] == 8.0  # 4 chips a worker, 2 cores a chip
    assert "GPU" not in spec["per_worker"]
    assert spec["devices"]["visibility"] == "NEURON_RT_VISIBLE_CORES"
    assert dispatch.submission.num_gpus is None
