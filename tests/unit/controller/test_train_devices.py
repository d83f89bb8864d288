"""A train job's workers learn, from the accelerator registry, the torch backend and the
visibility variable of the vendor of the nodes meshctl placed them on."""

from __future__ import annotations

import pytest

from meshctl.catalog import load_accelerators
from meshctl.controller.deciding.dispatch import devices_of
from meshctl.controller.deciding.step import Rules
from tests import builders
from tests.builders import aws_pool, local_pool, node_group

pytestmark = pytest.mark.unit


def rules(vendor: str, model: str, registry: bool = True) -> Rules:
    from meshctl.catalog import load_catalogs

    accelerator = {"vendor": vendor, "model": model, "memory_gib": 80}
    group = node_group("g", count=2, gpus=8, accelerator=accelerator, cpus=8, memory_gib=64)
    mesh = builders.mesh(local_pool("lab", group), aws_pool("burst"))
    catalogs = {f.provider: f.catalog for f in load_catalogs()}
    return Rules(mesh, catalogs, None, accelerators=load_accelerators() if registry else None)


@pytest.mark.parametrize(
    ("vendor", "model", "pool", "expected"),
    [
        ("amd", "MI300X", "lab", {"vendor": "amd", "backend": "nccl",
                                  "visibility": "ROCR_VISIBLE_DEVICES", "visible_by": "uuid",
                                  "instead_of": ["HIP_VISIBLE_DEVICES"],
                                  "resource": "GPU", "units": 1}),
        ("nvidia", "H100", "lab", {"vendor": "nvidia", "backend": "nccl",
                                   "visibility": "CUDA_VISIBLE_DEVICES", "visible_by": "index",
                                   "resource": "GPU", "units": 1}),
        ("google", "TPU-v5e", "lab", {"vendor": "google", "backend": "xla",
                                      "visibility": "TPU_VISIBLE_CHIPS", "visible_by": "index",
                                      "resource": "TPU", "units": 1}),
        ("aws", "Trainium", "lab", {"vendor": "aws", "backend": "xla",
                                    "visibility": "NEURON_RT_VISIBLE_CORES",
                                    "visible_by": "index", "resource": "neuron_cores",
                                    "units": 2}),
        ("amd", "MI300X", "burst", {"vendor": "nvidia", "backend": "nccl",
                                    "visibility": "CUDA_VISIBLE_DEVICES", "visible_by": "index",
                                    "resource": "GPU", "units": 1}),
    ],
    ids=["amd-on-prem-by-uuid", "nvidia-on-prem", "tpu-host", "trainium", "a-cloud-pools-l4s"],
)  # fmt: skip
def test_the_devices_of_the_placed_nodes_come_from_the_registry(
    vendor: str, model: str, pool: str, expected: dict[str, object]
) -> None:
    nodes = ["g-0", "g-1"] if pool == "lab" else ["i-0123"]
    assert devices_of(rules(vendor, model), pool, nodes) == expected


def test_without_a_registry_nothing_is_said() -> None:
    assert devices_of(rules("amd", "MI300X", registry=False), "lab", ["g-0"]) is None
