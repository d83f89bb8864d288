"""Dispatching: the attempt a placement becomes, and the Ray Jobs submission of an attempt
(the same for the same attempt, always), with where the job keeps its checkpoints and, for a
train job, what ``meshctl.workload.train.run`` builds the trainer from. Pure, like
``decide``."""

from __future__ import annotations

import json
import shlex
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, replace
from typing import Any

from meshctl.controller.deciding.step import Dispatch, Rules, submission_id
from meshctl.controller.deciding.world import JobView, World
from meshctl.lifecycle import Start
from meshctl.lifecycle.datacache import current_path, env_name
from meshctl.lifecycle.replacing import drivers_apart
from meshctl.model.accelerators import GPU
from meshctl.model.capacity import accelerator_types
from meshctl.model.job import Dataset, Resources
from meshctl.model.mesh import LocalPool, Pool, RayPool
from meshctl.pools.observed import (
    GPU_MEMORY_RESOURCE,
    NIC_RESOURCE,
    NODE_LABEL,
    RAY_NODE_ID_LABEL,
    ROLE_LABEL,
    ObservedNode,
    Submission,
)
from meshctl.scheduler import Allocation
from meshctl.state.records import AttemptDetail, AttemptRecord, AttemptState, Held
from meshctl.workload.exits import wrapped

REPLACE_WAIT_S = 120.0  # a run whose node died waits this long for the controller's nomination
# builds the TorchTrainer from MESHCTL_TRAIN
TRAIN_ENTRYPOINT = "python -m meshctl.workload.train.run"
# holds the job's placement group around its own command (MESHCTL_BUNDLES)
PLACEMENT_ENTRYPOINT = "python -m meshctl.workload.placement"
GIB = 1024**3
Counted = tuple[str, int]  # a device's Ray resource and the units of it one device is


def failures_before(attempt: AttemptRecord | None) -> int:
    """The job's failures (evictions) before this attempt, recorded at dispatch; for an
    attempt recorded before failures were counted, every attempt before it."""
    if attempt is None:
        return 0
    before = attempt.detail.failures_before
    return attempt.number - 1 if before is None else before


def failures_after(attempt: AttemptRecord | None) -> int:
    """The job's failures once this attempt has ended (recorded when it was requeued)."""
    if attempt is None:
        return 0
    failures = attempt.detail.failures
    return failures_before(attempt) if failures is None else failures


def placement_nodes(attempt: AttemptRecord) -> list[str]:
    return [held.node for held in attempt.detail.allocations]


def held_of(allocation: Allocation) -> Held:
    """What an attempt records of one of its allocations (the same fields)."""
    return Held(**asdict(allocation))


def pool_mtbf_s(world: World) -> dict[str, float]:
    """Mean time between failures per pool, from what the controller has seen: the hours its
    nodes were watched over the failures (lost, unhealthy) they had; pools with none omitted."""
    watched: dict[str, float] = defaultdict(float)
    failures: dict[str, int] = defaultdict(int)
    for record in world.nodes.values():
        first = record.detail.first_seen_s
        if first is not None:  # a dead node was watched until it died
            until = world.now_s if record.resources.get("alive", True) else record.updated_at_s
            watched[record.pool] += max(0.0, until - first)
        failures[record.pool] += record.detail.failures
    return {pool: watched[pool] / n for pool, n in failures.items() if n}


def _live(world: World, pool: str) -> Mapping[str, ObservedNode]:
    """The pool's live nodes in its latest observation, by name (once a world)."""
    return world.live_nodes(pool)


def ray_node_ids(world: World, place: Start) -> tuple[str, ...]:
    """The Ray node ids of the nodes a placement chose, in its order (empty when one is not
    live in the pool's latest observation: the job is pinned by name, as before)."""
    live = _live(world, place.pool)
    ids = tuple(live[a.node].ray_node_id if a.node in live else "" for a in place.allocations)
    return ids if all(ids) else ()


