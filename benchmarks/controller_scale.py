"""The controller's real cycle at the size of a large mesh, without Ray.

    python benchmarks/controller_scale.py [--nodes 1250] [--queued 10000] [--history 100000]
                                          [--runs 3] [--finish 0.01] [--seed 7]
                                          [--store sqlite|postgres] [--profile FILE] [--json]

One Ray pool (``provider: ray``) of ``--nodes`` nodes x 8 H100 (racks of 16 nodes, 4 racks per
switch, as ``benchmarks/schedule.py``), a state store holding ``--history`` finished jobs (each
with its attempt, its last event and its decision) and ``--queued`` pending jobs whose sizes
are drawn (seeded) from the Philly trace as ``schedule.py`` draws them (up to 8 GPUs: one
node; more: a gang of 8-GPU nodes). Filling the store is not timed: the jobs and attempts go in
through ``Store.create_all`` (one transaction per 50,000 records), the events through the
stores' own batched log append (``_append``, what ``record_decisions`` calls) and the
decisions through ``record_decisions``.

What is fake: only the pool. ``FakeRay`` stands where ``meshctl.pools.ray.RayPoolClient``
stands (the loop's ``PoolClient``: observe, submit, stop, read_log): it answers an
observation from nodes built once (no HTTP, no JSON parsing of the state API), takes
submissions into a dict (a job submitted is RUNNING at once) and ends a share of its
running jobs before each timed cycle. Everything else is the product: ``Controller.cycle``
(observe: the store's reads through ``History``; decide: ``decide`` and the scheduler; apply:
the step's store writes and the decisions, in a batch; record: the pool and node records)
over ``SqliteStore`` (WAL, a file in a temporary folder) or ``PostgresStore`` (a throwaway
server started with initdb/pg_ctl on a free port, ``--store postgres``). No node agents, no
cloud pools, no policies (permissive), no log copying.

The first cycle places what fits (the pool starts empty) and reads what a controller reads
once at start (runtime estimates, when nodes were last busy); the second sees all of those
jobs running: both are reported apart (``first_cycle_s``, ``second_cycle_s``). Then,
``--runs`` times: ``--finish`` of the running jobs end (SUCCEEDED in Ray) and one cycle sees
them end and fills the GPUs they free from the queue. Printed:
the median cycle and the median of each phase (observe, decide, apply, record: the loop's
own ``CycleReport.phases_s``), the decisions recorded by the timed cycles, jobs dispatched,
the peak RSS and the time to fill the store. ``--profile FILE`` writes a cProfile of the
timed cycles (``python -m pstats FILE``).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import math
import random
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from schedule import (
    GPUS_PER_NODE,
    NOW_S,
    PRIORITIES,
    PRIORITY_WEIGHTS,
    RACK_NODES,
    SWITCH_RACKS,
    TEAMS,
    request,
)
from traces import PHILLY, PhillyJob, philly_jobs, require

from meshctl.controller.deciding.decide import Rules
from meshctl.controller.loop import Controller, CycleReport
from meshctl.model.mesh import Mesh
from meshctl.pools.observed import (
    NODE_LABEL,
    RAY_ACTIVE,
    ObservedJob,
    ObservedNode,
    PoolObservation,
    Submission,
)
from meshctl.pools.ray import LogChunk
from meshctl.state import (
    AttemptRecord,
    AttemptState,
    Decision,
    Event,
    JobRecord,
    JobState,
    Store,
)

ROOT = Path(__file__).resolve().parents[1]
POOL = "big"  # the rest of the shape, the teams and priorities: schedule.py's
BATCH = 50_000  # records per fill transaction
FINISHED = (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)


def mesh(nodes: int) -> Mesh:
    """One Ray pool; its nodes declared in groups of a rack (their GPU model and topology)."""
    racks = math.ceil(nodes / RACK_NODES)
    groups = [
        {
            "name": f"r{rack:04d}",
            "count": min(RACK_NODES, nodes - rack * RACK_NODES),
            "gpus": GPUS_PER_NODE,
            "accelerator": {"model": "H100", "memory_gib": "80GiB"},
            "cpus": 128,
            "memory_gib": "2048GiB",
            "nic_gbps": 400,
            "labels": {"rack": f"r{rack:04d}", "switch": f"s{rack // SWITCH_RACKS:03d}"},
        }
        for rack in range(racks)
    ]
    pool = {"name": POOL, "provider": "ray", "address": "http://ray.invalid:8265",
            "nodes": groups, "cost": {"usd_per_gpu_hour": 1.1}}  # fmt: skip
    doc = {"apiVersion": "meshctl/v1", "kind": "Mesh", "metadata": {"name": "scale"},
           "spec": {"pools": [pool]}}  # fmt: skip
    return Mesh.model_validate(doc)


def node_names(nodes: int) -> list[str]:
    groups = mesh(nodes).spec.pools[0]
    return [name for group in getattr(groups, "nodes", []) for name in group.node_names()]


class FakeRay:
    """A Ray cluster's answers from memory: its nodes, and the jobs submitted to it."""

    def __init__(self, names: list[str], rng: random.Random) -> None:
        self.rng = rng
        self.nodes = tuple(
            ObservedNode(
                n,
                f"ray-{i:06d}",
                True,
                GPUS_PER_NODE,
                128.0,
                2048.0,
                "H100",
                {NODE_LABEL: n},
                address=f"10.{i // 65536}.{i // 256 % 256}.{i % 256}",
                gpus_in_use=None,
            )
            for i, n in enumerate(names)
        )
        self.jobs: dict[str, ObservedJob] = {}
        self.now_s = NOW_S

    def observe(self) -> PoolObservation:
        return PoolObservation(POOL, True, "", self.nodes, dict(self.jobs))

    def submit(self, submission: Submission) -> str:
        sid = submission.submission_id
        if sid in self.jobs:
            return "adopted"
        self.jobs[sid] = ObservedJob(sid, "RUNNING", start_s=self.now_s)
        return "submitted"

    def stop(self, submission_id: str) -> bool:
        found = self.jobs.get(submission_id)
        if found is None or found.status not in RAY_ACTIVE:
            return False
        self.jobs[submission_id] = ObservedJob(submission_id, "STOPPED", end_s=self.now_s)
        return True

    def read_log(self, submission_id: str, offset: int, limit: int) -> LogChunk | None:
        return None

    def finish(self, share: float) -> int:
        """End ``share`` of the running jobs, as if their commands exited 0."""
        running = sorted(k for k, j in self.jobs.items() if j.status in RAY_ACTIVE)
        ended = self.rng.sample(running, round(len(running) * share))
        for sid in ended:
            job = self.jobs[sid]
            self.jobs[sid] = ObservedJob(sid, "SUCCEEDED", start_s=job.start_s, end_s=self.now_s)
        return len(ended)


