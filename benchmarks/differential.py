"""The differential check, counted: scenarios through the controller and the simulator.

    python benchmarks/differential.py [--random 100] [--seed 0] [--json]

Runs every named scenario of ``tests/differential/table.py`` and ``--random`` more drawn
by its generator (seeds ``--seed`` .. ``--seed + random - 1``), each through the controller's
loop (fake pools, the fake cloud, a virtual clock) and through the simulator's engine on the
controller's tick, and compares the actions both took, cycle by cycle. Prints the scenarios
run, the actions compared (the controller's; both sides' counts are equal when nothing
mismatches), the mismatching actions and the scenarios they are in, and the wall time.
Exits 1 when anything mismatches.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests' differential harness

from tests.differential import run
from tests.differential.table import TABLE, generate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--random", type=int, default=100, help="random scenarios to add")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    logging.getLogger("meshctl").setLevel(logging.ERROR)  # budget warnings are the point here

    scenarios = list(TABLE) + [
        generate(random.Random(seed), f"random-{seed}")
        for seed in range(args.seed, args.seed + args.random)
    ]
    started = time.perf_counter()
    compared, mismatches, failing = 0, 0, []
    for scenario in scenarios:
        outcome = run(scenario)
        compared += len(outcome.controller)
        found = outcome.mismatches
        if found:
            mismatches += len(found)
            failing.append(scenario.name)
    out = {
        "scenarios": len(scenarios),
        "named": len(TABLE),
        "random": args.random,
        "actions_compared": compared,
        "mismatches": mismatches,
        "mismatching_scenarios": failing,
        "wall_s": round(time.perf_counter() - started, 1),
    }
    if args.json:
        print(json.dumps(out))
    else:
        print(
            f"{out['scenarios']} scenarios ({len(TABLE)} named, {args.random} random), "
            f"{compared:,} actions compared, {mismatches} mismatches in {out['wall_s']} s"
            + (f": {', '.join(failing)}" if failing else "")
        )
    sys.exit(1 if mismatches else 0)


if __name__ == "__main__":
    main()
