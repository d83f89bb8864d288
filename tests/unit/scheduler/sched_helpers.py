"""Small builders for scheduler tests: nodes, requests, pending and running jobs."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from meshctl.scheduler import Allocation, Node, Pending, Running, Snapshot
from meshctl.scheduler.request import DataSet, Request, home_of


def node(
    name: str,
    pool: str = "onprem",
    gpus: int = 8,
    *,
    model: str = "H100",
    gpu_memory: float = 80,
    cpus: float = 64,
    memory: float = 512,
    nic: float = 400,
    rack: str = "r0",
    switch: str = "s0",
    health: str = "ready",
    usd: float = 1.0,
    datasets: frozenset[str] = frozenset(),
) -> Node:
    return Node(
        name,
        pool,
        (1.0,) * gpus,
        gpu_memory,
        model,
        "nvidia",
        cpus,
        cpus,
        memory,
        memory,
        nic,
        nic,
        {"rack": rack, "switch": switch},
        health,  # type: ignore[arg-type]
        datasets,
        usd,
    )


def req(
    gpus: float = 1,
    nodes: int = 1,
    *,
    cpus: float = 1,
    memory: float = 4,
    models: Sequence[str] = (),
    gpu_memory: float = 0,
    nic: float = 0,
    topology: str | None = None,
    required: bool = False,
    datasets: Sequence[str] = (),
    data: Sequence[tuple[str, float | None]] = (),
) -> Request:
    """``datasets``: locations without sizes; ``data``: (location, GiB or None)."""
    sets = [DataSet(loc, None, home_of(loc)) for loc in datasets]
    sets += [DataSet(loc, gib, home_of(loc)) for loc, gib in data]
    return Request(
        gpus,
        gpu_memory,
        frozenset(m.lower() for m in models),
        None,
        cpus,
        memory,
        nic,
        nodes,
        topology,
        required,
        tuple(sets),
    )


def pending(
    job_id: str,
    gpus: float = 1,
    *,
    team: str = "t",
    priority: int = 0,
    at: float = 0.0,
    runtime: float | None = None,
    **kw: object,
) -> Pending:
    request = kw.pop("request", None) or req(gpus, **kw)  # type: ignore[arg-type]
    return Pending(job_id, team, priority, request, at, runtime)  # type: ignore[arg-type]


def running(
    job_id: str,
    node_name: str,
    gpus: Sequence[int],
    *,
    priority: int = 0,
    team: str = "t",
    share: float = 1.0,
    started: float = 0.0,
    checkpoint: float | None = None,
    end: float | None = None,
    cpus: float = 1,
    memory: float = 4,
) -> Running:
    alloc = Allocation(node_name, tuple(gpus), share, cpus, memory, 0.0)
    request = req(share if share < 1 else len(gpus), cpus=cpus, memory=memory)
    return Running(job_id, team, priority, "onprem", (alloc,), request, started, checkpoint, end)


def occupied(nodes: Sequence[Node], jobs: Sequence[Running]) -> tuple[Node, ...]:
    """The nodes with what the running jobs hold taken out of their free resources."""
    out = []
    for n in nodes:
        free, cpus, memory = list(n.gpu_free), n.cpus_free, n.memory_gib_free
        for job in jobs:
            for a in job.allocations:
                if a.node == n.name:
                    for i in a.gpu_indices:
                        free[i] -= a.gpu_share
                    cpus, memory = cpus - a.cpus, memory - a.memory_gib
        out.append(
            dataclasses.replace(n, gpu_free=tuple(free), cpus_free=cpus, memory_gib_free=memory)
        )
    return tuple(out)


def snapshot(
    nodes: Sequence[Node],
    pend: Sequence[Pending],
    run: Sequence[Running] = (),
    now: float = 1000.0,
    **kw: object,
) -> Snapshot:
    return Snapshot(now, occupied(nodes, run), running=tuple(run), pending=tuple(pend), **kw)  # type: ignore[arg-type]
