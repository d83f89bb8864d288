"""A mesh's own history as the simulator's workload: what ``meshctl policy diff`` replays.

The store records what each job asked for (its job file), when it was submitted, when it
started, where it last ran and how long it held its GPUs; and what happened to the mesh's
nodes (lost, back) and cloud instances (spot notices). ``History`` is that record, read by
``meshctl.app.policydiff``; here it becomes the simulator's jobs (``sim_jobs``: each with its
own job file, so labels, classes and limits route as they did) and the failures and notices
the run injects (``injected``). Pure: no I/O, no clock.

Where the history is silent the replay assumes, and says so in ``ASSUMED``: a job that never
started runs as long as the median of its name's jobs that did (else its ``max_runtime_s``,
else the median of all, else an hour); a job's run time is the time its attempts held their
GPUs, in all (work lost to a restart counts as work); a node lost and never seen back is
repaired after ``REPAIR_S``; a cloud instance joins its pool as fast as the pool's did in the
window (the median), else as the simulator's provider model says.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from meshctl.model.job import Job
from meshctl.sim.core.fleet import CloudPool
from meshctl.sim.core.workload import SimJob

HOUR_S = 3600.0
REPAIR_S = 4 * HOUR_S  # a node lost and not seen back in the window: back after this
ASSUMED = (
    "a job's run time is the time its attempts held their GPUs, in all",
    "a job that never started runs as long as its name's median (else its max_runtime_s, "
    "else the window's median run time, else an hour)",
    f"a node lost and not seen back is repaired after {REPAIR_S / HOUR_S:g} hours",
)


@dataclass(frozen=True, slots=True)
class RecordedJob:
    """One job as the store has it; times are epoch seconds."""

    id: str
    document: Mapping[str, Any]  # the job file it was submitted with
    job: Job | None  # that file read (None: a trace's job, which has none)
    submitted_s: float
    runtime_s: float | None  # on its GPUs, over every attempt; None: it never started
    pool: str | None  # where its latest attempt ran
    started_s: float | None  # its first attempt's start
    state: str  # its JobState when the history was read


@dataclass(frozen=True, slots=True)
class History:
    """What the mesh ran in ``[start_s, end_s)``."""

    start_s: float
    end_s: float
    jobs: tuple[RecordedJob, ...]
    failures: tuple[tuple[float, str, float], ...] = ()  # (epoch s, node, repair s)
    notices: tuple[tuple[float, str, int], ...] = ()  # (epoch s, pool, n-th instance launched)
    left_out: Mapping[str, int] = field(default_factory=dict)  # why -> jobs not replayed
    # per cloud pool: how long its instances took from launch to joining (the median seen)
    provision_s: Mapping[str, float] = field(default_factory=dict)


def sim_jobs(history: History) -> list[SimJob]:
    """The history's jobs in arrival order, each with its own job file (``SimJob.document``)
    and the run time it really had (or the estimate ``ASSUMED`` names)."""
    runtimes: dict[str, list[float]] = defaultdict(list)
    for job in history.jobs:
        if job.runtime_s is not None:
            runtimes[_name(job)].append(job.runtime_s)
    every = [r for rs in runtimes.values() for r in rs]
    overall = statistics.median(every) if every else HOUR_S
    out = []
    for job in sorted(history.jobs, key=lambda j: (j.submitted_s, j.id)):
        model = job.job if job.job is not None else Job.model_validate(job.document)
        spec, res = model.spec, model.spec.resources
        duration = job.runtime_s
        if duration is None:
            same = runtimes.get(_name(job))
            duration = statistics.median(same) if same else (spec.limits.max_runtime_s or overall)
        workers = spec.train.workers if spec.train is not None else None
        out.append(
            SimJob(
                id=job.id,
                arrival_s=max(0.0, job.submitted_s - history.start_s),
                duration_s=max(duration, 1.0),
                gpus=res.gpus,
                nodes=res.nodes,
                kind=str(spec.kind),
                criticality=str(spec.criticality),
                team=spec.team,
                name=model.metadata.name,
                max_runtime_s=spec.limits.max_runtime_s,
                max_restarts=spec.limits.max_restarts,
                priority_class=spec.priority_class,
                elastic_min=workers.min if workers is not None else None,
                document=job.document,
            )
        )
    return out


def injected(
    history: History,
) -> tuple[tuple[tuple[float, str, float], ...], tuple[tuple[float, str, int], ...]]:
    """The history's node failures and spot notices, in seconds from its start."""
    failures = tuple(
        (t - history.start_s, node, repair)
        for t, node, repair in history.failures
        if history.start_s <= t < history.end_s
    )
    notices = tuple(
        (t - history.start_s, pool, n)
        for t, pool, n in history.notices
        if history.start_s <= t < history.end_s
    )
    return failures, notices


def _name(job: RecordedJob) -> str:
    metadata = job.document.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    spec = job.document.get("spec")
    team = spec.get("team") if isinstance(spec, Mapping) else None
    return f"{team}/{name}"


def pairs(
    lost: Sequence[tuple[float, str]], back: Sequence[tuple[float, str]], end_s: float
) -> tuple[tuple[float, str, float], ...]:
    """Node failures as the simulator injects them, (when, node, repair s), from the times
    each node was lost and seen back (a node lost and not seen back: ``REPAIR_S``, at most
    to the window's end)."""
    returns: dict[str, list[float]] = defaultdict(list)
    for t, node in sorted(back):
        returns[node].append(t)
    out = []
    for t, node in sorted(lost):
        later = [b for b in returns.get(node, ()) if b > t]
        repair = (later[0] - t) if later else min(REPAIR_S, max(end_s - t, 1.0))
        out.append((t, node, repair))
    return tuple(out)


def fitted_clouds(clouds: Mapping[str, CloudPool], history: History) -> dict[str, CloudPool]:
    """The cloud pools as the history saw them: instances joined as fast as they did there,
    and none taken back but those the history recorded (no spot reclaims drawn)."""
    return {
        name: replace(
            pool,
            provision_s=history.provision_s.get(name, pool.provision_s),
            spot_lifetime_s=None,
        )
        for name, pool in clouds.items()
    }