def claims(
    view: JobView, place: Start, world: World, device: Counted = (GPU, 1)
) -> dict[str, float]:
    """The Ray custom resources a job's entrypoint claims on its one node (``claimed_on``),
    with its devices when they are counted in another resource than GPU (``device``: the
    resource and the units a device is, the registry's): a TPU host's chips as TPU.
    Jobs whose Ray tasks hold their resources (``reserve: workers``) claim none here: their
    placement group's bundles do (``bundles``)."""
    if view.job.spec.reserves_for != "entrypoint" or len(place.allocations) != 1:
        return {}
    [alloc] = place.allocations
    node = _live(world, place.pool).get(alloc.node)
    if node is None:
        return {}
    out = claimed_on(node, alloc, view.job.spec.resources)
    resource, units = device
    if resource != GPU and alloc.gpus():
        out[resource] = round(alloc.gpus() * units, 6)
    return out


def claimed_on(node: ObservedNode, alloc: Allocation, res: Resources) -> dict[str, float]:
    """The Ray custom resources a job claims on one of its nodes, of those the node declares
    (``CLAIMED_RESOURCES``): its GPUs' memory (a whole GPU's for each GPU it holds; for a
    share of one, the memory it asks for, else its share) and its NIC bandwidth."""
    out: dict[str, float] = {}
    total = node.claimable.get(GPU_MEMORY_RESOURCE)
    gpus = alloc.gpus()
    if total and node.gpus and gpus:
        asked = res.gpu_memory_gib
        out[GPU_MEMORY_RESOURCE] = round(
            asked if asked and gpus < 1 else total / node.gpus * gpus, 6
        )
    if node.claimable.get(NIC_RESOURCE) and alloc.nic_gbps:
        out[NIC_RESOURCE] = alloc.nic_gbps
    return out


def bundles(
    view: JobView, place: Start, world: World, device: Counted = (GPU, 1)
) -> tuple[dict[str, float], ...]:
    """The bundles of the placement group that holds what a job's workers use, one per node
    meshctl chose (``meshctl.workload.placement``): a job with ``reserve: workers`` and an
    entrypoint of its own. None for a train job (Ray Train holds its workers in a group of its own,
    pinned to the same nodes), nor when a node is not live in the pool's latest observation
    (the job is then pinned by name, and Ray could not pin a bundle to it). A bundle holds
    its node's devices in their Ray resource (``device``): GPU, or TPU, neuron_cores ..."""
    spec = view.job.spec
    if spec.reserves_for != "workers" or spec.train is not None:
        return ()
    live = _live(world, place.pool)
    if not all(a.node in live for a in place.allocations):
        return ()
    out = []
    for alloc in place.allocations:
        resource, units = device
        bundle = {"CPU": alloc.cpus, resource: alloc.gpus() * units}
        bundle["memory"] = alloc.memory_gib * GIB
        bundle |= claimed_on(live[alloc.node], alloc, spec.resources)
        out.append({k: round(v, 6) for k, v in bundle.items() if v > 0})
    return tuple(out) if all(out) else ()  # Ray refuses an empty bundle: nothing to hold


def pinned_by(attempt: AttemptRecord) -> tuple[str, list[str]]:
    """The Ray label an attempt's nodes are pinned by and its value per node, in order: Ray's
    own node id (any cluster), or for an attempt recorded without ids the meshctl.io/node
    label (nodes meshctl started)."""
    ids = attempt.detail.ray_node_ids
    if ids:
        return RAY_NODE_ID_LABEL, list(ids)
    return NODE_LABEL, placement_nodes(attempt)


