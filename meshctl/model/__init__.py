"""The typed models of the files users keep in git (pure: no I/O)."""

from __future__ import annotations

from typing import Final

from meshctl.model.accelerators import Accelerators
from meshctl.model.base import API_VERSION, Metadata, Model
from meshctl.model.catalog import Catalog, InstanceType, RegionPrice
from meshctl.model.job import Job, JobSpec, Resources
from meshctl.model.mesh import AwsPool, GcpPool, LocalPool, Mesh, NodeGroup, Pool, RayPool
from meshctl.model.meshstate import MeshState
from meshctl.model.policy import Policy
from meshctl.model.policytest import PolicyTest

Document = Mesh | Job | Catalog | Accelerators | Policy | MeshState | PolicyTest

KINDS: Final[dict[str, type[Document]]] = {
    "Mesh": Mesh,
    "Job": Job,
    "Catalog": Catalog,
    "Accelerators": Accelerators,
    "Policy": Policy,
    "MeshState": MeshState,
    "PolicyTest": PolicyTest,
}

__all__ = [
    "API_VERSION",
    "KINDS",
    "Accelerators",
    "AwsPool",
    "Catalog",
    "Document",
    "GcpPool",
    "InstanceType",
    "Job",
    "JobSpec",
    "LocalPool",
    "Mesh",
    "MeshState",
    "Metadata",
    "Model",
    "NodeGroup",
    "Policy",
    "PolicyTest",
    "Pool",
    "RayPool",
    "RegionPrice",
    "Resources",
]
