"""Builders of the mesh files, job files and controller worlds the tests feed in.

A builder takes keyword arguments whose defaults are the shape most tests use, so a test names
only what it is about. Each returns a plain value: a dict as a file holds it (``*_document``,
``*_pool``, ``node_group``, ``resources``), the model parsed from one (``mesh``), or the
controller's view of the world (``observed_*``, ``job_view``, ``world``). Nothing here reads
or writes files.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from meshctl.controller.deciding.world import JobView, World
from meshctl.model import API_VERSION, Job, Mesh
from meshctl.pools.observed import ObservedJob, ObservedNode, PoolObservation
from meshctl.state.records import AttemptRecord, JobRecord, JobState

NOW_S: Final = 1_800_000_000.0  # the tests' usual "now": a fixed instant in 2027

# The accelerator of the default node group: an 80 GiB A100.
A100: Final[Mapping[str, Any]] = {"model": "A100", "memory_gib": "80GiB"}


# --- mesh files ----------------------------------------------------------------------------------


def mesh(*pools: Mapping[str, Any], name: str = "m") -> Mesh:
    """The Mesh parsed from a file of ``pools`` (as ``local_pool`` and its kin build them)."""
    document = {
        "apiVersion": API_VERSION,
        "kind": "Mesh",
        "metadata": {"name": name},
        "spec": {"pools": [dict(p) for p in pools]},
    }
    return Mesh.model_validate(document)


def local_pool(name: str, *nodes: Mapping[str, Any], **fields: Any) -> dict[str, Any]:
    """An on-prem pool of ``nodes`` (``node_group``); ``fields``: any other of its keys."""
    return {"name": name, "provider": "local", **fields, "nodes": [dict(n) for n in nodes]}


def ray_pool(name: str, address: str, **fields: Any) -> dict[str, Any]:
    """A pool that is a Ray cluster meshctl did not start, at ``address``."""
    return {"name": name, "provider": "ray", "address": address, **fields}


def aws_pool(
    name: str,
    *,
    region: str = "us-east-1",
    node_type: str = "g6.xlarge",
    max_nodes: int = 1,
    **fields: Any,
) -> dict[str, Any]:
    """A cloud pool in AWS that may launch up to ``max_nodes`` of one ``node_type``."""
    node_types = [{"name": node_type, "max_nodes": max_nodes}]
    return {"name": name, "provider": "aws", "region": region, **fields, "node_types": node_types}


def node_group(
    name: str,
    *,
    gpus: int = 4,
    accelerator: Mapping[str, Any] = A100,
    cpus: float = 2,
    memory_gib: str | float = "8GiB",
    **fields: Any,
) -> dict[str, Any]:
    """An on-prem pool's node (``count`` of them, among ``fields``); by default one node of
    four 80 GiB A100s, two CPUs and 8 GiB of memory."""
    return {
        "name": name,
        "gpus": gpus,
        "accelerator": dict(accelerator),
        "cpus": cpus,
        "memory_gib": memory_gib,
        **fields,
    }


# --- job files -----------------------------------------------------------------------------------


def job_document(name: str = "j", **spec: Any) -> dict[str, Any]:
    """A Job file's content around ``spec``, taken as given."""
    return {"apiVersion": API_VERSION, "kind": "Job", "metadata": {"name": name}, "spec": spec}


def resources(
    gpus: float = 1, cpus: float = 0.5, memory_gib: float = 1, **more: Any
) -> dict[str, Any]:
    """A job's ``resources``: by default one GPU, half a CPU and 1 GiB of memory."""
    return {"gpus": gpus, "cpus": cpus, "memory_gib": memory_gib, **more}


_resources = resources  # for batch_document, whose argument of that name hides it


def batch_document(
    name: str = "j",
    *,
    entrypoint: str | None = "python x.py",
    resources: Mapping[str, Any] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A batch job's file, ``resources()`` unless told; ``spec`` adds to its spec or replaces
    any of it (``kind`` included)."""
    asked = dict(resources) if resources is not None else _resources()
    return job_document(
        name, **{"kind": "batch", "entrypoint": entrypoint, "resources": asked, **spec}
    )


# --- the controller's world ----------------------------------------------------------------------


def job_view(
    document: Mapping[str, Any],
    *,
    state: JobState = JobState.PENDING,
    priority: int = 0,
    team: str = "t",
    at_s: float = NOW_S,
    attempt: AttemptRecord | None = None,
    job: Job | None = None,
) -> JobView:
    """A stored job as the controller sees it: its record (id and name from the file's name,
    no pool yet, submitted and updated at ``at_s``), its parsed file (``job``, else parsed
    from ``document``) and its latest attempt."""
    name = document["metadata"]["name"]
    record = JobRecord(name, name, team, state, priority, document, None, at_s, at_s)
    return JobView(record, job if job is not None else Job.model_validate(document), attempt)


def observed_node(
    name: str,
    *,
    ray_node_id: str | None = None,
    alive: bool = True,
    gpus: int = 4,
    cpus: float = 2.0,
    memory_gib: float = 8.0,
    accelerator: str | None = "A100",
    labels: Mapping[str, str] | None = None,
    **more: Any,
) -> ObservedNode:
    """A Ray node as its cluster reports it: Ray's id ``id-<name>`` and the ``meshctl.io/node``
    label unless told; by default the shape of ``node_group()``."""
    return ObservedNode(
        name,
        f"id-{name}" if ray_node_id is None else ray_node_id,
        alive,
        gpus,
        cpus,
        memory_gib,
        accelerator,
        {"meshctl.io/node": name} if labels is None else labels,
        **more,
    )


def observed_pool(
    name: str, *nodes: ObservedNode, jobs: Iterable[ObservedJob] = ()
) -> PoolObservation:
    """A reachable pool, its ``nodes`` and its Ray ``jobs`` (by submission id)."""
    return PoolObservation(name, True, "", tuple(nodes), {j.submission_id: j for j in jobs})


def world(
    *views: JobView, pools: Iterable[PoolObservation] = (), now_s: float = NOW_S, **fields: Any
) -> World:
    """What the controller decides on at ``now_s``: ``pools`` (by name), the jobs' ``views``,
    and any other of ``World``'s fields."""
    return World(now_s, {p.pool: p for p in pools}, tuple(views), **fields)
