"""The simulator's workload: trace jobs, the transforms that fit a trace to a mesh, and classes.

A trace records (arrival, duration at its original size, GPUs) and nothing else: no status,
user, placement, kind or priority (see ../shared/traces/README.md). Everything a policy needs
that the trace lacks is assigned here by ``classify``, with documented, seeded rules, and the
report says so. Pure: no I/O, no clock; randomness comes from a seeded ``random.Random``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from meshctl.sim.core.data import SimData
from meshctl.sim.core.inference import SimServe

DAY_S = 86_400.0


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One job as a trace gives it; times in seconds from the trace's start."""

    name: str
    arrival_s: float
    duration_s: float  # at its original size, on an uncontended network
    gpus: float  # in all, over every node
    # what the trace groups it under: Philly's virtual cluster, ITP's cluster; None: nothing
    group: str | None = None


@dataclass(frozen=True, slots=True)
class SimJob:
    """A trace job with the class the policies route by, and its shape per node."""

    id: str
    arrival_s: float
    duration_s: float
    gpus: float  # per node (a fraction of one GPU only on a single node)
    nodes: int
    kind: str  # train, inference, batch, interactive
    criticality: str  # critical, standard, best-effort
    team: str
    name: str = ""  # the job's name (runtime estimates go by team and name); "": its class
    max_runtime_s: float | None = None  # limits.max_runtime_s: stopped and failed past it
    max_restarts: int = 3  # limits.max_restarts: failures it may be requeued after
    deadline_s: float | None = None  # limits.deadline: fails if it has not started by then
    priority_class: str | None = None  # default: the policies' class for its kind
    # An elastic train job (one worker a node, ``nodes`` at most): lends nodes down to this
    # many to jobs of higher priority, and grows back (``train.workers``).
    elastic_min: int | None = None
    # A service (kind inference): replicas of ``gpus`` on one node each, as many as its
    # traffic asks for (``sim/services.py``); ``duration_s`` is not used.
    serve: SimServe | None = None
    data: SimData | None = None  # the dataset it reads (``data.py``), when data is modelled
    # A job replayed from a mesh's history (``replay.py``): the job file it was submitted
    # with, which stands for it in place of ``job_document`` (its labels, data, classes).
    document: Mapping[str, Any] | None = field(default=None, compare=False, hash=False)

    @property
    def total_gpus(self) -> float:
        return self.gpus * self.nodes

    @property
    def work_gpu_s(self) -> float:
        return self.duration_s * self.total_gpus

    @property
    def class_name(self) -> str:
        """Its name, or for a trace job (which has none) its kind and shape: the same team's
        jobs of one kind and size stand in for "the same job" when estimating runtimes."""
        if self.name:
            return self.name
        return f"{self.kind}-{self.gpus:g}x{self.nodes}"


def job_document(
    job: SimJob, cpus_per_gpu: float, memory_gib_per_gpu: float, gang_domain: str
) -> dict[str, Any]:
    """The job file a simulated job stands for (4 CPUs and 32 GiB per GPU by default; a gang
    prefers one domain of the fabric); the controller side of the differential check submits
    the same."""
    gpus = job.gpus if job.gpus < 1 else int(job.gpus)
    resources: dict[str, Any] = {
        "gpus": gpus,
        "cpus": max(0.5, cpus_per_gpu * job.gpus),
        "memory_gib": max(1.0, memory_gib_per_gpu * job.gpus),
        "nodes": job.nodes,
    }
    if job.nodes > 1:
        resources["topology"] = {"domain": gang_domain, "mode": "preferred"}
    limits: dict[str, Any] = {"max_restarts": job.max_restarts}
    if job.max_runtime_s is not None:
        limits["max_runtime_s"] = job.max_runtime_s
    run: dict[str, Any] = {"entrypoint": "trace"}
    if job.elastic_min is not None:
        resources.pop("topology", None)
        run = {
            "train": {"loop": "trace:run", "workers": {"min": job.elastic_min, "max": job.nodes}}
        }
    if job.serve is not None:
        spec = job.serve.spec
        resources.pop("topology", None)
        run = {
            "serve": {
                "app": "trace:app",
                "route_prefix": f"/{job.id}",
                "deployment": "trace",
                "replicas": {"min": spec.least, "max": spec.most},
                "target_ongoing_requests": spec.target,
                "upscale_delay": spec.upscale_delay_s,
                "downscale_delay": spec.downscale_delay_s,
            }
        }
    return {
        "apiVersion": "meshctl/v1",
        "kind": "Job",
        "metadata": {"name": job.name or f"{job.kind}-{job.criticality}-{job.team}"},
        "spec": {
            "kind": job.kind,
            **run,
            "criticality": job.criticality,
            "team": job.team,
            "resources": resources,
            "reserve": "workers" if job.nodes > 1 or job.elastic_min is not None else None,
            "limits": limits,
            **({"priority_class": job.priority_class} if job.priority_class else {}),
            **({"data": [_dataset(job.data)]} if job.data is not None else {}),
        },
    }