def dispatch(
    view: JobView, place: Start, rules: Rules, world: World, runtime_s: float | None = None
) -> Dispatch:
    """The attempt a placement becomes; ``runtime_s``: what the job is expected to run
    (declared or estimated when it is placed), which its expected end is reckoned from."""
    number = (view.attempt.number if view.attempt else 0) + 1
    device = counted(rules, place.pool, [a.node for a in place.allocations])
    detail = AttemptDetail(
        allocations=tuple(held_of(a) for a in place.allocations),
        ray_node_ids=ray_node_ids(world, place),
        ray_resources=claims(view, place, world, device),
        ray_bundles=bundles(view, place, world, device),
        failures_before=failures_after(view.attempt),  # what max_restarts is judged by
        runtime_s=runtime_s,  # None: no estimate then (not "unknown, estimate later")
    )
    # The job's checkpoints stay where its first attempt put them, whichever pool runs it
    # next: a run resumes only from storage it can read.
    before = view.attempt.detail if view.attempt else AttemptDetail()
    target = (
        (before.checkpoint_uri, before.checkpoint_endpoint)
        if before.checkpoint_uri
        else _checkpoint_target(rules.mesh.pool(place.pool), view)
    )
    if target is not None:
        detail = replace(detail, checkpoint_uri=target[0], checkpoint_endpoint=target[1])
    pool = rules.mesh.pool(place.pool)
    spec = view.job.spec
    if (  # its driver on the pool's head: a node that dies is replaced inside the attempt
        spec.train is not None
        and spec.elastic is None
        and target is not None
        and detail.ray_node_ids
        and pool is not None
        and drivers_apart(pool)
    ):
        detail = replace(detail, replaceable=True)
    if view.job.spec.data and place.allocations:  # read from its nodes' caches
        roots = [_cache_root(world, place.pool, a.node) for a in place.allocations]
        data = view.job.spec.data
        if roots[0]:  # the first node's: where its driver runs
            detail = replace(
                detail, data_paths={d.name: current_path(roots[0], d.location) for d in data}
            )
        if len(roots) > 1 and any(roots):
            per_node = {
                d.name: tuple(current_path(r, d.location) if r else "" for r in roots) for d in data
            }
            detail = replace(detail, node_data_paths=per_node)
    mtbf = pool_mtbf_s(world).get(place.pool) if view.job.spec.train is not None else None
    if mtbf:  # for checkpoint interval auto: the job fails when any of its nodes does
        detail = replace(detail, pool_mtbf_s=mtbf / max(1, len(place.allocations)))
    attempt = AttemptRecord(
        id=f"{view.record.id}-{number}",
        job_id=view.record.id,
        number=number,
        pool=place.pool,
        submission_id=submission_id(view.record.id, number),
        state=AttemptState.SUBMITTING,
        started_at_s=None,
        ended_at_s=None,
        detail=detail,
    )
    nodes = ", ".join(a.node for a in place.allocations)
    return Dispatch(view.record.id, attempt, submission(view, rules, attempt), f"placed on {nodes}")


