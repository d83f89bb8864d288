"""The accelerator registry (``providers/accelerators.yaml``): every accelerator meshctl knows,
as data. Adding one is an entry here, no code.

A vendor says how its devices reach a job: the Ray resource that counts them (``GPU``,
``TPU``, ``neuron_cores``, ``HPU``), the variable that makes only the job's devices visible
to it and whether it names them by index or by UUID, the torch distributed backend, and
whether its devices come in slices of hosts (TPUs). A model says what one device is: its
memory, its interconnect, how many units of its vendor's Ray resource it counts as (a
Trainium chip is two NeuronCores), how many sit on a host of a slice, and its throughput
relative to the registry's reference model (what a fungible request counts in; none: it
cannot meet one).
"""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Literal

from pydantic import Field, model_validator

from meshctl.model.base import DocumentModel, GpuMemoryGiB, Model

VendorName = Annotated[str, Field(pattern=r"^[a-z][a-z0-9-]{0,31}$", examples=["nvidia", "amd"])]
ModelName = Annotated[str, Field(min_length=1, max_length=64, examples=["H100", "MI300X"])]
# a TPU slice's shape: chips along each axis, 2x4 (v5e, v6e) or 2x2x2 (v5p)
SliceShape = Annotated[str, Field(pattern=r"^[1-9][0-9]{0,2}(x[1-9][0-9]{0,2}){1,2}$")]
GPU = "GPU"  # Ray's own resource for GPUs, what a vendor the registry does not know counts in
# what a figure of a model may be marked (the notes say why)
ModelField = Literal["memory_gib", "interconnect", "throughput"]


class Visibility(Model):
    variable: Annotated[str, Field(pattern=r"^[A-Z][A-Z0-9_]*$")] = Field(
        description="the variable that makes only the job's devices visible to it"
    )
    by: Literal["index", "uuid"] = Field(
        "index", description="devices named by their index on the host, or by their UUID"
    )
    instead_of: list[Annotated[str, Field(pattern=r"^[A-Z][A-Z0-9_]*$")]] = Field(
        default_factory=list,
        description="variables Ray sets for the same devices that this one replaces: unset "
        "in the workers (HIP_VISIBLE_DEVICES would number within ROCR's list)",
    )


class Vendor(Model):
    name: VendorName
    ray_resource: Annotated[str, Field(pattern=r"^[A-Za-z][A-Za-z0-9_]*$")] = Field(
        description="the Ray resource its devices are counted in: GPU, TPU, neuron_cores, HPU"
    )
    visibility: Visibility
    torch_backend: Literal["nccl", "gloo", "xla", "hccl"] = Field(
        description="torch.distributed's backend on these devices (RCCL goes by nccl)"
    )
    topology: Literal["node", "slice"] = Field(
        "node", description="slice: devices come in slices of hosts, a job takes whole slices"
    )


class AcceleratorModel(Model):
    vendor: VendorName
    model: ModelName
    memory_gib: GpuMemoryGiB
    interconnect: Annotated[str, Field(min_length=1)] = Field(
        description="between the devices of a host or slice: NVLink, xGMI, ICI, NeuronLink"
    )
    ray_units: Annotated[int, Field(ge=1, le=64)] = Field(
        1, description="units of the vendor's Ray resource one device counts as"
    )
    chips_per_host: Annotated[int, Field(ge=1, le=64)] | None = Field(
        None, description="a slice's devices per host (the topology unit of a sliced vendor)"
    )
    slices: dict[SliceShape, Annotated[int, Field(ge=1, le=4096)]] = Field(
        default_factory=dict,
        description="the slice shapes a job may ask for (accelerator.topology) and the hosts "
        "of each: a job's workers come in whole slices",
    )
    throughput: Annotated[float, Field(gt=0, le=100)] | None = Field(
        None, description="relative to the reference model; none: meets no fungible request"
    )
    uncertain: list[ModelField] = Field(
        default_factory=list, description="figures that may be wrong (the notes say why)"
    )
    notes: str = ""


class AcceleratorsSpec(Model):
    as_of: dt.date
    source: Annotated[str, Field(min_length=1)]
    reference: ModelName = Field(description="the model fungible requests count in")
    cpu_backend: Literal["gloo"] = "gloo"
    vendors: Annotated[list[Vendor], Field(min_length=1)]
    models: Annotated[list[AcceleratorModel], Field(min_length=1)]

    @model_validator(mode="after")
    def _consistent(self) -> AcceleratorsSpec:
        vendors = [v.name for v in self.vendors]
        twice = sorted({v for v in vendors if vendors.count(v) > 1})
        if twice:
            raise ValueError(f"vendors listed twice: {', '.join(twice)}")
        names = [m.model.lower() for m in self.models]
        twice = sorted({m.model for m in self.models if names.count(m.model.lower()) > 1})
        if twice:
            raise ValueError(f"models listed twice: {', '.join(twice)}")
        for m in self.models:
            if m.vendor not in vendors:
                known = ", ".join(vendors)
                raise ValueError(f"model {m.model}: vendor {m.vendor!r} is not listed ({known})")
            vendor = self.vendor(m.vendor)
            if vendor is not None and vendor.topology == "slice" and m.chips_per_host is None:
                raise ValueError(f"model {m.model}: a sliced vendor's model needs chips_per_host")
            for shape, hosts in m.slices.items():
                chips = chips_of(shape)
                if chips % hosts or chips // hosts > (m.chips_per_host or chips):
                    raise ValueError(
                        f"model {m.model}: slice {shape} is {chips} chips, which do not fill"
                        f" {hosts} hosts of at most {m.chips_per_host} chips"
                    )
        reference = self.model(self.reference)
        if reference is None:
            raise ValueError(f"reference {self.reference!r} is not a listed model")
        if reference.throughput != 1.0:
            raise ValueError(f"reference {reference.model}: its throughput must be 1.0")
        return self

    def vendor(self, name: str) -> Vendor | None:
        return next((v for v in self.vendors if v.name == name), None)

    def model(self, name: str) -> AcceleratorModel | None:
        """The model of that name, in any case."""
        return next((m for m in self.models if m.model.lower() == name.lower()), None)

    def counted_in(self, vendor: str | None, model: str | None = None) -> tuple[str, int]:
        """The Ray resource a device of this vendor (and model) is counted in, and how many
        units of it one device is: ``("TPU", 1)`` for a TPU chip, ``("neuron_cores", 2)`` for
        a Trainium chip; ``("GPU", 1)`` for a vendor the registry does not know."""
        found = self.vendor(vendor) if vendor else None
        if found is None:
            return GPU, 1
        known = self.model(model) if model else None
        return found.ray_resource, known.ray_units if known is not None else 1


def chips_of(topology: str) -> int:
    """The chips of a slice shape: 4x4 is 16."""
    chips = 1
    for axis in topology.split("x"):
        chips *= int(axis)
    return chips


class Accelerators(DocumentModel):
    kind: Literal["Accelerators"] = "Accelerators"
    spec: AcceleratorsSpec