def _dataset(data: SimData) -> dict[str, Any]:
    """A job's dataset in its job file: the scheduler weighs its locality and its egress."""
    return {"name": "data", "location": data.key, "size_gib": data.size_gib}


# --- fitting a trace to a mesh ------------------------------------------------------------------


def window(jobs: Iterable[TraceJob], start_s: float, days: float | None) -> list[TraceJob]:
    """Jobs arriving in [start, start + days), shifted so the window starts at 0."""
    end = math.inf if days is None else start_s + days * DAY_S
    return [
        replace(job, arrival_s=job.arrival_s - start_s)
        for job in jobs
        if start_s <= job.arrival_s < end
    ]


def scale_arrivals(jobs: Iterable[TraceJob], factor: float) -> list[TraceJob]:
    """Arrivals ``factor`` times as dense (2.0: the same jobs in half the time)."""
    if factor <= 0:
        raise ValueError(f"arrival scale must be > 0, got {factor:g}")
    return [replace(job, arrival_s=job.arrival_s / factor) for job in jobs]


def replicate(jobs: Sequence[TraceJob], k: int) -> list[TraceJob]:
    """Each job k times (names ``name~i``) for a k-times larger mesh, as the Sia artifact
    scales its traces: same arrivals and sizes, so load per GPU stays the trace's."""
    if k < 1:
        raise ValueError(f"replication must be >= 1, got {k}")
    if k == 1:
        return list(jobs)
    return [replace(job, name=f"{job.name}~{i}") for job in jobs for i in range(k)]


# --- classes: what the trace lacks --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClassRules:
    """How a trace job gets its kind, criticality and team (documented in docs/SIMULATOR.md).

    - kind: ``train`` if it uses more than one node or runs longer than ``train_after_s``;
      otherwise ``inference`` with probability ``inference_share``, else ``batch``.
    - criticality: ``critical`` with probability ``critical_share``, ``best-effort`` with
      ``best_effort_share``, else ``standard``; gangs of ``critical_nodes`` nodes or more are
      always critical (large pre-training runs are the strategic work).
    - team: one of ``teams``, uniformly; with ``teams_from="group"``, the trace job's group
      (Philly's virtual cluster, ITP's cluster) instead, and the drawn team only for a job
      without one. The team is drawn either way, so the kinds and criticalities are the same.
    Every draw uses the run's seed, so the same seed gives the same classes.
    """

    gpus_per_node: int = 8
    train_after_s: float = 3600.0
    inference_share: float = 0.2
    critical_share: float = 0.2
    best_effort_share: float = 0.3
    critical_nodes: int = 8
    teams: tuple[str, ...] = ("team-a", "team-b", "team-c", "team-d")
    teams_from: Literal["draw", "group"] = "draw"

    def __post_init__(self) -> None:
        if self.teams_from not in ("draw", "group"):
            raise ValueError(f"teams_from: expected 'draw' or 'group', got {self.teams_from!r}")

    def team_of(self, job: TraceJob, drawn: str) -> str:
        """The job's team: its group when the rules take teams from groups and it has one."""
        if self.teams_from == "group" and job.group is not None:
            return job.group
        return drawn


