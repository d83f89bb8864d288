"""A scenario of the differential check: a small mesh, its policies, jobs and world events.

One scenario gives both sides the same inputs: the mesh file (an on-prem ``local`` pool, and
an ``aws`` pool when it bursts, priced from the shipped AWS catalog), the policy files, the
jobs (as the simulator's ``SimJob``; the controller submits the job file the simulator
stands them for, as a Ray Train job with checkpoint storage, so that it records its
checkpoints where the controller reads them), node failures and spot notices at set times.
The jobs checkpoint every ``checkpoint_s`` of work at no cost and restart at no cost, on
both sides.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from meshctl.model.catalog import Catalog
from meshctl.model.job import Job
from meshctl.model.mesh import Mesh
from meshctl.policy.compiled import PolicySet, Source, compile_policies
from meshctl.sim.core.workload import SimJob, job_document

EPOCH_S = 1_798_761_600.0  # 2027-01-01T00:00:00Z: both clocks start here
AWS_TYPE = "g6.xlarge"  # 1 L4 GPU, 4 vCPUs, 16 GiB, in the shipped catalog
HEAD_TYPE = "m7i.large"  # a head type of the shipped catalog
CPUS_PER_GPU, MEMORY_GIB_PER_GPU = 2.0, 8.0


@dataclass(frozen=True, slots=True)
class Cloud:
    """The aws pool's settings for one scenario."""

    max_nodes: int = 4
    spot: bool = False
    idle_s: float = 60.0
    provision_s: float = 30.0
    notice_s: float = 60.0
    discount_pct: float = 0.0
    head: bool = False  # the pool names a head_node_type: its cluster's head of its own


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    jobs: tuple[SimJob, ...]
    nodes: int = 2  # on-prem nodes, n1.. (racks of two)
    gpus: int = 4  # per on-prem node
    policies: str | None = None  # a Policy's spec, as YAML
    cloud: Cloud | None = None
    failures: tuple[tuple[float, str, float], ...] = ()  # (time, node, repair s)
    notices: tuple[tuple[float, int], ...] = ()  # (time, n-th instance launched in aws)
    tick_s: float = 10.0
    checkpoint_s: float = 100.0
    until_s: float = 20_000.0
    notes: Mapping[str, Any] = field(default_factory=dict)
    grow_grace_s: float | None = None  # the on-prem pool's (mesh.yaml graces.grow_s)

    def mesh(self, checkpoints: str) -> Mesh:
        """The mesh file: ``checkpoints`` is the on-prem pool's checkpoint storage."""
        pools: list[dict[str, Any]] = [
            {
                "name": "onprem",
                "provider": "local",
                "labels": {"tier": "strategic"},
                "checkpoint_storage": {"uri": checkpoints},
                **({"graces": {"grow_s": self.grow_grace_s}} if self.grow_grace_s else {}),
                "nodes": [
                    {
                        "name": f"n{i + 1}",
                        "gpus": self.gpus,
                        "accelerator": {"model": "L4", "memory_gib": "24GiB"},
                        "cpus": CPUS_PER_GPU * self.gpus,
                        "memory_gib": MEMORY_GIB_PER_GPU * self.gpus,
                        "labels": {"rack": f"r{i // 2 + 1}", "switch": "s1"},
                    }
                    for i in range(self.nodes)
                ],
            }
        ]
        if self.cloud is not None:
            c = self.cloud
            pools.append(
                {
                    "name": "aws",
                    "provider": "aws",
                    "region": "us-east-1",
                    "labels": {"tier": "burst"},
                    "endpoint_url": "http://fake",  # emulated: its instances join by the harness
                    "idle_minutes": c.idle_s / 60,
                    "max_nodes": c.max_nodes,
                    "cost": {"discount_pct": c.discount_pct},
                    "checkpoint_storage": {"uri": checkpoints},
                    "node_types": [{"name": AWS_TYPE, "max_nodes": c.max_nodes, "spot": c.spot}],
                    **({"head_node_type": HEAD_TYPE} if c.head else {}),
                }
            )
        return Mesh.model_validate(
            {
                "apiVersion": "meshctl/v1",
                "kind": "Mesh",
                "metadata": {"name": "diff"},
                "spec": {"pools": pools},
            }
        )

    def policy_set(self) -> PolicySet | None:
        if self.policies is None:
            return None
        from meshctl.files import load_text
        from meshctl.model.policy import Policy

        text = "apiVersion: meshctl/v1\nkind: Policy\nmetadata: {name: p}\nspec:\n"
        text += textwrap.indent(textwrap.dedent(self.policies), "  ")
        (loaded,) = load_text(text, f"{self.name}.yaml")
        assert isinstance(loaded.document, Policy)
        return compile_policies([Source(f"{self.name}.yaml", loaded.document, loaded.lines)])

    def job_file(self, job: SimJob, storage: str) -> Job:
        """The job file the controller gets: the simulator's for this job, run as a Ray Train
        job keeping its checkpoints in ``storage``."""
        document = job_document(job, CPUS_PER_GPU, MEMORY_GIB_PER_GPU, "switch")
        spec = document["spec"]
        if job.serve is not None:  # a service: its Serve application, as the simulator's
            return Job.model_validate(document)
        spec.pop("entrypoint", None)
        workers = spec.get("train", {}).get("workers")  # an elastic job's range
        spec["train"] = {"loop": "differential:loop", "max_failures": 0}
        if workers is not None:
            spec["train"]["workers"] = workers
        spec["checkpoint"] = {"storage": storage, "interval": self.checkpoint_s}
        if job.deadline_s is not None:
            spec["limits"]["deadline"] = _iso(EPOCH_S + job.deadline_s)
        return Job.model_validate(document)


def catalogs() -> dict[str, Catalog]:
    from meshctl.catalog import load_catalog

    return {"aws": load_catalog("aws").catalog}


def _iso(t_s: float) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(t_s, dt.UTC).isoformat()
