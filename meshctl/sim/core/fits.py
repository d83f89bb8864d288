"""Before a run: which of the workload's job shapes no node of the mesh could ever hold.

A trace gives a job its GPUs and nothing else; the simulator asks, for each GPU,
``SimConfig.cpus_per_gpu`` CPUs and ``memory_gib_per_gpu`` GiB of memory (``workload.
job_document``), so a mesh of small nodes may hold none of its jobs. Each shape (GPUs per node,
nodes, and what the job file asks for them) is asked of the scheduler's own rule
(``scheduler.unschedulable.never_fits``) twice: of every pool and node type, no policy
narrowing it (a job that fails this is rejected at its first decision, whatever the policies
say), and of the on-prem pools alone (a job that fails only this can run only where the
policies let it burst). The reasons are the scheduler's, as a rejected job gets them.
Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from meshctl.model.job import Job
from meshctl.scheduler import Request, Snapshot
from meshctl.scheduler.unschedulable import never_fits
from meshctl.sim.core.config import SimConfig, SimMesh
from meshctl.sim.core.workload import SimJob, job_document


@dataclass(frozen=True, slots=True)
class Misfit:
    """The jobs of one shape that a part of the mesh could never hold, and why."""

    jobs: int
    gpus: float  # per node
    nodes: int
    cpus: float  # per node, as the job file asks (the assumption per GPU applied)
    memory_gib: float  # per node, likewise
    reason: str  # the scheduler's: the first dimension no node passes

    def shape(self) -> str:
        """``67 jobs of 1 GPU x 1 node (4 CPUs, 32 GiB memory per node)``."""
        gpus = f"{self.gpus:g} GPU{'' if self.gpus == 1 else 's'}"
        nodes = f"{self.nodes} node{'' if self.nodes == 1 else 's'}"
        jobs = f"{self.jobs} job{'' if self.jobs == 1 else 's'}"
        asks = f"{self.cpus:g} CPUs, {self.memory_gib:g} GiB memory per node"
        return f"{jobs} of {gpus} x {nodes} ({asks})"


@dataclass(frozen=True, slots=True)
class Fit:
    """What the check found: ``never`` no pool could ever hold; ``cloud_only`` no on-prem node
    could, but a cloud node type could (empty when the mesh has no on-prem pool)."""

    jobs: int
    cpus_per_gpu: float
    memory_gib_per_gpu: float
    never: tuple[Misfit, ...]
    cloud_only: tuple[Misfit, ...]

    @property
    def never_jobs(self) -> int:
        return sum(m.jobs for m in self.never)

    @property
    def nothing_fits(self) -> bool:
        return self.jobs > 0 and self.never_jobs == self.jobs

    def assumed(self) -> str:
        return (
            f"assumed per GPU: {self.cpus_per_gpu:g} CPUs and {self.memory_gib_per_gpu:g} GiB "
            "memory (a trace gives GPUs only; --cpus-per-gpu and --memory-gib-per-gpu change it)"
        )


def check(mesh: SimMesh, jobs: Sequence[SimJob], config: SimConfig) -> Fit:
    """Which shapes of ``jobs`` could never run on ``mesh``, anywhere or on-prem; the largest
    groups first."""
    shapes: dict[Request, list[SimJob]] = {}
    for job in jobs:
        shapes.setdefault(_request(job, mesh, config), []).append(job)
    everywhere = Snapshot(0.0, mesh.nodes, mesh.pools, offers=mesh.offers)
    all_pools = frozenset(p.name for p in mesh.pools)
    onprem = tuple(p for p in mesh.pools if not p.cloud)
    local = Snapshot(0.0, mesh.nodes, onprem)
    never, cloud_only = [], []
    for req, members in shapes.items():
        why = never_fits(req, all_pools, everywhere)
        if why is not None:
            never.append(_misfit(req, len(members), why))
            continue
        why = never_fits(req, frozenset(p.name for p in onprem), local) if onprem else None
        if why is not None:
            cloud_only.append(_misfit(req, len(members), why))
    return Fit(
        len(jobs),
        config.cpus_per_gpu,
        config.memory_gib_per_gpu,
        _largest_first(never),
        _largest_first(cloud_only),
    )


def _request(job: SimJob, mesh: SimMesh, config: SimConfig) -> Request:
    """What the scheduler is asked for ``job``: its job file's request, as the engine makes it
    (``engine.Engine._class_of``)."""
    c = config
    document = job_document(job, c.cpus_per_gpu, c.memory_gib_per_gpu, mesh.gang_domain)
    return Request.of(Job.model_validate(document))


def _misfit(req: Request, jobs: int, reason: str) -> Misfit:
    return Misfit(jobs, req.gpus, req.nodes, req.cpus, req.memory_gib, reason)


def _largest_first(misfits: list[Misfit]) -> tuple[Misfit, ...]:
    return tuple(sorted(misfits, key=lambda m: (-m.jobs, m.gpus, m.nodes, m.reason)))


def warning_lines(fit: Fit) -> list[str]:
    """The block shown before a run: what can never fit, what fits only on cloud node types,
    and the assumption; no lines when every shape fits on-prem."""
    lines = []
    if fit.never:
        lines.append(
            f"{fit.never_jobs} of the {fit.jobs} jobs can never fit this mesh and will be rejected:"
        )
        lines += [f"  {m.shape()}: {m.reason}" for m in fit.never]
    if fit.cloud_only:
        count = sum(m.jobs for m in fit.cloud_only)
        lines.append(
            f"{count} of the {fit.jobs} jobs fit no on-prem node, only cloud node types "
            "(they run only where the policies let them burst):"
        )
        lines += [f"  {m.shape()}: {m.reason}" for m in fit.cloud_only]
    if lines:
        lines.append(fit.assumed()[0].upper() + fit.assumed()[1:])
    return lines


def why_nothing_fits(fit: Fit) -> str:
    """One line for a workload none of whose jobs could ever run, after the mesh file's name:
    the largest shape's reason, how many other shapes, the assumption."""
    first = fit.never[0]
    others = len(fit.never) - 1
    more = f"; and {others} other shape{'' if others == 1 else 's'}" if others else ""
    which = (
        "the workload's one job can never"
        if fit.jobs == 1
        else f"none of the workload's {fit.jobs} jobs can ever"
    )
    return f"{which} fit this mesh: {first.shape()}: {first.reason}{more}; {fit.assumed()}"


def figures(fit: Fit) -> dict[str, Any]:
    """The check as the report's ``fit``: the shapes that could never run (``never``) and
    those that fit only on cloud node types (``cloud_only``), each with its jobs and reason;
    the assumption per GPU is the report's ``meta.per_gpu``."""

    def listed(misfits: Sequence[Misfit]) -> list[dict[str, Any]]:
        return [
            {"jobs": m.jobs, "gpus": m.gpus, "nodes": m.nodes, "cpus": m.cpus,
             "memory_gib": m.memory_gib, "reason": m.reason}
            for m in misfits
        ]  # fmt: skip

    return {"never": listed(fit.never), "cloud_only": listed(fit.cloud_only)}