def shape(gpus: float, per_node: int) -> tuple[float, int]:
    """(GPUs per node, nodes): up to a node's worth on one node, more as whole nodes."""
    if gpus <= per_node:
        return gpus, 1
    return float(per_node), math.ceil(gpus / per_node)


def classify(jobs: Sequence[TraceJob], seed: int, rules: ClassRules = ClassRules()) -> list[SimJob]:
    rng = random.Random(f"{seed}:classes")
    out = []
    for job in sorted(jobs, key=lambda j: (j.arrival_s, j.name)):
        per_node, nodes = shape(job.gpus, rules.gpus_per_node)
        long = nodes > 1 or job.duration_s > rules.train_after_s
        draw_kind, draw_class, drawn = rng.random(), rng.random(), rng.choice(rules.teams)
        team = rules.team_of(job, drawn)
        kind = "train" if long else ("inference" if draw_kind < rules.inference_share else "batch")
        if nodes >= rules.critical_nodes or draw_class < rules.critical_share:
            criticality = "critical"
        elif draw_class < rules.critical_share + rules.best_effort_share:
            criticality = "best-effort"
        else:
            criticality = "standard"
        out.append(
            SimJob(
                job.name,
                job.arrival_s,
                job.duration_s,
                per_node,
                nodes,
                kind,
                criticality,
                team,
            )
        )
    return out


# --- a synthetic workload -----------------------------------------------------------------------


DATA_HOMES = {"aws": "s3://", "gcp": "gs://", "onprem": "/data/"}  # home -> its locations


def with_data(
    jobs: Sequence[SimJob],
    gib_per_gpu: float,
    least_gib: float = 10.0,
    most_gib: float = 2000.0,
    home: str = "aws",
) -> list[SimJob]:
    """Each job given the dataset of its class: the same team's jobs of one kind and shape
    read the same data (a team's training runs of one model, again and again), of
    ``gib_per_gpu`` for each of the class's GPUs, between ``least_gib`` and ``most_gib``,
    kept at ``home`` (its location's scheme: ``s3://`` for aws, ``gs://`` for gcp, a path for
    onprem). Services read none (their weights are their image's)."""
    prefix = DATA_HOMES[home]
    out = []
    for job in jobs:
        if job.serve is not None:
            out.append(job)
            continue
        size = min(most_gib, max(least_gib, gib_per_gpu * job.total_gpus))
        out.append(replace(job, data=SimData(f"{prefix}{job.team}/{job.class_name}", size)))
    return out


@dataclass(frozen=True, slots=True)
class Synthetic:
    """Poisson arrivals; log-normal durations; sizes from a discrete distribution.

    Defaults are shaped like the Philly trace: median duration about 1,100 s with a long tail,
    and most jobs on one GPU."""

    jobs_per_hour: float = 60.0
    median_duration_s: float = 1200.0
    duration_sigma: float = 1.8
    max_duration_s: float = 14 * DAY_S
    sizes: tuple[tuple[float, float], ...] = (
        (1, 0.80),
        (2, 0.05),
        (4, 0.06),
        (8, 0.06),
        (16, 0.015),
        (32, 0.01),
        (64, 0.005),
    )


def synthetic(spec: Synthetic, days: float, seed: int) -> list[TraceJob]:
    rng = random.Random(f"{seed}:synthetic")
    sizes, weights = zip(*spec.sizes, strict=True)
    rate_s = spec.jobs_per_hour / 3600.0
    jobs: list[TraceJob] = []
    t, i = 0.0, 0
    while True:
        t += rng.expovariate(rate_s)
        if t >= days * DAY_S:
            return jobs
        duration = min(
            spec.max_duration_s,
            rng.lognormvariate(math.log(spec.median_duration_s), spec.duration_sigma),
        )
        gpus = rng.choices(sizes, weights)[0]
        jobs.append(TraceJob(f"syn-{i:06d}", t, max(1.0, round(duration)), float(gpus)))
        i += 1
