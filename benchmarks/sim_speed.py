"""How fast the simulator replays a month of a 10,000-GPU (or larger) mesh, and its event loop
against SimPy.

    python benchmarks/sim_speed.py [--days 30] [--start-day 26.6] [--gpus 10000]
                                   [--replicate 4] [--failures stepfun]
                                   [--policies none|burst|onprem-only] [--repeat 1]
                                   [--no-replay] [--runs 1] [--json]

The run: the Microsoft Philly trace (../shared/traces/philly/philly.csv) from ``--start-day``
(day 26.6 is 2017-10-01, the start of its busiest month) for ``--days``, each job replicated
``--replicate`` times, on the example mesh (examples/sim/mesh.yaml: 1,250 nodes x 8 H100 in 125
racks, a fat-tree oversubscribed 2:1, a GCP and an AWS burst pool; ``--gpus`` other than 10,000
gives its on-prem pool that many GPUs in racks of 10 nodes, 5 racks a switch, and replicates
the trace ``--replicate`` x gpus / 10,000 times, so the load stays the same), node failures
from the ``--failures`` preset, seed 0, a scheduling cycle at most every 60 s, Young/Daly
checkpoints. ``--policies``: none (every pool usable, nothing bursts), or one of the example
policy sets (examples/sim/policies). ``--repeat K`` runs the window's jobs K times back to
back, each copy ``--days`` later (``--days 30.42 --repeat 12``: a year at the busiest month's
load; the trace itself spans 109 days). The same code path as ``meshctl sim run``.

Printed (and with ``--json``): ``events_per_s`` (events the engine handled / wall seconds of
the simulation, trace loading excluded), ``wall_s``, ``peak_rss_mib`` (the process's peak
resident memory), and ``simpy_ratio``: every event the run scheduled (those still in the
heap when the last job ended included), replayed through a SimPy event loop and through the
engine's own loop (a ``heapq`` of tuples and a dispatch table), each
with the same trivial handler; SimPy's wall time over ours. The replay schedules every event
at the time the run fired it, so both loops do exactly the same pushes, pops and dispatches;
it measures the event machinery, not the scheduler (which both would call alike);
``--no-replay`` skips it. Several ``--runs``: medians. Exits 2 when the trace folder is missing.
"""

from __future__ import annotations

import argparse
import gc
import heapq
import json
import resource
import statistics
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from traces import PHILLY, require

from meshctl.catalog import load_catalog
from meshctl.files.policies import read_mesh, read_policy_files
from meshctl.model.mesh import Mesh, RayPool
from meshctl.policy.compiled import compile_policies
from meshctl.sim.core import engine as sim
from meshctl.sim.core.workload import DAY_S, SimJob
from meshctl.sim.run import RunSpec, config_of, jobs_of, sim_mesh

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "sim"
EXAMPLE_GPUS = 10_000  # the example mesh's on-prem pool


