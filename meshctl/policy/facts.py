"""What policies are evaluated against: a snapshot of the mesh, and the CEL maps built from it.

A snapshot is plain frozen data (no I/O, no clock); the maps are built once per snapshot or
once per job, never per rule.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from meshctl.model.capacity import AcceleratorType, accelerator_types, pool_capacity
from meshctl.model.catalog import Catalog
from meshctl.model.job import Job
from meshctl.model.mesh import Mesh
from meshctl.model.meshstate import MeshState


@dataclass(frozen=True, slots=True)
class PoolFacts:
    name: str
    provider: str
    region: str
    labels: Mapping[str, str]
    accelerators: tuple[str, ...]
    gpus: int
    usd_per_gpu_hour: float | None
    free_gpus: float
    queued_jobs: int = 0
    expected_wait_s: float = 0.0
    spend_usd_month: float = 0.0
    # vendor, model and memory of each kind of accelerator; facts built without the mesh's
    # node groups and the catalogs (tests, benchmarks) may leave it empty
    accelerator_types: tuple[AcceleratorType, ...] = ()

    @property
    def cloud(self) -> bool:
        return self.provider in ("aws", "gcp")

    @property
    def vendors(self) -> tuple[str, ...]:
        return tuple(sorted({a.vendor for a in self.accelerator_types}))


@dataclass(frozen=True, slots=True)
class TeamUsage:
    gpus_in_use: float = 0.0
    gpu_memory_gib_in_use: float = 0.0
    spend_usd_month: float = 0.0


@dataclass(frozen=True, slots=True)
class MeshSnapshot:
    pools: tuple[PoolFacts, ...]
    teams: Mapping[str, TeamUsage] = field(default_factory=dict)

    def pool(self, name: str) -> PoolFacts | None:
        return next((p for p in self.pools if p.name == name), None)

    def team(self, name: str) -> TeamUsage:
        return self.teams.get(name, TeamUsage())


@dataclass(frozen=True, slots=True)
class VictimFacts:
    """A running job that a preemption rule may pick."""

    job: Job
    priority: int
    pool: str
    runtime_s: float
    since_checkpoint_s: float


def mesh_snapshot(
    mesh: Mesh, catalogs: Mapping[str, Catalog], state: MeshState | None = None
) -> MeshSnapshot:
    """The mesh's configured pools at the moment ``state`` describes (idle where it is silent)."""
    moment = state.spec.pools if state else {}
    pools = []
    for pool in mesh.spec.pools:
        cap = pool_capacity(pool, catalogs)
        now = moment.get(pool.name)
        gpus = cap.gpus if now is None or now.gpus is None else now.gpus
        free = gpus if now is None or now.free_gpus is None else now.free_gpus
        pools.append(
            PoolFacts(
                name=pool.name,
                provider=pool.provider,
                region=getattr(pool, "region", ""),
                labels=dict(pool.labels),
                accelerators=cap.accelerators,
                gpus=gpus,
                usd_per_gpu_hour=cap.usd_per_gpu_hour,
                free_gpus=float(free),
                queued_jobs=now.queued_jobs if now else 0,
                expected_wait_s=now.expected_wait_s if now else 0.0,
                spend_usd_month=now.spend_usd_month if now else 0.0,
                accelerator_types=accelerator_types(pool, catalogs),
            )
        )
    teams = {
        name: TeamUsage(t.gpus_in_use, t.gpu_memory_gib_in_use, t.spend_usd_month)
        for name, t in (state.spec.teams.items() if state else ())
    }
    return MeshSnapshot(tuple(pools), teams)


def observed(
    configured: MeshSnapshot,
    free_gpus: Mapping[str, float],
    gpus: Mapping[str, int],
    queued_jobs: int,
    expected_wait_s: Mapping[str, float],
    spend_usd: Mapping[str, float],
    team_spend_usd: Mapping[str, float],
) -> MeshSnapshot:
    """The configured pools as observed now. A pool in ``gpus`` (one with live nodes) takes its
    GPUs, free GPUs and the queue from the observation; one not observed keeps what its file
    says. The controller and the simulator both bind policies to this."""
    pools = []
    for facts in configured.pools:
        seen = facts.name in gpus
        pools.append(
            PoolFacts(
                name=facts.name,
                provider=facts.provider,
                region=facts.region,
                labels=facts.labels,
                accelerators=facts.accelerators,
                gpus=gpus[facts.name] if seen else facts.gpus,
                usd_per_gpu_hour=facts.usd_per_gpu_hour,
                free_gpus=free_gpus.get(facts.name, 0.0) if seen else facts.free_gpus,
                queued_jobs=queued_jobs if seen else 0,
                expected_wait_s=expected_wait_s.get(facts.name, 0.0),
                spend_usd_month=spend_usd.get(facts.name, 0.0),
                accelerator_types=facts.accelerator_types,
            )
        )
    teams = {team: TeamUsage(spend_usd_month=usd) for team, usd in team_spend_usd.items()}
    return MeshSnapshot(tuple(pools), teams)


