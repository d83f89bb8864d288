"""How long the example policies take to decide for one job, and how much of it is CEL.

    python benchmarks/policy_eval.py [--jobs 10000] [--runs 5] [--json]

Evaluates the policies in policies/ for N seeded random jobs against a 10-pool mesh (four
on-prem pools, three AWS, three GCP; on-prem saturated so burst rules fire) and prints the
median microseconds per job over several runs, and the share of that time spent inside CEL
(building the job's CEL value and executing expressions). Compiling and binding are done once,
outside the timing, as the controller does per snapshot; compiling (parse, reference and type
checks, cel.compile) and binding are timed on their own and printed too.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import random
import statistics
import time
from pathlib import Path
from typing import Any

from meshctl.files.policies import read_policy_files
from meshctl.model import Job
from meshctl.policy import MeshSnapshot, PoolFacts, TeamUsage, bind, compile_policies
from meshctl.policy import evaluate as evaluate_module

ROOT = Path(__file__).resolve().parents[1]
NOW = dt.datetime(2026, 1, 5, 12, 0, tzinfo=dt.UTC)


def mesh() -> MeshSnapshot:
    pools = [
        PoolFacts(
            f"onprem-{i}",
            "local",
            "",
            {"tier": "strategic"},
            ("H100",),
            1000,
            1.1,
            free_gpus=0.0,
            queued_jobs=50,
            expected_wait_s=1800.0,
        )
        for i in range(4)
    ]
    for provider, regions in (
        ("aws", ["us-east-1", "us-west-2", "eu-west-1"]),
        ("gcp", ["us-central1", "us-east4", "europe-west4"]),
    ):
        pools += [
            PoolFacts(
                f"{provider}-{r}",
                provider,
                r,
                {"tier": "burst"},
                ("H100",),
                64,
                6.9,
                free_gpus=64.0,
                spend_usd_month=1000.0 * i,
            )
            for i, r in enumerate(regions)
        ]
    teams = {t: TeamUsage(gpus_in_use=3.0) for t in ("vision", "llm", "search", "support")}
    return MeshSnapshot(tuple(pools), teams)


def jobs(n: int, seed: int = 7) -> list[Job]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        data = []
        if rng.random() < 0.1:
            data.append({"name": "d", "location": "s3://x", "tags": ["pii"]})
        if rng.random() < 0.1:
            data.append({"name": "e", "location": "s3://y", "residency": "eu"})
        out.append(
            Job.model_validate(
                {
                    "metadata": {"name": f"job-{i}"},
                    "spec": {
                        "kind": rng.choice(["train", "inference", "batch", "interactive"]),
                        "entrypoint": "python main.py",
                        "team": rng.choice(["vision", "llm", "search", "support", "ads"]),
                        "criticality": rng.choice(["critical", "standard", "best-effort"]),
                        "resources": {"gpus": rng.choice([0.25, 1, 2, 4, 8])},
                        "data": data,
                    },
                }
            )
        )
    return out


class _Timed:
    """Wraps the evaluator's CEL context so the time spent in CEL is counted."""

    def __init__(self, real: Any, clock: list[float]) -> None:
        self.real, self.clock = real, clock

    def add_variable(self, name: str, value: Any) -> None:
        start = time.perf_counter()
        self.real.add_variable(name, value)
        self.clock[0] += time.perf_counter() - start


def one_run(all_jobs: list[Job], instrument: bool) -> tuple[float, float]:
    files = read_policy_files([ROOT / "policies"])
    bound = bind(compile_policies(files.policies), mesh(), NOW)
    clock = [0.0]
    original = evaluate_module.run
    if instrument:
        bound._context = _Timed(bound._context, clock)  # type: ignore[assignment]

        def timed(expr: Any, context: Any) -> Any:
            start = time.perf_counter()
            result = original(expr, getattr(context, "real", context))
            clock[0] += time.perf_counter() - start
            return result

        evaluate_module.run = timed
    try:
        start = time.perf_counter()
        for job in all_jobs:
            bound.evaluate(job)
        elapsed = time.perf_counter() - start
    finally:
        evaluate_module.run = original
    return elapsed / len(all_jobs) * 1e6, clock[0] / elapsed


def setup_ms(repeat: int = 50) -> tuple[float, float]:
    """Median milliseconds to compile the shipped policies, and to bind them to the mesh."""
    files = read_policy_files([ROOT / "policies"])
    compiles, binds = [], []
    for _ in range(repeat):
        start = time.perf_counter()
        policies = compile_policies(files.policies)
        compiles.append(time.perf_counter() - start)
        start = time.perf_counter()
        bind(policies, mesh(), NOW)
        binds.append(time.perf_counter() - start)
    return statistics.median(compiles) * 1e3, statistics.median(binds) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    all_jobs = jobs(args.jobs)
    plain = [one_run(all_jobs, instrument=False)[0] for _ in range(args.runs)]
    shares = [one_run(all_jobs, instrument=True)[1] for _ in range(max(1, args.runs // 2))]
    compile_ms, bind_ms = setup_ms()
    result = {
        "jobs": args.jobs,
        "runs": args.runs,
        "pools": len(mesh().pools),
        "us_per_job": round(statistics.median(plain), 1),
        "us_per_job_min": round(min(plain), 1),
        "cel_share": round(statistics.median(shares), 3),
        "compile_ms": round(compile_ms, 2),
        "bind_ms": round(bind_ms, 2),
    }
    if args.json:
        print(json.dumps(result))
        return
    print(
        f"{args.jobs} jobs x {result['pools']} pools: median {result['us_per_job']} us per job "
        f"(min {result['us_per_job_min']}, {args.runs} runs); "
        f"{result['cel_share']:.0%} of it in CEL; compile {result['compile_ms']} ms,"
        f" bind {result['bind_ms']} ms"
    )


if __name__ == "__main__":
    main()
