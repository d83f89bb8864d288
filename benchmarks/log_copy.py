"""What copying the jobs' driver logs adds to a controller cycle.

    python benchmarks/log_copy.py [--jobs 4] [--cycles 30] [--json]

Brings up the embedded mesh in a temporary home, runs ``--jobs`` jobs that each print a
100-byte line every 10 ms (about 10 KB/s each), stops the daemon once they all run, and
drives two controllers on the same store and pools in process, cycle after cycle in turn:
one without the log copy (as before it existed) and one with it, whose copier is told that
``READ_EVERY_S`` has passed before every cycle, so every cycle reads every running job's log
(the worst case; the daemon reads each at most every 2 s). Prints the median cycle of each
and the bytes copied; brings the mesh down at the end (``--force``: the jobs still run).
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

from meshctl.app.context import AppContext
from meshctl.controller import daemon
from meshctl.controller.logs import READ_EVERY_S, LogCopier
from meshctl.controller.loop import Controller
from meshctl.controller.runtime import clients
from meshctl.state import JobRecord, JobState, open_store

DEADLINE_S = 180.0
CHATTY = (
    "import time\n"
    "for i in range(1_000_000):\n"
    "    print(f'line {i:07d} ' + 'x' * 86, flush=True)\n"
    "    time.sleep(0.01)\n"
)


def meshctl(home: Path, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "meshctl", *args],
        capture_output=True,
        text=True,
        check=True,
        cwd=home.parent,
        env={**os.environ, "MESHCTL_HOME": str(home)},
    )
    return done.stdout


def start_jobs(home: Path, count: int) -> list[str]:
    ids = [
        meshctl(home, "submit", "--gpus", "1", "--", "python", "-c", CHATTY).strip()
        for _ in range(count)
    ]
    with open_store(home) as store:
        deadline = time.monotonic() + DEADLINE_S
        while any(store.get(JobRecord, i).state is not JobState.RUNNING for i in ids):  # type: ignore[union-attr]
            if time.monotonic() > deadline:
                raise SystemExit("the jobs did not all start")
            time.sleep(0.5)
    time.sleep(3)  # some output to copy on the first read
    return ids


class Ticking:
    """A clock that says READ_EVERY_S has passed each time it is read: every cycle reads."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += READ_EVERY_S
        return self.now


def measure(home: Path, cycles: int) -> dict[str, Any]:
    daemon.stop(home)
    context = AppContext(home, None, None)
    rules = context.rules()
    with open_store(home) as store:
        plain = Controller(store, rules, {**clients(rules.mesh, home)})
        copier = LogCopier(home, Ticking())
        copying = Controller(store, rules, {**clients(rules.mesh, home)}, logs=copier)
        plain.cycle(), copying.cycle()  # warm: jobs parsed, nodes recorded, first copies
        without, with_copy = [], []
        for _ in range(cycles):
            without.append(plain.cycle().duration_s * 1000)
            with_copy.append(copying.cycle().duration_s * 1000)
    copied = sum(p.stat().st_size for p in (home / "logs").rglob("*.log"))
    return {"without_ms": without, "with_ms": with_copy, "copied_bytes": copied}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=4)
    parser.add_argument("--cycles", type=int, default=30)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="meshctl-bench-"))
    home = work / "home"
    try:
        meshctl(home, "up")
        start_jobs(home, args.jobs)
        found = measure(home, args.cycles)
    finally:
        subprocess.run(
            [sys.executable, "-m", "meshctl", "down", "--force"],
            capture_output=True,
            env={**os.environ, "MESHCTL_HOME": str(home)},
            cwd=work,
            check=False,
        )
    result = {
        "jobs": args.jobs,
        "cycle_ms_without_copy": statistics.median(found["without_ms"]),
        "cycle_ms_with_copy_every_cycle": statistics.median(found["with_ms"]),
        **found,
    }
    if args.json:
        print(json.dumps(result))
        return
    print(
        f"{args.jobs} running jobs, {args.cycles} cycles each: median cycle "
        f"{result['cycle_ms_without_copy']:.1f} ms without the log copy, "
        f"{result['cycle_ms_with_copy_every_cycle']:.1f} ms copying every job's log every "
        f"cycle ({found['copied_bytes']:,} bytes copied in all)"
    )


if __name__ == "__main__":
    main()
