"""How long one scheduling cycle takes for a large queue on a large on-prem pool.

    python benchmarks/schedule.py [--nodes 1250] [--jobs 20000] [--runs 3] [--seed 7]
                                  [--busy 0.0] [--candidates 32]
                                  [--trace-dir ../shared/traces/philly] [--json]

Builds a snapshot of one on-prem pool of ``--nodes`` nodes x 8 H100 (1,250 nodes: 10,000 GPUs;
racks of 16 nodes, 4 racks per leaf switch) and N pending jobs whose sizes and maximum runtimes
are drawn (seeded) from the Microsoft Philly trace (philly.csv: num_gpus, duration): up to 8
GPUs is one node, more is a gang of ceil(g / 8) nodes x 8 GPUs that prefers one switch. Jobs
belong to 8 teams with priorities 0, 100 or 500, were submitted over the past hour and ask 4
CPUs and 32 GiB per GPU. ``--busy`` puts that share of the GPUs under running single-node jobs
drawn from the trace, each part-way through its duration (so backfill has end times to reserve
against); none by default. Then it times ``schedule(snapshot, Permissive())`` (default weights,
bin-packing; ``--candidates``: feasible nodes scored per pool for a one-node job, the
controller's 32 by default, 0 for every one: the exhaustive search), several runs, and prints
the median cycle time, decisions per second (pending jobs / cycle), jobs placed, the share of
GPUs allocated after the cycle, the placement quality (the mean score of the chosen places, and
the nodes left whole: an 8-GPU job's room) and the process's peak resident memory. Building the
snapshot is not timed. The trace has no user, team or priority; those are synthetic. Exits 2
when the trace folder is missing.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import resource
import statistics
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from traces import PHILLY, PhillyJob, philly_jobs, require

from meshctl.scheduler import (
    Allocation,
    Node,
    Pending,
    Permissive,
    Plan,
    PoolInfo,
    Request,
    Running,
    SchedulerConfig,
    Snapshot,
    schedule,
)

NODES, GPUS_PER_NODE, RACK_NODES, SWITCH_RACKS = 1250, 8, 16, 4
POOL = "onprem"
NOW_S = 1_767_225_600.0  # 2026-01-01T00:00:00Z; the cycle reads no clock
TEAMS = tuple(f"team-{i}" for i in range(8))
PRIORITIES, PRIORITY_WEIGHTS = (0, 100, 500), (6, 3, 1)


def pool_nodes(count: int = NODES) -> tuple[Node, ...]:
    nodes = []
    for i in range(count):
        rack = i // RACK_NODES
        nodes.append(
            Node(
                name=f"n{i:05d}",
                pool=POOL,
                gpu_free=(1.0,) * GPUS_PER_NODE,
                gpu_memory_gib=80.0,
                accelerator="H100",
                vendor="nvidia",
                cpus=64.0,
                cpus_free=64.0,
                memory_gib=1024.0,
                memory_gib_free=1024.0,
                nic_gbps=400.0,
                nic_gbps_free=400.0,
                labels={"rack": f"r{rack:03d}", "switch": f"s{rack // SWITCH_RACKS:03d}"},
                usd_per_gpu_hour=1.1,
            )
        )
    return tuple(nodes)


def request(gpus: int) -> Request:
    """One node with ``gpus`` GPUs, or a gang of 8-GPU nodes that prefers one switch."""
    nodes = 1 if gpus <= GPUS_PER_NODE else math.ceil(gpus / GPUS_PER_NODE)
    per_node = gpus if nodes == 1 else GPUS_PER_NODE
    return Request(
        gpus=float(per_node),
        gpu_memory_gib=0.0,
        accelerators=frozenset(),
        vendor=None,
        cpus=4.0 * per_node,
        memory_gib=32.0 * per_node,
        nic_gbps=100.0 if nodes > 1 else 0.0,
        nodes=nodes,
        topology="switch" if nodes > 1 else None,
    )


def pending_jobs(trace: list[PhillyJob], count: int, seed: int) -> tuple[Pending, ...]:
    rng = random.Random(seed)
    jobs = []
    for i in range(count):
        drawn = rng.choice(trace)
        jobs.append(
            Pending(
                job_id=f"job-{i:05d}",
                team=rng.choice(TEAMS),
                priority=rng.choices(PRIORITIES, PRIORITY_WEIGHTS)[0],
                request=request(drawn.gpus),
                submitted_at_s=NOW_S - rng.uniform(0.0, 3600.0),
                max_runtime_s=drawn.duration_s,
            )
        )
    return tuple(jobs)


def _running(
    job_id: str, node: str, indices: tuple[int, ...], drawn: PhillyJob, rng: random.Random
) -> Running:
    """A job started within its duration before now, so it ends within its duration after."""
    req = request(drawn.gpus)
    started = NOW_S - rng.uniform(0.0, drawn.duration_s)
    return Running(
        job_id=job_id,
        team=rng.choice(TEAMS),
        priority=rng.choices(PRIORITIES, PRIORITY_WEIGHTS)[0],
        pool=POOL,
        allocations=(Allocation(node, indices, 1.0, req.cpus, req.memory_gib, req.nic_gbps),),
        request=req,
        started_at_s=started,
        expected_end_s=started + drawn.duration_s,
    )


def _fill(
    node: Node, gpus: int, trace: Sequence[PhillyJob], rng: random.Random
) -> tuple[Node, list[Running]]:
    """``node`` with up to ``gpus`` GPUs held by jobs drawn from the trace (stops at a misfit)."""
    free, running = list(node.gpu_free), list[Running]()
    cpus, memory = node.cpus_free, node.memory_gib_free
    while gpus > 0:
        drawn = rng.choice(trace)
        if drawn.gpus > min(gpus, free.count(1.0)):
            break
        indices = tuple(i for i, f in enumerate(free) if f == 1.0)[: drawn.gpus]
        job = _running(f"run-{node.name}-{len(running)}", node.name, indices, drawn, rng)
        running.append(job)
        for i in indices:
            free[i] = 0.0
        cpus, memory = cpus - job.request.cpus, memory - job.request.memory_gib
        gpus -= drawn.gpus
    busy = replace(node, gpu_free=tuple(free), cpus_free=cpus, memory_gib_free=memory)
    return busy, running


def busy_pool(
    trace: Sequence[PhillyJob], share: float, seed: int, count: int = NODES
) -> tuple[tuple[Node, ...], tuple[Running, ...]]:
    """The pool with ``share`` of its GPUs held by running jobs (single-node, from the trace)."""
    rng, singles = random.Random(seed + 1), [j for j in trace if j.gpus <= GPUS_PER_NODE]
    left = round(share * count * GPUS_PER_NODE)
    nodes, running = [], []
    for node in pool_nodes(count):
        filled, jobs = _fill(node, min(left, GPUS_PER_NODE), singles, rng) if left else (node, [])
        left -= sum(len(r.allocations[0].gpu_indices) for r in jobs)
        nodes.append(filled)
        running += jobs
    return tuple(nodes), tuple(running)


def snapshot(
    trace: list[PhillyJob], jobs: int, seed: int, busy: float = 0.0, count: int = NODES
) -> Snapshot:
    nodes, running = busy_pool(trace, busy, seed, count)
    return Snapshot(
        now_s=NOW_S,
        nodes=nodes,
        pools=(PoolInfo(POOL, cloud=False),),
        running=running,
        pending=pending_jobs(trace, jobs, seed),
    )


def timed_cycle(snap: Snapshot, candidates: int = 32) -> tuple[float, Plan]:
    config = SchedulerConfig(max_candidates=candidates or 10**9)
    start = time.perf_counter()
    plan = schedule(snap, Permissive(), config)
    return time.perf_counter() - start, plan


def whole_nodes(snap: Snapshot, plan: Plan) -> int:
    """Nodes with every GPU free after the plan: room for a whole-node job."""
    taken = {a.node for p in plan.placed() for a in p.allocations}
    return sum(1 for n in snap.nodes if n.name not in taken and n.whole_free == n.gpus)


def summarize(snap: Snapshot, plan: Plan, times: list[float]) -> dict[str, Any]:
    placed = plan.placed()
    allocated = sum(len(a.gpu_indices) * a.gpu_share for p in placed for a in p.allocations)
    capacity = sum(node.gpus for node in snap.nodes)
    busy = sum(job.gpus for job in snap.running)
    cycle_s = statistics.median(times)
    return {
        "jobs": len(snap.pending),
        "nodes": len(snap.nodes),
        "gpus": capacity,
        "running": len(snap.running),
        "busy_gpus": busy,
        "gangs": sum(1 for job in snap.pending if job.request.nodes > 1),
        "gpus_requested": sum(job.request.total_gpus for job in snap.pending),
        "runs": len(times),
        "cycle_s": round(cycle_s, 3),
        "cycle_s_min": round(min(times), 3),
        "decisions_per_s": round(len(snap.pending) / cycle_s, 1),
        "placed": len(placed),
        "gpu_allocation_pct": round(100 * (busy + allocated) / capacity, 2),
        "mean_score": round(statistics.fmean(p.score for p in placed), 4) if placed else None,
        "whole_nodes_left": whole_nodes(snap, plan),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=NODES, help="8-GPU nodes in the pool")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--busy", type=float, default=0.0, help="share of GPUs already held by running jobs"
    )
    parser.add_argument(
        "--candidates", type=int, default=32, help="nodes scored per pool (0: every one)"
    )
    parser.add_argument("--trace-dir", type=Path, default=PHILLY)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    trace = philly_jobs(require(args.trace_dir, "philly.csv"))
    snap = snapshot(trace, args.jobs, args.seed, args.busy, args.nodes)
    runs = [timed_cycle(snap, args.candidates) for _ in range(max(1, args.runs))]
    result = {
        "seed": args.seed,
        "candidates": args.candidates,
        **summarize(snap, runs[-1][1], [t for t, _ in runs]),
    }
    if args.json:
        print(json.dumps(result))
        return
    print(
        f"{result['jobs']:,} pending jobs ({result['gangs']} gangs, "
        f"{result['gpus_requested']:,.0f} GPUs asked) on {result['nodes']:,} nodes "
        f"({result['gpus']:,} GPUs, {result['busy_gpus']:,.0f} held by {result['running']:,} "
        f"running jobs): median cycle {result['cycle_s']} s "
        f"(min {result['cycle_s_min']}, {result['runs']} runs), "
        f"{result['decisions_per_s']:,.0f} decisions/s; placed {result['placed']:,} jobs, "
        f"{result['gpu_allocation_pct']}% of GPUs allocated after the cycle; mean score "
        f"{result['mean_score']}, {result['whole_nodes_left']:,} nodes left whole; "
        f"peak RSS {result['peak_rss_mib']:,} MiB"
    )


if __name__ == "__main__":
    main()