def submission(view: JobView, rules: Rules, attempt: AttemptRecord) -> Submission:
    """The Ray Jobs submission of one attempt: the same for the same attempt, always."""
    job, record = view.job, view.record
    spec, res = job.spec, job.spec.resources
    held = attempt.detail.allocations
    if held and spec.serve is None:  # a fungible request: as many as its option holds a node
        res = res.model_copy(update={"gpus": held[0].gpus()})
    nodes = placement_nodes(attempt)
    devices = devices_of(rules, attempt.pool, nodes)  # the registry's, for the placed nodes
    label, values = pinned_by(attempt)
    env = {
        **spec.runtime_env.env_vars,
        "MESHCTL_JOB_ID": record.id,
        "MESHCTL_JOB_NAME": record.name,
        "MESHCTL_ATTEMPT": str(attempt.number),
        "MESHCTL_POOL": attempt.pool,
        "MESHCTL_NODES": ",".join(nodes),
        "MESHCTL_NODE_LABEL": label,
        "MESHCTL_NODE_IDS": ",".join(values),
        "MESHCTL_GPUS_PER_NODE": f"{res.gpus:g}",
        "MESHCTL_CPUS_PER_NODE": f"{res.cpus:g}",
        **_checkpoint_env(checkpoint_of(attempt, rules, view)),
        **_data_env(spec.data, attempt.detail.data_paths, attempt.detail.node_data_paths),
    }
    if spec.train is not None:
        train = _train_spec(view, attempt, nodes, res) | {"node_label": label, "node_ids": values}
        device = devices if res.gpus > 0 else None
        if device is not None:  # how its workers reach their devices (the registry's)
            train["devices"] = device
            per_worker, resource = train["per_worker"], device["resource"]
            if resource != GPU:  # a TPU or Neuron job's workers hold no GPU
                per_worker[resource] = per_worker.pop("GPU") * int(device["units"])
        if attempt.detail.replaceable:  # the run waits this long for a replacement node
            train["replace_wait_s"] = REPLACE_WAIT_S
        env["MESHCTL_TRAIN"] = json.dumps(train, sort_keys=True)
        # Ray Train's controller collects each worker's report when it polls (every 2 s by
        # default) and a report waits for that: a loop reporting every step would crawl.
        env.setdefault("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "0.1")
        if attempt.detail.pool_mtbf_s:
            env["MESHCTL_POOL_MTBF_S"] = f"{attempt.detail.pool_mtbf_s:.0f}"
    runtime_env = spec.runtime_env.model_dump(exclude_none=True, exclude_defaults=True)
    runtime_env["env_vars"] = env
    if spec.working_dir:
        runtime_env["working_dir"] = spec.working_dir
    # its log ends with its exit status (meshctl/workload/exits.py): the placement wrapper prints it
    entrypoint = wrapped(spec.entrypoint or TRAIN_ENTRYPOINT)
    if attempt.detail.ray_bundles and spec.entrypoint:
        env["MESHCTL_BUNDLES"] = json.dumps([dict(b) for b in attempt.detail.ray_bundles])
        env["MESHCTL_PLACEMENT_GROUP_NAME"] = placement_group_name(attempt)
        entrypoint = f"{PLACEMENT_ENTRYPOINT} {shlex.quote(spec.entrypoint)}"
    entrypoint_holds = spec.reserves_for == "entrypoint"
    in_gpus = devices is None or devices["resource"] == GPU  # else in ray_resources
    return Submission(
        submission_id=attempt.submission_id,
        entrypoint=entrypoint,
        runtime_env=runtime_env,
        metadata={"meshctl_job_id": record.id, "meshctl_attempt": str(attempt.number)},
        label_selector=_driver_selector(attempt, label, values),
        num_cpus=res.cpus if entrypoint_holds else None,
        num_gpus=res.gpus if entrypoint_holds and res.gpus and in_gpus else None,
        memory_bytes=int(res.memory_gib * 1024**3) if entrypoint_holds else None,
        resources=dict(attempt.detail.ray_resources) if entrypoint_holds else {},
    )


def _driver_selector(attempt: AttemptRecord, label: str, values: Sequence[str]) -> dict[str, str]:
    """Where the job's driver runs: on the pool's head for a job whose nodes may be replaced
    (with Ray Train's controller, which follows the driver), else on its first node."""
    if attempt.detail.replaceable:
        return {ROLE_LABEL: "head"}
    return {label: values[0]} if values else {}


def placement_group_name(attempt: AttemptRecord) -> str:
    """The name of the Ray placement group that holds an attempt's nodes (when it has one)."""
    return attempt.submission_id  # meshctl-<job id>-<attempt>


def _checkpoint_target(pool: Pool | None, view: JobView) -> tuple[str, str | None] | None:
    """Where the job keeps checkpoints (its own storage, else its pool's), one folder per job
    for all its attempts, and the S3 endpoint to reach it by (None: the default)."""
    checkpoint = view.job.spec.checkpoint
    if checkpoint is not None and checkpoint.storage:
        base, endpoint = checkpoint.storage, None
    elif pool is not None and pool.checkpoint_storage is not None:
        base, endpoint = pool.checkpoint_storage.uri, pool.checkpoint_storage.endpoint_url
    else:
        return None
    return f"{base.rstrip('/')}/{view.record.id}", endpoint


def checkpoint_of(
    attempt: AttemptRecord, rules: Rules, view: JobView
) -> tuple[str, str | None] | None:
    """The attempt's checkpoint storage (recorded at dispatch; computed for older records)."""
    uri, endpoint = attempt.detail.checkpoint_uri, attempt.detail.checkpoint_endpoint
    if uri:
        return uri, endpoint or None
    return _checkpoint_target(rules.mesh.pool(attempt.pool), view)


def devices_of(rules: Rules, pool_name: str, nodes: Sequence[str]) -> dict[str, Any] | None:
    """The vendor of the accelerators on ``nodes`` of the pool, and from the registry the torch
    backend and visibility variable their workers use, the Ray resource their devices are
    counted in and the units of it a device is; None when the registry or the vendor is not
    known (a cloud pool whose node types mix vendors)."""
    pool = rules.mesh.pool(pool_name)
    registry = rules.registry
    if pool is None or registry is None:
        return None
    found: set[tuple[str, str]] = set()  # (vendor, model)
    if isinstance(pool, LocalPool | RayPool):
        for group in pool.nodes:
            if group.accelerator and set(group.node_names()) & set(nodes):
                found.add((group.accelerator.vendor, group.accelerator.model))
    else:  # a cloud pool: its node types' accelerators, through the catalog
        found = {(a.vendor, a.model) for a in accelerator_types(pool, rules.catalogs)}
    vendors = {v for v, _ in found}
    vendor = registry.vendor(vendors.pop()) if len(vendors) == 1 else None
    if vendor is None:
        return None
    units = {registry.counted_in(v, m)[1] for v, m in found}
    return {
        "vendor": vendor.name,
        "backend": vendor.torch_backend,
        "visibility": vendor.visibility.variable,
        "visible_by": vendor.visibility.by,
        **({"instead_of": vendor.visibility.instead_of} if vendor.visibility.instead_of else {}),
        "resource": vendor.ray_resource,
        "units": units.pop() if len(units) == 1 else 1,
    }


def counted(rules: Rules, pool_name: str, nodes: Sequence[str]) -> Counted:
    """The Ray resource the devices on ``nodes`` are counted in, and the units of it one
    device is: ``("GPU", 1)`` unless the registry says otherwise (``devices_of``)."""
    found = devices_of(rules, pool_name, nodes)
    return (str(found["resource"]), int(found["units"])) if found else (GPU, 1)


def _train_spec(
    view: JobView, attempt: AttemptRecord, nodes: Sequence[str], res: Resources
) -> dict[str, Any]:
    """What ``meshctl.workload.train.run`` builds the TorchTrainer from (see there); ``res``: the
    job's resources as placed (a fungible request's option)."""
    spec = view.job.spec
    train = spec.train
    assert train is not None
    per_node = train.workers_per_node
    target = attempt.detail.checkpoint_uri
    storage = target.rsplit("/", 1)[0] if target else None  # the run is named by job id
    checkpoint = spec.checkpoint
    return {
        "loop": train.loop,
        # an elastic job (train.workers) runs one worker on each node it was placed on: its
        # size now, fixed for the attempt (a range would let Ray Train 2.60 start with fewer
        # workers than its nodes, after earlier attempts' requests linger in its autoscaling
        # coordinator); meshctl resizes it between attempts
        "workers": len(nodes) if train.workers else spec.workers,
        "min_workers": train.min_workers,
        "workers_per_node": per_node,
        "nodes": list(nodes),
        "per_worker": {
            "CPU": res.cpus / per_node,
            "GPU": res.gpus / per_node,
            "memory": int(res.memory_gib * 1024**3 / per_node),
        },
        "max_failures": train.max_failures,
        "keep": checkpoint.keep if checkpoint else 3,
        "interval": checkpoint.interval if checkpoint else "auto",
        "config": train.config,
        **({"export": train.export} if train.export else {}),
        "run_name": view.record.id,
        "storage": storage,
        "endpoint_url": attempt.detail.checkpoint_endpoint,
    }


def _checkpoint_env(target: tuple[str, str | None] | None) -> dict[str, str]:
    if target is None:
        return {}
    uri, endpoint = target
    env = {"MESHCTL_CHECKPOINT_URI": uri}
    if uri.startswith("file://"):
        env["MESHCTL_CHECKPOINT_DIR"] = uri.removeprefix("file://")
    if endpoint:
        env["MESHCTL_CHECKPOINT_ENDPOINT_URL"] = endpoint
    return env


def _cache_root(world: World, pool: str, node: str) -> str:
    cache = world.caches.get(f"{pool}/{node}")
    return cache.root if cache is not None else ""


def _data_env(
    data: Sequence[Dataset], paths: Mapping[str, str], per_node: Mapping[str, Sequence[str]]
) -> dict[str, str]:
    """Where a job finds each dataset (``meshctl.workload.dataset`` reads these): its source
    always, its path in its first node's cache where that node has one, and on several nodes
    the path in each node's cache (``_NODES``, comma-separated in its nodes' order)."""
    env = {}
    for d in data:
        name = env_name(d.name)
        env[f"{name}_SOURCE"] = d.location
        if d.endpoint_url:
            env[f"{name}_ENDPOINT_URL"] = d.endpoint_url
        if d.name in paths:
            env[name] = paths[d.name]
        if d.name in per_node:
            env[f"{name}_NODES"] = ",".join(per_node[d.name])
    return env
