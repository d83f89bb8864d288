"""A fungible request (``accelerator.equivalents``) counts in the registry's reference model
and is met by any model of its class, in as many devices as that model's throughput factor
needs, fastest model first: 8 H100-equivalents are 7 MI300X or 8 H100. Submit works the
options out (or refuses a class with no factor); the scheduler places whichever fits; the
job runs holding what its option holds."""

from __future__ import annotations

from typing import Any

import pytest

from meshctl.app.admission import with_options
from meshctl.catalog import fungible, load_accelerators
from meshctl.controller.deciding.decide import decide
from meshctl.controller.deciding.step import Rules
from meshctl.controller.deciding.world import JobView, World
from meshctl.lifecycle.snapshot import running_of
from meshctl.model import Job
from meshctl.pools.observed import ObservedNode
from meshctl.scheduler import Allocation, Request
from tests import builders
from tests.builders import (
    batch_document,
    job_view,
    local_pool,
    mesh,
    node_group,
    observed_node,
    observed_pool,
)

pytestmark = pytest.mark.unit

NOW = 1_800_000_000.0
REGISTRY = load_accelerators()
GROUPS: dict[str, dict[str, Any]] = {
    "h100": {"gpus": 8, "accelerator": {"model": "H100", "memory_gib": "80GiB"}},
    "mi": {"gpus": 8, "accelerator": {"vendor": "amd", "model": "MI300X", "memory_gib": 192}},
}
MESH = mesh(
    local_pool("lab", *(node_group(n, cpus=8, memory_gib="64GiB", **g) for n, g in GROUPS.items())),
    name="t",
)
RULES = Rules(MESH, {}, None, accelerators=REGISTRY)
KNOWN = {"h100": "H100", "mi300x": "MI300X", "a100": "A100"}


def spec_of(accelerator: dict[str, Any], **spec: Any) -> dict[str, Any]:
    asked = {"cpus": 1, "memory_gib": 1, "accelerator": accelerator}  # in equivalents, no gpus
    return batch_document(resources=asked, **spec)


@pytest.mark.parametrize(
    ("accelerator", "spec", "expected"),
    [
        ({"equivalents": 8, "any_of": ["H100", "MI300X", "A100"]}, {},
         [("MI300X", 7), ("H100", 8), ("A100", 26)]),
        ({"equivalents": 8, "any_of": ["H100", "MI300X"]},
         {"kind": "train", "entrypoint": None,
          "train": {"loop": "m:f", "workers_per_node": 4}},
         [("MI300X", 8), ("H100", 8)]),  # 7 rounded up to whole workers of 2 devices
        ({"equivalents": 8}, {}, [("MI300X", 7), ("H100", 8), ("A100", 26)]),  # what is here
        ({"equivalents": 8, "vendor": "amd"}, {}, [("MI300X", 7)]),
        ({"equivalents": 2, "any_of": ["L4"]}, {}, [("L4", 17)]),
    ],
    ids=["any-of-fastest-first", "whole-workers", "every-model-the-mesh-has", "of-a-vendor",
         "a-slow-model-many-devices"],
)  # fmt: skip
def test_the_options_of_a_fungible_request(
    accelerator: dict[str, Any], spec: dict[str, Any], expected: list[tuple[str, int]]
) -> None:
    job = Job.model_validate(spec_of(accelerator, **spec))
    found, problems = fungible.options(job.spec, REGISTRY.spec, KNOWN)
    assert problems == []
    assert [(o.model, o.gpus) for o in found] == expected
    assert job.spec.resources.gpus == accelerator["equivalents"]  # counted in equivalents