# --- the CEL maps (see variables.SCHEMA) -------------------------------------------------------


def job_map(job: Job, priority_class: str, fields: frozenset[str] | None = None) -> dict[str, Any]:
    """The job as CEL sees it; only ``fields`` (those the policies read) when given, since
    handing CEL a value costs in proportion to its size."""
    full = _job_map(job, priority_class)
    return full if fields is None else {k: v for k, v in full.items() if k in fields}


def _job_map(job: Job, priority_class: str) -> dict[str, Any]:
    spec, res = job.spec, job.spec.resources
    wanted = res.accelerator
    sets = [
        {
            "name": d.name,
            "location": d.location,
            "residency": d.residency or "",
            "tags": list(d.tags),
            "size_gib": float(d.size_gib or 0.0),
        }
        for d in spec.data
    ]
    return {
        "name": job.metadata.name,
        "kind": spec.kind,
        "team": spec.team,
        "criticality": spec.criticality,
        "priority_class": priority_class,
        "labels": dict(job.metadata.labels),
        "accelerator": {  # what the job asks of each device ("" / [] / 0.0: anything)
            "vendor": (wanted.vendor or "") if wanted else "",
            "models": list(wanted.any_of) if wanted else [],
            "memory_gib": float(res.gpu_memory_gib or 0.0),
        },
        "resources": {  # float(): a field left at its default (gpus: 0) is an int
            "gpus": float(res.gpus),
            "total_gpus": float(res.total_gpus),
            "gpu_memory_gib": float(res.gpu_memory_gib or 0.0),
            "accelerators": list(wanted.any_of) if wanted else [],
            "cpus": float(res.cpus),
            "memory_gib": float(res.memory_gib),
            "nic_gbps": float(res.nic_gbps),
            "nodes": int(res.nodes),
            "topology": res.topology.domain if res.topology else "",
        },
        "data": {
            "tags": sorted({t for d in spec.data for t in d.tags}),
            "residency": sorted({d.residency for d in spec.data if d.residency}),
            "sets": sets,
        },
        "limits": {
            "max_usd_per_hour": float(spec.limits.max_usd_per_hour or 0.0),
            "max_runtime_s": float(spec.limits.max_runtime_s or 0.0),
        },
        # an elastic train job lends nodes down to workers.min; any other runs all or none
        "elastic": spec.elastic is not None,
        "workers": {
            "min": int(spec.elastic.min if spec.elastic else spec.workers),
            "max": int(spec.elastic.max if spec.elastic else spec.workers),
        },
        "service": spec.serve is not None,
    }


# Numbers are handed to CEL as the kind the schema says (float() for a double, int() for an
# int): CEL does not mix them in arithmetic, so a 0 where 0.0 belongs would make a checked
# expression fail at run time. Job maps come from the typed models; the rest may come from
# callers' plain numbers (the controller's observations, a simulator's counters).


def victim_map(victim: VictimFacts, priority_class: str) -> dict[str, Any]:
    return {
        **_job_map(victim.job, priority_class),
        "priority": int(victim.priority),
        "pool": victim.pool,
        "runtime_s": float(victim.runtime_s),
        "since_checkpoint_s": float(victim.since_checkpoint_s),
    }


def pool_map(pool: PoolFacts) -> dict[str, Any]:
    return {
        "name": pool.name,
        "provider": pool.provider,
        "cloud": pool.cloud,
        "region": pool.region,
        "labels": dict(pool.labels),
        "accelerators": list(pool.accelerators),
        "vendors": list(pool.vendors),
        "accelerator_types": [
            {"vendor": a.vendor, "model": a.model, "memory_gib": float(a.memory_gib)}
            for a in pool.accelerator_types
        ],
        "gpus": int(pool.gpus),
        "usd_per_gpu_hour": float(pool.usd_per_gpu_hour or 0.0),
    }


def mesh_map(mesh: MeshSnapshot) -> dict[str, Any]:
    return {
        "pools": {
            p.name: {
                "provider": p.provider,
                "cloud": p.cloud,
                "labels": dict(p.labels),
                "gpus": int(p.gpus),
                "free_gpus": float(p.free_gpus),
                "queued_jobs": int(p.queued_jobs),
                "expected_wait_s": float(p.expected_wait_s),
                "spend_usd_month": float(p.spend_usd_month),
            }
            for p in mesh.pools
        },
        "teams": {
            name: {
                "gpus_in_use": float(t.gpus_in_use),
                "gpu_memory_gib_in_use": float(t.gpu_memory_gib_in_use),
                "spend_usd_month": float(t.spend_usd_month),
            }
            for name, t in mesh.teams.items()
        },
    }
