"""Provider catalogs: instance (AWS) and machine (GCP) types with accelerators and prices.

Catalog data is kept apart from the provider objects that talk to the clouds: the scheduler
reads shapes and prices from here, the adapters launch and terminate.
"""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Literal

from pydantic import Field, model_validator

from meshctl.model.base import (
    Cpus,
    DocumentModel,
    MemoryGiB,
    Model,
    NicGbps,
    UsdPerGiB,
    UsdPerHour,
)
from meshctl.model.mesh import Accelerator


class AcceleratorCount(Accelerator):
    count: Annotated[int, Field(ge=1, le=64)]


class RegionPrice(Model):
    on_demand_usd_per_hour: UsdPerHour
    spot_usd_per_hour: UsdPerHour | None = None
    uncertain: bool = Field(
        False,
        description="the prices may be wrong (the notes say why): shown marked, and as "
        "price_uncertain in JSON",
    )


# Figures of an instance type's shape that a catalog may mark uncertain
ShapeField = Literal["vcpus", "memory_gib", "nic_gbps", "interconnect"]


class InstanceType(Model):
    name: Annotated[str, Field(min_length=1)]
    family: Annotated[str, Field(min_length=1)]
    accelerator: AcceleratorCount
    vcpus: Cpus
    memory_gib: MemoryGiB
    nic_gbps: NicGbps
    interconnect: str = ""
    uncertain: list[ShapeField] = Field(
        default_factory=list, description="shape figures that may be wrong (the notes say why)"
    )
    notes: str = ""
    prices: dict[str, RegionPrice] = Field(
        default_factory=dict, description="list prices by region"
    )

    @property
    def gpus(self) -> int:
        return self.accelerator.count


class HeadType(Model):
    """A small CPU instance type a cloud pool's Ray head runs on (``head_node_type``): it
    takes no work, so only its shape and on-demand prices matter."""

    name: Annotated[str, Field(min_length=1)]
    family: Annotated[str, Field(min_length=1)]
    vcpus: Cpus
    memory_gib: MemoryGiB
    notes: str = ""
    prices: dict[str, RegionPrice] = Field(
        default_factory=dict, description="on-demand list prices by region (a head is never spot)"
    )


class Egress(Model):
    """What the provider charges for a GiB leaving it: the side data leaves pays (ingress is
    free on both clouds). List prices of the first volume tier, dated and sourced on their own:
    a refresh rewrites the catalog's ``source`` but reads no egress prices."""

    internet_usd_per_gib: UsdPerGiB = Field(
        description="out to the internet (another cloud or an on-prem site), first tier"
    )
    inter_region_usd_per_gib: UsdPerGiB = Field(
        description="between two of the provider's regions on one continent (recorded; the "
        "scheduler does not use it yet: a dataset names no region)"
    )
    as_of: dt.date
    source: Annotated[str, Field(min_length=1)]


class CatalogSpec(Model):
    provider: Literal["aws", "gcp"]
    as_of: dt.date
    source: Annotated[str, Field(min_length=1)]
    currency: Literal["USD"] = "USD"
    egress: Egress | None = Field(
        None, description="data transfer out of the provider; none: not known (counted free)"
    )
    instance_types: Annotated[list[InstanceType], Field(min_length=1)]
    head_types: list[HeadType] = Field(
        default_factory=list, description="CPU instance types for cloud pools' Ray heads"
    )

    @model_validator(mode="after")
    def _unique_names(self) -> CatalogSpec:
        names = [t.name for t in self.instance_types] + [t.name for t in self.head_types]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"instance types listed twice: {', '.join(twice)}")
        return self


class Catalog(DocumentModel):
    kind: Literal["Catalog"] = "Catalog"
    spec: CatalogSpec

    def instance_type(self, name: str) -> InstanceType | None:
        return next((t for t in self.spec.instance_types if t.name == name), None)

    def head_type(self, name: str) -> HeadType | None:
        return next((t for t in self.spec.head_types if t.name == name), None)

    def price_uncertain(self, node_type: str, region: str) -> bool:
        """Whether this type's list price in this region is marked uncertain."""
        found = self.instance_type(node_type)
        price = found.prices.get(region) if found else None
        return price is not None and price.uncertain
