"""How long ``meshctl explain JOB-ID`` takes against a store of a large mesh's history.

    python benchmarks/explain_scale.py [--history 1000000] [--queued 100000] [--runs 5]
                                       [--store sqlite|postgres] [--json]

Fills a store as ``benchmarks/controller_scale.py`` does (``--history`` finished jobs, each
with its attempt, its last event and its decision, then ``--queued`` pending jobs; not timed),
records a scheduler decision for one pending job, then times ``meshctl explain`` of that job
by its id, ``--runs`` times, two ways: the command itself in a fresh process (``python -m
meshctl explain ID -o json``, interpreter start-up included; SQLite only, the store in the
command's home) and the reads it makes in this process (``app.explain.stored`` after ``find``: the
job by its key, its attempts, decisions and events by the job's indexed id). Medians. A job
given by its name or a prefix of its id is not timed: that lists every job (see
docs/SCALING.md). Exits 2 when the trace folder is missing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from controller_scale import fill, opened
from schedule import NOW_S
from traces import PHILLY, philly_jobs, require

from meshctl.app.context import AppContext
from meshctl.app.explain import stored
from meshctl.app.jobs import find
from meshctl.state import Decision, JobRecord, JobState, Store


def pending_job(store: Store) -> str:
    """A pending job's id, with a decision recorded for it as the controller records one."""
    job = store.list(JobRecord, state=JobState.PENDING, limit=1)[0]
    said = {"summary": "pending: 12,500 nodes; 12,500 lack 8 GPUs free", "status": "pending"}
    store.record_decisions([Decision(NOW_S, job.id, "pending", "", said)])
    return job.id


def in_process(home: Path, store: Store, job_id: str, runs: int) -> float:
    context = AppContext(home, None, None)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        data = stored(context, store, find(store, job_id))
        times.append(time.perf_counter() - start)
        if data["id"] != job_id or not data["decision"]:
            raise SystemExit(f"explain read the wrong job or no decision: {data}")
    return statistics.median(times)


def command(home: Path, job_id: str, runs: int) -> float:
    env = {**os.environ, "MESHCTL_HOME": str(home)}
    env.pop("MESHCTL_SERVER", None)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "meshctl", "explain", job_id, "-o", "json"],
            env=env, capture_output=True, text=True, check=False,
        )  # fmt: skip
        times.append(time.perf_counter() - start)
        if done.returncode != 0 or job_id not in done.stdout:
            raise SystemExit(f"meshctl explain failed: {done.stderr.strip()[-400:]}")
    return statistics.median(times)


def measure(opts: argparse.Namespace) -> dict[str, Any]:
    trace = philly_jobs(require(PHILLY, "philly.csv"))
    with tempfile.TemporaryDirectory(prefix="meshctl-explain-") as tmp:
        home = Path(tmp)
        with opened(opts.store, home) as store:
            start = time.perf_counter()
            fill(store, opts.queued, opts.history, trace, opts.seed)
            job_id = pending_job(store)
            filled = time.perf_counter() - start
            reads = in_process(home, store, job_id, opts.runs)
        whole = command(home, job_id, opts.runs) if opts.store == "sqlite" else None
    return {
        "store": opts.store,
        "history": opts.history,
        "queued": opts.queued,
        "runs": opts.runs,
        "explain_command_s": None if whole is None else round(whole, 3),
        "explain_reads_s": round(reads, 4),
        "fill_s": round(filled, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--history", type=int, default=1_000_000)
    parser.add_argument("--queued", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--store", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--json", action="store_true")
    opts = parser.parse_args()
    out = measure(opts)
    if opts.json:
        print(json.dumps(out))
        return
    command_s = out["explain_command_s"]
    said = f"the command {command_s:.3f} s, " if command_s is not None else ""
    print(
        f"meshctl explain JOB-ID on a {opts.store} store of {opts.history:,} finished and "
        f"{opts.queued:,} queued jobs: {said}its reads {out['explain_reads_s'] * 1000:.1f} ms "
        f"(medians of {opts.runs}; filling took {out['fill_s']} s)"
    )


if __name__ == "__main__":
    main()
