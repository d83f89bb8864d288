"""Many submitters at once: is every acknowledged submission stored, once, under its own id?

    python benchmarks/submit_storm.py [--jobs 10000] [--processes 8] [--json]

``--processes`` processes (spawned, not forked) share one fresh embedded home (``MESHCTL_HOME``
in a temporary folder, no controller). Each checks one job against the mesh as ``meshctl
submit`` does (``controller.submit.check``, once), waits for the others, then stores its share
of ``--jobs`` in a loop exactly as the command stores one: open the store, ``enqueue``, close.
Every job has the same name, so every id is the name and random hex: the worst case for ids
that must not collide. A submission is acknowledged when ``enqueue`` returns its record.

Then the store is read back:

- ``stored``: the acknowledged ids found in the store;
- ``duplicated``: ids given to more than one acknowledged submission, plus ids stored (or
  whose ``job.pending`` event was written) more than once;
- ``lost``: acknowledged but not stored;
- ``failed``: submissions that raised (a busy store, a taken id), with ``errors``, the first
  few messages; ``unacknowledged``: stored jobs no submission was told about.

``submit_ms_median`` (and ``_p99``) is the time of one stored submission (open, enqueue,
close) under contention, the part of ``meshctl submit`` the store decides;
``benchmarks/cli_startup.py`` measures the whole command.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

NAME = "storm"
_start: Any = None  # the barrier every worker waits at (set in each worker by _init)


@dataclass
class Share:
    """What one worker did: the ids it was given, each submission's time, what failed."""

    ids: list[str] = field(default_factory=list)
    latency_ms: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def _init(barrier: Any) -> None:
    global _start
    _start = barrier


def submit_many(home: str, count: int) -> Share:
    """``count`` submissions as ``meshctl submit`` stores one (``app.submitting.submit_job``)."""
    import datetime as dt

    from meshctl.app.context import AppContext
    from meshctl.controller.submit import check, enqueue
    from meshctl.model import Job

    context = AppContext(Path(home), None, None)
    job = Job.model_validate(
        {
            "apiVersion": "meshctl/v1",
            "kind": "Job",
            "metadata": {"name": NAME},
            "spec": {"kind": "batch", "entrypoint": "python -c pass", "resources": {"gpus": 1}},
        }
    )
    mesh, catalogs, policies = context.planning()
    admission = check(job, mesh, catalogs, policies, dt.datetime.now(dt.UTC))
    share = Share()
    _start.wait()
    for _ in range(count):
        began = time.perf_counter()
        try:
            with context.store() as store:
                record = enqueue(store, job, admission, None, context.home, time.time())
        except Exception as err:  # a failed submission is counted, not fatal
            share.errors.append(f"{type(err).__name__}: {err}")
            continue
        share.latency_ms.append((time.perf_counter() - began) * 1000)
        share.ids.append(record.id)
    return share


def storm(home: Path, jobs: int, processes: int) -> tuple[list[Share], float]:
    """Every worker's share, and the seconds from the start signal to the last submission."""
    spawn = multiprocessing.get_context("spawn")
    barrier = spawn.Barrier(processes + 1)
    counts = [jobs // processes + (i < jobs % processes) for i in range(processes)]
    with ProcessPoolExecutor(processes, spawn, initializer=_init, initargs=(barrier,)) as pool:
        futures = [pool.submit(submit_many, str(home), n) for n in counts]
        barrier.wait(timeout=600)  # every worker has read the mesh: go
        started = time.perf_counter()
        shares = [f.result() for f in futures]
    return shares, time.perf_counter() - started


def audit(home: Path, shares: list[Share]) -> dict[str, Any]:
    """The store read back against what the submitters were told."""
    from meshctl.state import JobRecord, open_store

    acked = Counter(i for s in shares for i in s.ids)
    with open_store(home) as store:
        rows = Counter(j.id for j in store.list(JobRecord))
        pending = Counter(e.job_id for e in store.events() if e.kind == "job.pending")
    given_twice = sum(n - 1 for n in acked.values() if n > 1)
    stored_twice = sum(n - 1 for n in rows.values() if n > 1)
    logged_twice = sum(n - 1 for n in pending.values() if n > 1)
    errors = [e for s in shares for e in s.errors]
    return {
        "stored": sum(1 for i in acked if i in rows),
        "duplicated": given_twice + stored_twice + logged_twice,
        "lost": sum(1 for i in acked if i not in rows),
        "failed": len(errors),
        "unacknowledged": sum(1 for i in rows if i not in acked),
        "errors": sorted(set(errors))[:5],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="meshctl-storm-") as tmp:
        home = Path(tmp) / "home"
        os.chdir(tmp)  # the shipped mesh, policies and catalogs, not a ./mesh.yaml of the caller
        shares, wall_s = storm(home, args.jobs, args.processes)
        found = audit(home, shares)
    latency = sorted(ms for s in shares for ms in s.latency_ms) or [0.0]
    result = {
        "jobs": args.jobs,
        "processes": args.processes,
        "stored": found["stored"],
        "duplicated": found["duplicated"],
        "lost": found["lost"],
        "submit_ms_median": round(statistics.median(latency), 2),
        "submit_ms_p99": round(latency[min(len(latency) - 1, int(0.99 * len(latency)))], 2),
        "wall_s": round(wall_s, 2),
        "submits_per_s": round(len(latency) / wall_s, 1),
        **found,
    }
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key}: {value}")
    bad = found["duplicated"] or found["lost"] or found["failed"] or found["unacknowledged"]
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
