"""What a job asks of each node it runs on, flattened once from the job file for fast checks."""

from __future__ import annotations

from dataclasses import dataclass, field

from meshctl.model.job import Job


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
    datasets: frozenset[str] = frozenset()
    # The models as the job wrote them, for messages (``accelerators`` is lower-case).
    accelerator_names: tuple[str, ...] = field(default=(), compare=False)
    # Derived once: the scheduler reads them for every candidate node.
    fractional: bool = field(init=False, compare=False)
    whole_gpus: int = field(init=False, compare=False)
    total_gpus: float = field(init=False, compare=False)

    def __post_init__(self) -> None:
        fractional = 0 < self.gpus < 1
        object.__setattr__(self, "fractional", fractional)
        object.__setattr__(self, "whole_gpus", 0 if fractional else int(self.gpus))
        object.__setattr__(self, "total_gpus", self.gpus * self.nodes)

    @classmethod
    def of(cls, job: Job) -> Request:
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
            datasets=frozenset(d.location for d in job.spec.data),
            accelerator_names=tuple(acc.any_of) if acc else (),
        )


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