class Recording(sim.Engine):
    """The engine, noting each event it schedules: (time, kind)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fired: list[tuple[float, int]] = []
        self.state.clock.on_push = lambda t, kind: self.fired.append((t, int(kind)))


def scaled(mesh: Mesh, gpus: int) -> Mesh:
    """The example mesh with ``gpus`` on-prem GPUs: its first rack's nodes, repeated."""
    onprem = mesh.spec.pools[0]
    assert isinstance(onprem, RayPool)
    rack = onprem.nodes[0]
    per_rack = int(rack.count * rack.gpus)
    if gpus % per_rack:
        raise SystemExit(f"--gpus: expected a multiple of {per_rack} (racks of {rack.count} nodes)")
    racks = [
        rack.model_copy(update={"name": f"r{i:04d}", "labels": {"rack": f"r{i:04d}",
                                                                "switch": f"s{i // 5:03d}"}})
        for i in range(gpus // per_rack)
    ]  # fmt: skip
    pools = [onprem.model_copy(update={"nodes": racks}), *mesh.spec.pools[1:]]
    return mesh.model_copy(update={"spec": mesh.spec.model_copy(update={"pools": pools})})


def simulate(args: argparse.Namespace, record: bool) -> tuple[float, sim.Engine]:
    mesh = read_mesh(EXAMPLE / "mesh.yaml")
    if args.gpus != EXAMPLE_GPUS:
        mesh = scaled(mesh, args.gpus)
    catalogs = {p: load_catalog(p).catalog for p in ("aws", "gcp")}
    policies = None
    if args.policies != "none":
        files = read_policy_files(
            [EXAMPLE / "policies" / "common", EXAMPLE / "policies" / f"{args.policies}.yaml"]
        )
        policies = compile_policies(files.policies)
    spec = RunSpec(
        mesh=EXAMPLE / "mesh.yaml",
        trace="philly",
        days=args.days,
        start_day=args.start_day,
        replicate=replicas(args),
        failures=args.failures,
    )
    simmesh = sim_mesh(mesh, catalogs, spec.comm_fraction)
    jobs = repeated(jobs_of(spec, 8), args.repeat, args.days * DAY_S)
    # every copy's window, and run until the last job ends (``sim run`` stops at the window's
    # end; the figures in docs/SIMULATOR.md were measured with the drain)
    config = replace(config_of(spec), window_s=args.days * args.repeat * DAY_S, until_s=None)
    engine = (Recording if record else sim.Engine)(simmesh, jobs, config, policies)
    gc.collect()
    start = time.perf_counter()
    engine.run()
    return time.perf_counter() - start, engine


def repeated(jobs: list[SimJob], times: int, span_s: float) -> list[SimJob]:
    """The window's jobs ``times`` times back to back (ids ``id@k``), each copy ``span_s``
    later than the one before: a year at the load of one month."""
    if times == 1:
        return jobs
    return [
        replace(
            job,
            id=f"{job.id}@{k}",
            arrival_s=job.arrival_s + k * span_s,
            deadline_s=None if job.deadline_s is None else job.deadline_s + k * span_s,
        )
        for k in range(times)
        for job in jobs
    ]


def replicas(args: argparse.Namespace) -> int:
    return max(1, round(int(args.replicate) * int(args.gpus) / EXAMPLE_GPUS))


def replay_ours(fired: list[tuple[float, int]]) -> float:
    """The engine's loop: tuples on a heap, a dispatch table."""
    handled = [0] * 16

    def handler(kind: int) -> None:
        handled[kind] += 1

    table = dict.fromkeys(range(16), handler)
    start = time.perf_counter()
    heap: list[tuple[float, int, int, Any, Any]] = []
    for seq, (t, kind) in enumerate(fired):
        heapq.heappush(heap, (t, kind, seq, None, None))
    while heap:
        _, kind, _, _, _ = heapq.heappop(heap)
        table[kind](kind)
    return time.perf_counter() - start


def replay_simpy(fired: list[tuple[float, int]]) -> float:
    """The same events as SimPy timeouts with a callback each (SimPy's cheapest way)."""
    import simpy

    handled = [0] * 16
    start = time.perf_counter()
    env = simpy.Environment()
    for t, kind in fired:
        event = env.timeout(t, kind)
        event.callbacks.append(lambda e: handled.__setitem__(e.value, handled[e.value] + 1))
    env.run()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--days", type=float, default=30.0)
    parser.add_argument("--start-day", type=float, default=26.6)
    parser.add_argument("--gpus", type=int, default=EXAMPLE_GPUS, help="on-prem GPUs")
    parser.add_argument("--replicate", type=int, default=4, help="at 10,000 GPUs")
    parser.add_argument("--failures", default="stepfun")
    parser.add_argument("--policies", default="none", choices=("none", "burst", "onprem-only"))
    parser.add_argument("--repeat", type=int, default=1, help="the window, back to back")
    parser.add_argument("--no-replay", action="store_true", help="skip the SimPy comparison")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    require(PHILLY, "philly.csv")

    walls, engine = [], None
    for i in range(args.runs):
        wall, engine = simulate(args, record=i == 0 and not args.no_replay)
        walls.append(wall)
    assert engine is not None
    fired: list[tuple[float, int]] = getattr(engine, "fired", [])
    ours = statistics.median(replay_ours(fired) for _ in range(3)) if fired else 0.0
    theirs = statistics.median(replay_simpy(fired) for _ in range(3)) if fired else 0.0
    wall = statistics.median(walls)
    events = engine.state.totals.events
    out = {
        "days": args.days,
        "repeat": args.repeat,
        "gpus": args.gpus,
        "replicate": replicas(args),
        "failures": args.failures,
        "policies": args.policies,
        "jobs": len(engine.state.jobs),
        "events": events,
        "cycles": engine.state.totals.cycles,
        "node_failures": engine.state.totals.node_failures,
        "events_per_s": round(events / wall),
        "wall_s": round(wall, 2),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "replay_events": len(fired),
        "replay_ours_s": round(ours, 3),
        "replay_simpy_s": round(theirs, 3),
        "simpy_ratio": round(theirs / ours, 2) if fired else None,
    }
    if args.json:
        print(json.dumps(out))
        return
    print(
        f"{out['days']:g} days of Philly x{out['replicate']}"
        f"{f' repeated {args.repeat} times' if args.repeat > 1 else ''} ({out['jobs']:,} jobs) "
        f"on {args.gpus:,} GPUs, "
        f"failures {out['failures']}, policies {out['policies']}: {events:,} events, "
        f"{out['cycles']:,} cycles, {out['node_failures']} node failures in {wall:.1f} s "
        f"({out['events_per_s']:,} events/s), peak RSS {out['peak_rss_mib']} MiB"
    )
    if not fired:
        return
    print(
        f"event loop replay of {len(fired):,} events: ours {ours:.3f} s, SimPy {theirs:.3f} s "
        f"(SimPy / ours = {out['simpy_ratio']})"
    )


if __name__ == "__main__":
    main()
