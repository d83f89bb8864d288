"""The typed models of the files users keep in git (pure: no I/O)."""

from __future__ import annotations

from typing import Final

from meshctl.model.base import API_VERSION, Metadata, Model
from meshctl.model.catalog import Catalog, InstanceType, RegionPrice
from meshctl.model.job import Job, JobSpec, Resources
from meshctl.model.mesh import AwsPool, GcpPool, LocalPool, Mesh, NodeGroup, Pool, RayPool

Document = Mesh | Job | Catalog

KINDS: Final[dict[str, type[Mesh] | type[Job] | type[Catalog]]] = {
    "Mesh": Mesh,
    "Job": Job,
    "Catalog": Catalog,
}

__all__ = [
    "API_VERSION",
    "KINDS",
    "AwsPool",
    "Catalog",
    "Document",
    "GcpPool",
    "InstanceType",
    "Job",
    "JobSpec",
    "LocalPool",
    "Mesh",
    "Metadata",
    "Model",
    "NodeGroup",
    "Pool",
    "RayPool",
    "RegionPrice",
    "Resources",
]
