"""A simulator sweep on the embedded mesh against the same runs one after another.

    python benchmarks/sim_sweep.py [--runs 32] [--days 0.75] [--json]

The runs: the example (examples/sim/mesh.yaml, 10,000 GPUs; the policy sets onprem-only and
burst of examples/sim/policies), the Philly trace from day 27 for ``--days`` with each job 16
times and StepFun failures, ``--runs / 2`` seeds for each policy set (one run takes a few
seconds here).

- sweep: ``meshctl up`` brings the embedded mesh up in a temporary home (the default mesh:
  its local pool is a Ray cluster of a head and three 1-CPU nodes on this machine, with its
  node agents and the controller running, as a user has it), then ``meshctl sim sweep``
  runs every run as a Ray task there (one CPU each, so three at once); timed from the
  command's start to its exit (start-up, connecting, gathering included). The mesh is
  brought down after.
- serial: the same runs in this process, one after another (``meshctl.sim.run.run``, what
  each task runs), policies compiled once per set.

Printed (and with ``--json``, one object): both wall times, ``speedup`` (serial over sweep),
the time ``meshctl up`` took (not in either), and whether every run's report was the same
both ways (``same_reports``: the same seed gives the same report wherever it runs). Exits 2
when the trace folder is missing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from traces import PHILLY, require

from meshctl.app.context import AppContext
from meshctl.files.policies import read_mesh, read_policy_files
from meshctl.policy.compiled import compile_policies
from meshctl.sim.run import RunSpec, run

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "sim"
POLICY_SETS = {
    "onprem-only": [EXAMPLE / "policies" / "common", EXAMPLE / "policies" / "onprem-only.yaml"],
    "burst": [EXAMPLE / "policies" / "common", EXAMPLE / "policies" / "burst.yaml"],
}
WINDOW = ["--trace", "philly", "--start-day", "27", "--replicate", "16", "--failures", "stepfun"]


def meshctl(home: Path, *args: str, timeout_s: float = 900) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "meshctl", *args], capture_output=True, text=True,
        cwd=home.parent, env={**os.environ, "MESHCTL_HOME": str(home)}, timeout=timeout_s,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"meshctl {' '.join(args[:3])} exited {done.returncode}:\n{done.stderr}")
    return done


def sweep(home: Path, seeds: int, days: float) -> tuple[float, dict[str, Any]]:
    policies = [
        f"--policy={name}={','.join(map(str, paths))}" for name, paths in POLICY_SETS.items()
    ]
    args = ["sim", "sweep", "--mesh", str(EXAMPLE / "mesh.yaml"), *WINDOW, "--days", str(days),
            "--seeds", f"0..{seeds - 1}", *policies, "-o", "json"]  # fmt: skip
    started = time.perf_counter()
    done = meshctl(home, *args)
    return time.perf_counter() - started, json.loads(done.stdout)


def serial(home: Path, seeds: int, days: float) -> tuple[float, dict[tuple[str, int], Any]]:
    """The same runs here, one after another, as each task runs them."""
    mesh_file = EXAMPLE / "mesh.yaml"
    mesh = read_mesh(mesh_file)
    catalogs = AppContext(home, None, None).catalog_map()  # what the sweep's CLI reads
    reports = {}
    started = time.perf_counter()
    for name, paths in POLICY_SETS.items():
        policies = compile_policies(read_policy_files(paths).policies)
        for seed in range(seeds):
            spec = RunSpec(mesh=mesh_file, trace="philly", policies=tuple(paths), days=days,
                           start_day=27.0, replicate=16, failures="stepfun", seed=seed)  # fmt: skip
            reports[name, seed] = run(spec, mesh, catalogs, policies, name).report
    return time.perf_counter() - started, reports


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=32, help="an even number: two policy sets")
    parser.add_argument("--days", type=float, default=0.75)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    require(PHILLY, "philly.csv")
    seeds = max(1, args.runs // 2)
    with tempfile.TemporaryDirectory(prefix="meshctl-sweep-bench-") as base:
        home = Path(base) / "home"
        started = time.perf_counter()
        meshctl(home, "up")
        up_s = time.perf_counter() - started
        try:
            sweep_s, swept = sweep(home, seeds, args.days)
            serial_s, reports = serial(home, seeds, args.days)
        finally:
            meshctl(home, "down", "--force")
    same = all(reports[r["policies"], r["seed"]] == r["report"] for r in swept["runs"])
    out = {
        "runs": 2 * seeds,
        "days": args.days,
        "cpus": os.cpu_count(),
        "cluster": swept["sweep"]["cluster"],
        "finished": swept["sweep"]["finished"],
        "retried": sum(1 for r in swept["runs"] if (r["attempts"] or 1) > 1),
        "up_s": round(up_s, 1),
        "sweep_s": round(sweep_s, 1),
        "serial_s": round(serial_s, 1),
        "speedup": round(serial_s / sweep_s, 2),
        "same_reports": same and len(swept["runs"]) == len(reports),
    }
    if args.json:
        print(json.dumps(out))
        return
    print(f"{out['runs']} runs of the example ({args.days:g} days of Philly x16, StepFun)")
    print(f"  sweep on the embedded mesh: {out['sweep_s']} s ({out['cluster']})")
    print(f"  one after another here:     {out['serial_s']} s")
    print(f"  speed-up: {out['speedup']}x on {out['cpus']} cores; meshctl up {out['up_s']} s")
    print(f"  same reports both ways: {out['same_reports']}")


if __name__ == "__main__":
    main()