@pytest.mark.parametrize(
    ("accelerator", "expected"),
    [
        ({"equivalents": 8, "any_of": ["H100", "Gaudi"]},
         [(("resources", "accelerator", "any_of", 1),
           "expected models with a throughput factor in the accelerator registry for a"
           " fungible request (equivalents of H100), got 'Gaudi', which has none")]),
        ({"equivalents": 8, "vendor": "intel"},
         [(("resources", "accelerator", "equivalents"),
           "expected a class of models with throughput factors (any_of, or models of vendor"
           " intel the mesh or catalogs have) for equivalents of H100; there is none")]),
    ],
    ids=["a-model-with-no-factor", "a-class-with-no-factor"],
)  # fmt: skip
def test_a_fungible_class_with_no_factor_is_refused(
    accelerator: dict[str, Any], expected: list[tuple[tuple[Any, ...], str]]
) -> None:
    job = Job.model_validate(spec_of(accelerator))
    assert fungible.options(job.spec, REGISTRY.spec, KNOWN) == ([], expected)


def test_gpus_beside_equivalents_is_refused() -> None:
    raw = spec_of({"equivalents": 8})
    raw["spec"]["resources"]["gpus"] = 4
    with pytest.raises(ValueError, match="leave gpus out"):
        Job.model_validate(raw)


def observed(name: str, in_use: float = 0.0) -> ObservedNode:
    return observed_node(
        name, gpus=8, cpus=8.0, memory_gib=64.0, accelerator=None, gpus_in_use=in_use
    )


def world(busy: str | None) -> tuple[World, JobView]:
    """A fungible job of 8 H100-equivalents, options worked out as submit does; ``busy``: a
    node whose GPUs other work holds."""
    job = with_options(
        Job.model_validate(spec_of({"equivalents": 8, "any_of": ["H100", "MI300X"]})),
        {}, MESH, REGISTRY,
    )  # fmt: skip
    view = job_view(job.model_dump(mode="json"), at_s=NOW)
    seen = observed_pool("lab", *(observed(n, 6.0 if n == busy else 0.0) for n in GROUPS))
    return builders.world(view, pools=(seen,), now_s=NOW), view


@pytest.mark.parametrize(
    ("busy", "node", "gpus"),
    [(None, "mi", 7), ("mi", "h100", 8), ("h100", "mi", 7)],
    ids=[
        "both-free-the-fastest-model",
        "met-by-h100s-when-the-mi300xs-are-taken",
        "met-by-mi300xs-when-the-h100s-are-taken",
    ],
)
def test_a_fungible_request_is_met_by_another_model_in_its_own_count(
    busy: str | None, node: str, gpus: int
) -> None:
    w, view = world(busy)
    [dispatch] = decide(w, RULES).dispatches
    [alloc] = dispatch.attempt.detail.allocations
    assert (alloc.node, alloc.gpus()) == (node, gpus)
    sub = dispatch.submission
    assert sub.num_gpus == gpus  # the entrypoint holds what its option holds
    assert sub.runtime_env["env_vars"]["MESHCTL_GPUS_PER_NODE"] == f"{gpus}"
    placed = Allocation(alloc.node, alloc.gpu_indices, 1.0, 1.0, 1.0, 0.0)
    request = Request.of(view.job)
    running = running_of("j", "t", 0, "lab", (placed,), request, NOW, None)
    assert running.request.gpus == gpus  # its team is charged what it holds
    assert running.request.options == ()


def test_when_no_option_fits_each_says_why() -> None:
    raw = spec_of({"equivalents": 16, "any_of": ["H100", "MI300X"]})
    job = with_options(Job.model_validate(raw), {}, MESH, REGISTRY)
    view = job_view(job.model_dump(mode="json"), at_s=NOW, job=job)
    seen = observed_pool("lab", *(observed(n) for n in GROUPS))
    step = decide(builders.world(view, pools=(seen,), now_s=NOW), RULES)
    [decision] = step.decisions
    assert decision.outcome == "unschedulable"
    assert "no option fits (as 13 x MI300X: needs 13 GPUs per node" in decision.summary
    assert "; as 16 x H100: needs 16 GPUs per node" in decision.summary