class Clock:
    def __init__(self, pool: FakeRay) -> None:
        self.pool, self.now_s = pool, NOW_S

    def __call__(self) -> float:
        self.now_s += 1.0
        self.pool.now_s = self.now_s
        return self.now_s


def spec(name: str, team: str, drawn: PhillyJob) -> dict[str, Any]:
    """A batch job's file: ``drawn.gpus`` GPUs on one node, or a gang of 8-GPU nodes."""
    sized = request(drawn.gpus)  # as schedule.py sizes it
    nodes, per_node = sized.nodes, int(sized.gpus)
    resources: dict[str, Any] = {"gpus": per_node, "cpus": 4 * per_node,
                                 "memory_gib": 32 * per_node, "nodes": nodes}  # fmt: skip
    body: dict[str, Any] = {"kind": "batch", "entrypoint": "python train.py", "team": team,
                            "resources": resources, "working_dir": "",
                            "limits": {"max_runtime_s": max(60.0, drawn.duration_s)}}  # fmt: skip
    if nodes > 1:
        resources["topology"] = {"domain": "switch"}
        body["reserve"] = "workers"
    return {"apiVersion": "meshctl/v1", "kind": "Job", "metadata": {"name": name}, "spec": body}


def job_record(i: int, state: JobState, drawn: PhillyJob, rng: random.Random) -> JobRecord:
    team = rng.choice(TEAMS)
    name = f"train-{i % 500:03d}"
    at = NOW_S - rng.uniform(0.0, 86_400.0 * 30 if state in FINISHED else 3600.0)
    priority = rng.choices(PRIORITIES, PRIORITY_WEIGHTS)[0]
    pool = POOL if state in FINISHED else None
    return JobRecord(f"{name}-{i:07x}", name, team, state, priority,
                     spec(name, team, drawn), pool, at, at)  # fmt: skip


def fill(store: Store, queued: int, history: int, trace: list[PhillyJob], seed: int) -> None:
    """``history`` finished jobs (each its attempt, its last event and its decision), then
    ``queued`` pending ones, in batches of ``BATCH``."""
    rng = random.Random(seed)
    for start in range(0, history, BATCH):
        records: list[Any] = []
        logs: list[Any] = []
        for i in range(start, min(history, start + BATCH)):
            state = FINISHED[0] if i % 10 < 8 else FINISHED[1 + i % 2]
            job = job_record(i, state, rng.choice(trace), rng)
            ended = job.submitted_at_s + rng.uniform(60.0, 7200.0)
            attempt = AttemptRecord(
                f"{job.id}-1", job.id, 1, POOL, f"meshctl-{job.id}-1",
                AttemptState.SUCCEEDED if state is JobState.SUCCEEDED else AttemptState.FAILED,
                job.submitted_at_s, ended,
            )  # fmt: skip
            records += [job, attempt]
            logs.append(Event(ended, f"job.{state.value}", job.id, "ended", {"to": state.value}))
        store.create_all(records)
        store._append(logs)  # type: ignore[attr-defined]  # the stores' batched log write
        store.record_decisions(
            [Decision(e.at_s, str(e.job_id), "placed", "", {"summary": "placed"}) for e in logs]
        )
    pending = [job_record(history + i, JobState.PENDING, rng.choice(trace), rng)
               for i in range(queued)]  # fmt: skip
    for start in range(0, len(pending), BATCH):
        store.create_all(pending[start : start + BATCH])


