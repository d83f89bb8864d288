"""What a job asks of each node it runs on, flattened once from the job file for fast checks.

Its data sets are ``data`` (``DataSet``: location, GiB if the job gives it, home), one per
location. How much each weighs when the scheduler counts bytes (locality) is worked out once
here: its size; a data set without one weighs the mean of the sized ones (1 each when none is
sized), so an unknown size neither dominates nor vanishes.

A data set's home is where moving it out costs (the side data leaves pays egress): ``s3://``
is ``aws`` and ``gs://`` is ``gcp``, unless the job names an ``endpoint_url`` (an
S3-compatible store of its own: on-prem); anything else (a path, ``file://``, ``onprem:``)
is ``onprem``. Regions are not told apart: a job's data set names none.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields, replace

from meshctl.model.job import Dataset, Job

HOMES = ("aws", "gcp", "onprem")


@dataclass(frozen=True, slots=True)
class DataSet:
    location: str
    size_gib: float | None = None  # None: the job gives no size
    home: str = "onprem"  # one of HOMES

    @classmethod
    def of(cls, dataset: Dataset) -> DataSet:
        return cls(
            dataset.location, dataset.size_gib, home_of(dataset.location, dataset.endpoint_url)
        )


def home_of(location: str, endpoint_url: str | None = None) -> str:
    """Where a data set lives, for egress: see the module's docstring."""
    if endpoint_url is None and location.startswith("s3://"):
        return "aws"
    if endpoint_url is None and location.startswith("gs://"):
        return "gcp"
    return "onprem"


@dataclass(frozen=True, slots=True)
class Request:
    """Per node: ``gpus`` whole GPUs, or a fraction of one (``0 < gpus < 1``)."""

    gpus: float
    gpu_memory_gib: float
    accelerators: frozenset[str]  # any of these models; empty: any
    vendor: str | None
    cpus: float
    memory_gib: float
    nic_gbps: float
    nodes: int = 1
    topology: str | None = None  # "rack" or "switch"
    topology_required: bool = False
    data: tuple[DataSet, ...] = ()  # one a location
    # The models as the job wrote them, for messages (``accelerators`` is lower-case).
    accelerator_names: tuple[str, ...] = field(default=(), compare=False)
    # A fungible request: the requests it may be met as (one model each, in the order to try;
    # none of options of their own); this one is the first of them. Empty: just this.
    options: tuple[Request, ...] = ()
    # Derived once: the scheduler reads them for every candidate node.
    fractional: bool = field(init=False, compare=False)
    whole_gpus: int = field(init=False, compare=False)
    total_gpus: float = field(init=False, compare=False)
    datasets: frozenset[str] = field(init=False, compare=False)  # the locations of ``data``
    # (location, weight) per data set: its GiB, or the mean of the sized ones (see above)
    data_weights: tuple[tuple[str, float], ...] = field(init=False, compare=False)
    # The hash, worked out once: a cycle keys its caches by request, a hundred thousand times
    # in a large one, and hashing a dozen fields (frozensets, tuples) each time showed.
    _hash: int = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        fractional = 0 < self.gpus < 1
        object.__setattr__(self, "fractional", fractional)
        object.__setattr__(self, "whole_gpus", 0 if fractional else int(self.gpus))
        object.__setattr__(self, "total_gpus", self.gpus * self.nodes)
        object.__setattr__(self, "datasets", frozenset(d.location for d in self.data))
        object.__setattr__(self, "data_weights", weights(self.data))
        object.__setattr__(self, "_hash", hash(self._compared()))

    def _compared(self) -> tuple[object, ...]:
        """The fields equality compares (every field but the derived ones and the names)."""
        return (
            self.gpus, self.gpu_memory_gib, self.accelerators, self.vendor, self.cpus,
            self.memory_gib, self.nic_gbps, self.nodes, self.topology, self.topology_required,
            self.data, self.options,
        )  # fmt: skip

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple[type[Request], tuple[object, ...]]:
        """Rebuilt by its constructor in another process, where strings hash otherwise."""
        return Request, tuple(getattr(self, f.name) for f in fields(self) if f.init)

    def held(self, gpus_per_node: float) -> Request:
        """The option a fungible request was placed as, by the devices it holds a node (this
        request when it has no options, or none holds as many)."""
        found = (o for o in self.options if abs(o.gpus - gpus_per_node) < 1e-9)
        return next(found, self)

    @classmethod
    def of(cls, job: Job) -> Request:
        request = cls._of(job)
        acc = job.spec.resources.accelerator
        if acc is None or not acc.options:
            return request
        options = tuple(
            replace(
                request,
                gpus=float(o.gpus),
                accelerators=frozenset({o.model.lower()}),
                accelerator_names=(o.model,),
            )
            for o in acc.options
        )
        return replace(options[0], options=options)

    @classmethod
    def _of(cls, job: Job) -> Request:
        res = job.spec.resources
        acc = res.accelerator
        return cls(
            gpus=res.gpus,
            gpu_memory_gib=res.gpu_memory_gib or 0.0,
            accelerators=frozenset(m.lower() for m in acc.any_of) if acc else frozenset(),
            vendor=acc.vendor if acc else None,
            cpus=res.cpus,
            memory_gib=res.memory_gib,
            nic_gbps=res.nic_gbps,
            nodes=res.nodes,
            topology=res.topology.domain if res.topology else None,
            topology_required=bool(res.topology and res.topology.mode == "required"),
            data=data_of(DataSet.of(d) for d in job.spec.data),
            accelerator_names=tuple(acc.any_of) if acc else (),
        )


def data_of(datasets: Iterable[DataSet]) -> tuple[DataSet, ...]:
    """One a location (the first a job lists of it), in the order listed."""
    seen: dict[str, DataSet] = {}
    for found in datasets:
        seen.setdefault(found.location, found)
    return tuple(seen.values())


def weights(data: Sequence[DataSet]) -> tuple[tuple[str, float], ...]:
    """Each data set's weight in bytes counted: its GiB; unsized ones the mean of the sized
    ones, or 1 each when none is sized."""
    sized = [d.size_gib for d in data if d.size_gib is not None]
    mean = sum(sized) / len(sized) if sized else 1.0
    return tuple((d.location, d.size_gib if d.size_gib is not None else mean) for d in data)


def shortfall(
    req: Request, cpus: float, memory_gib: float, nic_gbps: float
) -> tuple[float, str] | None:
    """The first of CPUs, memory and NIC of which a machine with these totals has less than one
    node of ``req`` needs: (what it needs, the unit in words); None if it has enough."""
    for need, has, what in (
        (req.cpus, cpus, "CPUs"),
        (req.memory_gib, memory_gib, "GiB of memory"),
        (req.nic_gbps, nic_gbps, "Gbps of NIC bandwidth"),
    ):
        if need > has + 1e-9:
            return need, what
    return None
