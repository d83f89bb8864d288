"""How long `meshctl --help`, `submit`, `status` and `jobs list` take, end to end, each run in
a fresh process.

    python benchmarks/cli_startup.py [--runs 15] [--json]

Prints the median and spread of wall time over several runs (this machine is shared and noisy,
so quote the median), plus a bare Typer app's --help as the floor to compare against.

``submit``: ``meshctl submit --gpus 1 -- python -c pass`` against an embedded home of its own
(``MESHCTL_HOME`` in a temporary folder, run from that folder: the shipped mesh, policies and
catalogs). No controller runs, so each run checks the job against the mesh and enqueues it: the
whole of what a submission costs before a controller takes it. The benchmark checks that every
run stored its job. ``served_submit``: the same, with the home's local API running (as it does
beside a controller, ``meshctl/server/local.py``): the command sends the job there as a request
(``meshctl/cli/submitclient.py``, the standard library only), and the server, warm, checks and
queues it.

``status`` and ``jobs_list``: ``meshctl status`` and ``meshctl jobs list`` on a home whose store
holds ``JOBS`` (1,000) jobs, written through the store API: a quarter each pending, running,
succeeded and failed, a minute apart, each but the pending with its attempt. A controller "runs"
there: the pid file names this benchmark's own process and a fresh heartbeat says every pool
can be used, so ``status`` reads what a running controller left and checks no pool itself.
The benchmark checks that each command exits 0. ``served_status``: ``status`` again with the
home's local API serving, as it does beside every controller ``meshctl up`` starts: the command
asks it (``meshctl/cli/mesh_cmd.py``), warm, and renders the answer; ``status`` and
``jobs_list`` read the store in their own process (no local API: a controller that was killed).

The commands run as an installed meshctl does, with its bytecode cached: the first, uncounted
run of each writes it (``PYTHONDONTWRITEBYTECODE`` is dropped from their environment, else
every run would compile meshctl's modules again).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

BARE_TYPER = "import typer; app = typer.Typer(); app.command()(lambda: None); app()"
JOBS = 1000
SUBMIT = ["submit", "--gpus", "1", "--name", "startup", "--", "python", "-c", "pass"]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, **extra}


def _time_ms(argv: list[str], env: Mapping[str, str], cwd: Path | None) -> float:
    start = time.perf_counter()
    subprocess.run(
        argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=cwd
    )
    return (time.perf_counter() - start) * 1000


def measure(
    argv: list[str], runs: int, env: Mapping[str, str] | None = None, cwd: Path | None = None
) -> list[float]:
    env = env or _env()
    _time_ms(argv, env, cwd)  # warm the file cache (and write bytecode) once; not counted
    return [_time_ms(argv, env, cwd) for _ in range(runs)]


def measure_submit(meshctl: Path, runs: int, served: bool = False) -> list[float]:
    """``meshctl submit`` against a fresh embedded home; every run's job must be stored.
    ``served``: with the home's local API running (as while a controller runs), to which the
    command sends its request (``meshctl/cli/submitclient.py``)."""
    from meshctl.state import JobRecord, open_store

    with tempfile.TemporaryDirectory(prefix="meshctl-startup-") as tmp:
        base = Path(tmp)
        home = base / "home"
        env = _env(MESHCTL_HOME=str(home))
        with local_api(home, env, base) if served else contextlib.nullcontext():
            samples = measure([str(meshctl), *SUBMIT], runs, env, base)
        with open_store(home) as store:
            stored = len(store.list(JobRecord))
        if stored != runs + 1:  # the uncounted first run stored one too
            raise SystemExit(f"expected {runs + 1} jobs stored, found {stored}")
        return samples


@contextlib.contextmanager
def local_api(home: Path, env: Mapping[str, str], cwd: Path) -> Iterator[None]:
    """The home's local API (``meshctl/server/local.py``) serving while the block runs, as
    it does beside a controller; its parent is this process."""
    from meshctl.app.remote import api_socket

    server = subprocess.Popen(
        [sys.executable, "-m", "meshctl.server.local", str(home), str(os.getpid())],
        env=env,
        cwd=cwd,
    )
    try:
        deadline = time.monotonic() + 120
        while not api_socket(home).exists():
            if time.monotonic() > deadline or server.poll() is not None:
                raise SystemExit("the local API did not start")
            time.sleep(0.05)
        yield
    finally:
        server.terminate()
        server.wait()


def fill_home(home: Path, jobs: int = JOBS) -> None:
    """``jobs`` jobs in ``home``'s store, and a controller's pid file and heartbeat that name
    this process (alive while the benchmark runs) with a cycle just ended."""
    from meshctl.controller import daemon
    from meshctl.controller.rundir import make_run_dir
    from meshctl.host.procs import start_ticks
    from meshctl.state import AttemptRecord, AttemptState, JobRecord, JobState, open_store

    now = time.time()
    states = (JobState.PENDING, JobState.RUNNING, JobState.SUCCEEDED, JobState.FAILED)
    spec = {"apiVersion": "meshctl/v1", "kind": "Job", "metadata": {"name": "bench"},
            "spec": {"kind": "batch", "entrypoint": "python -c pass", "team": "default",
                     "resources": {"gpus": 1}}}  # fmt: skip
    records: list[Any] = []
    for i in range(jobs):
        at, state = now - 60.0 * i, states[i % 4]
        pool = None if state is JobState.PENDING else "onprem"
        records.append(JobRecord(f"bench-{i:05d}", f"bench-{i}", "default", state, 200,
                                 spec, pool, at, at))  # fmt: skip
        if pool is not None:
            running = state is JobState.RUNNING
            records.append(AttemptRecord(
                f"bench-{i:05d}-1", f"bench-{i:05d}", 1, pool, f"meshctl-bench-{i:05d}-1",
                AttemptState.RUNNING if running else AttemptState.SUCCEEDED, at,
                None if running else at,
            ))  # fmt: skip
    with open_store(home) as store:
        store.create_all(records)
    make_run_dir(home)
    pid = os.getpid()
    daemon.pid_file(home).write_text(json.dumps({"pid": pid, "start_ticks": start_ticks(pid)}))
    beat = {"pid": pid, "at_s": now, "cycle_ms": 5.0, "errors": [], "unavailable": {}}
    daemon.heartbeat_file(home).write_text(json.dumps(beat))


def measure_reads(meshctl: Path, runs: int) -> dict[str, list[float]]:
    """``status`` and ``jobs list`` on a home of ``JOBS`` jobs (``fill_home``)."""
    with tempfile.TemporaryDirectory(prefix="meshctl-startup-") as tmp:
        base = Path(tmp)
        home = base / "home"
        fill_home(home)
        env = _env(MESHCTL_HOME=str(home))
        found = {
            "status": measure([str(meshctl), "status"], runs, env, base),
            "jobs_list": measure([str(meshctl), "jobs", "list"], runs, env, base),
        }
        with local_api(home, env, base):
            found["served_status"] = measure([str(meshctl), "status"], runs, env, base)
        return found


def _stats(prefix: str, samples: list[float]) -> dict[str, float]:
    return {
        f"{prefix}_ms_median": round(statistics.median(samples), 1),
        f"{prefix}_ms_min": round(min(samples), 1),
        f"{prefix}_ms_max": round(max(samples), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()

    meshctl = Path(sys.executable).with_name("meshctl")
    help_ms = measure([str(meshctl), "--help"], args.runs)
    submit_ms = measure_submit(meshctl, args.runs)
    served_ms = measure_submit(meshctl, args.runs, served=True)
    reads = measure_reads(meshctl, args.runs)
    bare_ms = measure([sys.executable, "-c", BARE_TYPER, "--help"], args.runs)
    result: dict[str, float] = {
        "runs": args.runs,
        **_stats("help", help_ms),
        **_stats("submit", submit_ms),
        **_stats("served_submit", served_ms),
        **_stats("status", reads["status"]),
        **_stats("served_status", reads["served_status"]),
        **_stats("jobs_list", reads["jobs_list"]),
        "load_average_1min": round(os.getloadavg()[0], 2),
        "bare_typer_help_ms_median": round(statistics.median(bare_ms), 1),
    }
    result["ratio_to_bare_typer"] = round(
        result["help_ms_median"] / result["bare_typer_help_ms_median"], 2
    )
    for name in ("status", "served_status", "jobs_list"):
        result[f"{name}_ratio_to_help"] = round(
            result[f"{name}_ms_median"] / result["help_ms_median"], 2
        )
    if args.json:
        print(json.dumps(result))
        return
    for name, label in (
        ("help", "meshctl --help"),
        ("submit", "meshctl submit"),
        ("served_submit", "meshctl submit, to the home's local API"),
        ("status", f"meshctl status, {JOBS:,} jobs, read in process"),
        ("served_status", f"meshctl status, {JOBS:,} jobs, from the home's local API"),
        ("jobs_list", f"meshctl jobs list, {JOBS:,} jobs"),
    ):
        print(
            f"{label}: median {result[f'{name}_ms_median']} ms "
            f"(min {result[f'{name}_ms_min']}, max {result[f'{name}_ms_max']}, {args.runs} runs)"
        )
    print(
        f"bare Typer --help: median {result['bare_typer_help_ms_median']} ms; "
        f"--help's ratio {result['ratio_to_bare_typer']}x"
    )
    print(
        f"ratio to meshctl --help: status {result['status_ratio_to_help']}x "
        f"(from the local API {result['served_status_ratio_to_help']}x), "
        f"jobs list {result['jobs_list_ratio_to_help']}x; "
        f"load average (1 min) {result['load_average_1min']}"
    )


if __name__ == "__main__":
    main()