@contextmanager
def opened(kind: str, folder: Path) -> Iterator[Store]:
    if kind == "sqlite":
        from meshctl.state.sqlite_dialect import SqliteStore

        with SqliteStore(folder / "state.db") as store:
            yield store
        return
    sys.path.insert(0, str(ROOT / "tests"))
    from pgserver import pg_server  # the tests' throwaway server: initdb, pg_ctl, a free port

    from meshctl.state.postgres_dialect import PostgresStore

    with pg_server() as server, PostgresStore(server.database()) as store:
        yield store


def measure(opts: argparse.Namespace) -> dict[str, Any]:
    trace = philly_jobs(require(PHILLY, "philly.csv"))
    rng = random.Random(opts.seed)
    with (
        tempfile.TemporaryDirectory(prefix="controller-scale-") as tmp,
        opened(opts.store, Path(tmp)) as store,
    ):
        began = time.perf_counter()
        fill(store, opts.queued, opts.history, trace, opts.seed)
        fill_s = time.perf_counter() - began
        pool = FakeRay(node_names(opts.nodes), rng)
        loop = Controller(store, Rules(mesh(opts.nodes), {}, None), {POOL: pool}, Clock(pool))
        first = [loop.cycle(), loop.cycle()]  # places what fits; sees it all running
        seq = _last_decision(store)
        reports: list[CycleReport] = []
        profile = cProfile.Profile() if opts.profile else None
        for _ in range(opts.runs):
            pool.finish(opts.finish)
            if profile is not None:
                profile.enable()
            reports.append(loop.cycle())
            if profile is not None:
                profile.disable()
        if profile is not None:
            profile.dump_stats(opts.profile)
        recorded = _last_decision(store) - seq
    return _summary(opts, fill_s, first, reports, recorded)


def _last_decision(store: Store) -> int:
    """The seq of the last decision recorded (seqs count up by one, in each store)."""
    seq, step = 0, 1 << 24
    while step:  # the log is read by seq only: a binary search of the last one
        if store.decisions(after_seq=seq + step - 1, limit=1):
            seq += step
        step //= 2
    return seq


def _summary(
    opts: argparse.Namespace,
    fill_s: float,
    first: list[CycleReport],
    reports: list[CycleReport],
    recorded: int,
) -> dict[str, Any]:
    phases = {
        name: round(statistics.median(r.phases_s[name] for r in reports), 4)
        for name in ("observe", "decide", "apply", "record")
    }
    return {
        "nodes": opts.nodes,
        "gpus": opts.nodes * GPUS_PER_NODE,
        "queued": opts.queued,
        "history": opts.history,
        "store": opts.store,
        "runs": opts.runs,
        "fill_s": round(fill_s, 2),
        "first_cycle_s": round(first[0].duration_s, 3),
        "first_phases_s": {k: round(v, 4) for k, v in first[0].phases_s.items()},
        "first_dispatched": first[0].dispatched,
        "second_cycle_s": round(first[1].duration_s, 3),
        "second_phases_s": {k: round(v, 4) for k, v in first[1].phases_s.items()},
        "second_transitions": first[1].transitions,
        "cycle_s_median": round(statistics.median(r.duration_s for r in reports), 4),
        "cycle_s_max": round(max(r.duration_s for r in reports), 4),
        "phases_s_median": phases,
        "jobs_seen": reports[-1].jobs,
        "dispatched_per_cycle": statistics.median(r.dispatched for r in reports),
        "transitions_per_cycle": statistics.median(r.transitions for r in reports),
        "decisions_recorded": recorded,
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=1250)
    parser.add_argument("--queued", type=int, default=10_000)
    parser.add_argument("--history", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--finish", type=float, default=0.01, help="share ending per cycle")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--store", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--profile", help="write a cProfile of the timed cycles here")
    parser.add_argument("--json", action="store_true")
    opts = parser.parse_args()
    out = measure(opts)
    if opts.json:
        print(json.dumps(out))
        return
    print(
        f"{out['nodes']:,} nodes, {out['queued']:,} queued, {out['history']:,} finished "
        f"({out['store']}, filled in {out['fill_s']} s)\n"
        f"first cycle {out['first_cycle_s']} s ({out['first_dispatched']:,} dispatched), "
        f"second {out['second_cycle_s']} s ({out['second_transitions']:,} transitions)\n"
        f"cycle median {out['cycle_s_median']} s over {out['runs']} runs: "
        + ", ".join(f"{k} {v} s" for k, v in out["phases_s_median"].items())
        + f"\n{out['decisions_recorded']:,} decisions recorded by the timed cycles, "
        f"peak RSS {out['peak_rss_mib']} MiB"
    )


if __name__ == "__main__":
    main()
