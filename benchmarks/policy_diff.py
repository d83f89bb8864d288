"""How long ``meshctl policy diff`` takes on a month of the 10,000-GPU example's history.

    python benchmarks/policy_diff.py [--days 30] [--start-day 26.6] [--replicate 4]
                                     [--runs 1] [--json]

The history: the workload of ``benchmarks/sim_speed.py`` (the Philly trace's busiest month
from ``--start-day``, each job ``--replicate`` times, on examples/sim/mesh.yaml) run once by
the simulator under the example's burst policies (examples/sim/policies: common + burst.yaml),
and written to a SQLite store as the controller records jobs: each job's file, its
submission, its attempt (pool, start, end). That stands in for a month the controller ran;
writing it is not timed.

Timed, as ``meshctl policy diff --base burst --head onprem-only`` does it
(``meshctl.app.policydiff``): the history read back from the store, replayed through the
engine under the base set (burst) and the head set (onprem-only), and the two compared job by
job, with the rules that differ named for each moved job. Printed (and with ``--json``):
``jobs`` (replayed), ``wall_s`` and its parts (``read_s``, ``replay_s`` for both runs,
``compare_s``), ``moved``, ``fidelity`` (the base replay against the recorded run: the same
engine, with the controller's settings rather than ``sim run``'s, so not 100 %), and the
process's peak resident memory. Several ``--runs``: medians. Exits 2 when the trace folder
is missing.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

EXAMPLE = ROOT / "examples" / "sim"
DAY_S = 86_400.0
EPOCH_S = 1_767_225_600.0  # 2026-01-01: where the recorded month starts


def _policies(name: str) -> Any:
    from meshctl.files.policies import read_policy_files
    from meshctl.policy.compiled import compile_policies

    files = read_policy_files([EXAMPLE / "policies" / "common", EXAMPLE / "policies" / name])
    return compile_policies(files.policies)


def record(args: argparse.Namespace, home: Path) -> int:
    """The month run once under the burst set, written to ``home``'s store; its job count."""
    from meshctl.catalog import load_catalog
    from meshctl.files.policies import read_mesh
    from meshctl.sim.core.engine import simulate
    from meshctl.sim.core.workload import job_document
    from meshctl.sim.run import RunSpec, config_of, jobs_of, sim_mesh
    from meshctl.state import AttemptRecord, AttemptState, JobRecord, JobState, open_store

    mesh = read_mesh(EXAMPLE / "mesh.yaml")
    catalogs = {p: load_catalog(p).catalog for p in ("aws", "gcp")}
    spec = RunSpec(mesh=EXAMPLE / "mesh.yaml", trace="philly", days=args.days,
                   start_day=args.start_day, replicate=args.replicate)  # fmt: skip
    the_mesh = sim_mesh(mesh, catalogs, spec.comm_fraction)
    jobs = jobs_of(spec, 8)
    config = config_of(spec)
    result = simulate(the_mesh, jobs, config, _policies("burst.yaml"))
    records: list[Any] = []
    for r in result.jobs:
        job = r.job
        document = job_document(job, config.cpus_per_gpu, config.memory_gib_per_gpu, "switch")
        submitted = EPOCH_S + job.arrival_s
        start = None if r.first_start_s is None else EPOCH_S + r.first_start_s
        end = None if r.end_s is None else EPOCH_S + r.end_s
        state = JobState.PENDING if start is None else JobState.RUNNING
        if end is not None:
            state = JobState.SUCCEEDED if r.failed_reason is None else JobState.FAILED
        records.append(JobRecord(job.id, document["metadata"]["name"], job.team, state,
                                 r.priority, document, r.last_pool, submitted,
                                 end or start or submitted))  # fmt: skip
        if start is not None and r.last_pool is not None:
            done = AttemptState.SUCCEEDED if end is not None else AttemptState.RUNNING
            records.append(AttemptRecord(f"{job.id}-1", job.id, 1, r.last_pool,
                                         f"meshctl-{job.id}-1", done, start, end))  # fmt: skip
    with open_store(home) as store:
        for i in range(0, len(records), 20_000):
            store.create_all(records[i : i + 20_000])
    return len(result.jobs)


def diff(args: argparse.Namespace, home: Path) -> dict[str, Any]:
    """``policy diff``'s work on the recorded month, timed part by part."""
    from meshctl.app.policydiff import read_history, replay_both, replay_of, rules_of
    from meshctl.catalog import load_catalog
    from meshctl.files.policies import read_mesh
    from meshctl.sim.core.replay_diff import compare
    from meshctl.state import open_store

    mesh = read_mesh(EXAMPLE / "mesh.yaml")
    catalogs = {p: load_catalog(p).catalog for p in ("aws", "gcp")}
    base, head = _policies("burst.yaml"), _policies("onprem-only.yaml")
    start = time.perf_counter()
    with open_store(home) as store:
        history = read_history(store, EPOCH_S, EPOCH_S + args.days * DAY_S)
    read = time.perf_counter()
    sim, jobs, config = replay_of(history, mesh, catalogs)
    runs = replay_both(sim, jobs, config, (base, head))
    replayed = time.perf_counter()
    report = compare(history, runs[0], runs[1], sim, rules_of(history, mesh, catalogs, base, head))
    end = time.perf_counter()
    return {
        "jobs": len(history.jobs),
        "wall_s": round(end - start, 2),
        "read_s": round(read - start, 2),
        "replay_s": round(replayed - read, 2),
        "compare_s": round(end - replayed, 2),
        "moved": report["moved"],
        "fidelity": report["fidelity"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=float, default=30.0)
    parser.add_argument("--start-day", type=float, default=26.6)
    parser.add_argument("--replicate", type=int, default=4)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    from meshctl.sim.run.traces import traces_dir

    if not (traces_dir() / "philly").is_dir():
        print(f"no Philly trace under {traces_dir()}", file=sys.stderr)
        raise SystemExit(2)
    with tempfile.TemporaryDirectory(prefix="meshctl-policydiff-") as tmp:
        home = Path(tmp) / "home"
        started = time.perf_counter()
        recorded = record(args, home)
        setup_s = time.perf_counter() - started
        results = [diff(args, home) for _ in range(args.runs)]
    out: dict[str, Any] = {"recorded_jobs": recorded, "setup_s": round(setup_s, 1)}
    for key in ("wall_s", "read_s", "replay_s", "compare_s"):
        out[key] = statistics.median(r[key] for r in results)
    out |= {
        "jobs": results[0]["jobs"],
        "moved": results[0]["moved"],
        "fidelity": results[0]["fidelity"],
        "runs": args.runs,
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }
    if args.json:
        print(json.dumps(out))
        return
    f = out["fidelity"]
    print(f"policy diff over {out['jobs']:,} jobs ({args.days:g} days): {out['wall_s']} s "
          f"(read {out['read_s']} s, two replays {out['replay_s']} s, compare "
          f"{out['compare_s']} s); {out['moved']:,} moved; fidelity {f['same_pool_share']:.1%} "
          f"same pool, start error p50 {f['start_error_p50_s']} s; peak RSS "
          f"{out['peak_rss_mib']} MiB")  # fmt: skip


if __name__ == "__main__":
    main()
