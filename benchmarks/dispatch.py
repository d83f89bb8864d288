"""From `meshctl submit` to a running Ray job against the Ray Jobs API alone, and the
controller's cycle with a deep queue and a long history.

    python benchmarks/dispatch.py [--runs 5] [--queued 1000] [--cycles 10] [--interval 1.0]
                                  [--history N] [--json]

Brings up the embedded mesh (a local Ray cluster: a head and two emulated 4-GPU nodes, plus
the controller daemon cycling every ``--interval`` seconds) in a temporary home, then:

1. ``submit_to_running_s``: ``--runs`` times, runs ``meshctl submit --gpus 1 -- python -c ...``
   as a process and measures from just before it starts to the controller's ``job.running``
   event (the controller saw Ray report the job running; the event bears the time its cycle
   began). Each job ends before the next. Includes the command's process (which sends the
   job as a request, with the standard library only, ``meshctl/cli/submitclient.py``, to the
   home's local API beside the controller, ``meshctl/server/local.py``, which checks and
   queues it warm), the cycle the submit wakes (it dispatches), Ray's job supervisor start,
   and the watch noticing the job running (``controller/watch.py``) and waking the next
   cycle. ``submit_command_s``: the command alone.
2. ``raw_submit_to_running_s``: the same command, ``--runs`` times, through the Ray Jobs API
   alone on the same cluster: ``JobSubmissionClient.submit_job`` from this process (the SDK
   imported already), to Ray reporting it running (asked every 10 ms). ``ratio`` is meshctl's
   median over this one. ``raw_cli_to_running_s`` (and ``cli_ratio``) is Ray's own CLI,
   ``ray job submit --no-wait``, a new process as ``meshctl submit`` is: most of it Ray's
   imports. The three take turns (meshctl, the SDK, Ray's CLI, and again), after one
   uncounted job each (the cluster's first job, each command's bytecode written), so that
   the shared machine's load over the minute they take weighs on all three alike; each
   starts ``SETTLE_S`` after the job before it ended.
3. ``cycle_ms_1000_queued``: stops the daemon and drives the same controller in process. A
   gang job holding all 8 GPUs (sleeping) runs; ``--queued`` jobs of 1 GPU wait behind it. The
   first cycle parses every job and records a decision for each; the median of the next
   ``--cycles`` cycles is the steady state: observe the pool over HTTP, read the store
   (SQLite), decide (one scheduling cycle over the queue), apply.
4. With ``--history N``: N finished jobs (each with its attempt) are written to the store, a
   new controller starts over it (its first cycle reads the history once) and the median of
   its next ``--cycles`` cycles is ``cycle_ms_<N/1000>k_history``, beside ``cycle_ms_empty``
   (3., the same live work without the history) and their ratio ``history_cycle_ratio``.

Prints the medians (and every sample with ``--json``); brings the mesh down at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from ray.job_submission import JobSubmissionClient

from meshctl.app.context import AppContext
from meshctl.controller import daemon
from meshctl.controller.loop import Controller
from meshctl.controller.runtime import clients
from meshctl.controller.submit import Admission, enqueue
from meshctl.model import Job
from meshctl.pools.ray import RayPoolClient
from meshctl.scheduler.plan import Decision
from meshctl.state import AttemptDetail, AttemptRecord, JobRecord, JobState, open_store

DEADLINE_S = 120.0


def meshctl(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``meshctl`` as a process, as an installed one runs: with its bytecode cached (written
    by its first run; ``PYTHONDONTWRITEBYTECODE`` in this environment would have every run
    compile meshctl's modules again, about 0.1 s, as no installed meshctl does)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return subprocess.run(
        [sys.executable, "-m", "meshctl", *args],
        capture_output=True,
        text=True,
        check=True,
        cwd=home.parent,
        env={**env, "MESHCTL_HOME": str(home)},
    )


def meshctl_once(home: Path, name: str) -> tuple[float, float]:
    """(submit -> running, the submit command alone) for one job, waited to its end."""
    start = time.time()
    job_id = meshctl(home, "submit", "--gpus", "1", "--name", name, "--", *PROBE).stdout.strip()
    command_s = time.time() - start
    with open_store(home) as store:
        deadline = time.monotonic() + DEADLINE_S
        while not (running := [e for e in store.events(job_id=job_id) if e.kind == "job.running"]):
            if time.monotonic() > deadline:
                raise SystemExit(f"{job_id} did not start within {DEADLINE_S:.0f} s")
            time.sleep(0.02)
    meshctl(home, "jobs", "wait", job_id)
    return running[0].at_s - start, command_s


PROBE = ("python", "-c", "import time; time.sleep(0.5)")
# After each job ends, before the next is submitted: Ray reaps the job's supervisor and driver
# (about a CPU-second on this machine), which the next submission should not share.
SETTLE_S = 1.0


def _ray_running(client: RayPoolClient, submission_id: str, start: float) -> float:
    """Seconds from ``start`` until Ray reports the submission running (polled every 10 ms)."""
    deadline = time.monotonic() + DEADLINE_S
    while (found := client.job(submission_id)) is None or found.status == "PENDING":
        if time.monotonic() > deadline:
            raise SystemExit(f"{submission_id} did not start within {DEADLINE_S:.0f} s")
        time.sleep(0.01)
    return time.time() - start


def _ended(client: RayPoolClient, submission_id: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while (found := client.job(submission_id)) is None or found.status in ("PENDING", "RUNNING"):
        if time.monotonic() > deadline:
            raise SystemExit(f"{submission_id} did not end within {DEADLINE_S:.0f} s")
        time.sleep(0.05)


class Raw:
    """The same job through the Ray Jobs API alone, on the same cluster: with Ray's own CLI
    (``ray job submit --no-wait``, a new process, as ``meshctl submit`` is) and with the
    Python SDK already imported in this process; each to Ray reporting it running."""

    def __init__(self, home: Path) -> None:
        rules = AppContext(home, None, None).rules()
        self.client = next(iter(clients(rules.mesh, home).values()))
        token = self.client.token or ""
        self.env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token}
        self.ray, self.cwd = str(Path(sys.executable).with_name("ray")), home.parent
        self.sdk = JobSubmissionClient(
            self.client.address, headers={"Authorization": f"Bearer {token}"}
        )

    def cli(self, sid: str) -> float:
        start = time.time()
        subprocess.Popen(
            [self.ray, "job", "submit", "--address", self.client.address, "--submission-id",
             sid, "--no-wait", "--", *PROBE],
            env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=self.cwd,
        )  # fmt: skip
        return self._to_the_end(sid, start)

    def api(self, sid: str) -> float:
        start = time.time()
        self.sdk.submit_job(entrypoint=shlex.join(PROBE), submission_id=sid)
        return self._to_the_end(sid, start)

    def _to_the_end(self, sid: str, start: float) -> float:
        running = _ray_running(self.client, sid, start)
        _ended(self.client, sid)
        return running


def submit_to_running(home: Path, runs: int) -> dict[str, list[float]]:
    """``runs`` of each way, taking turns (meshctl, the SDK, Ray's CLI, and again), so that
    whatever else loads this shared machine meanwhile weighs on all alike; first one of each,
    not counted: the cluster's first job (Ray starts its job supervisor's first worker) and
    the first start of each command (its bytecode written)."""
    raw, tag = Raw(home), os.getpid()
    found: dict[str, list[float]] = {"meshctl": [], "command": [], "api": [], "cli": []}
    for i in range(-1, runs):
        latency, command_s = meshctl_once(home, f"probe-{i + 1}")
        time.sleep(SETTLE_S)
        api = raw.api(f"raw-api-{i + 1}-{tag}")
        time.sleep(SETTLE_S)
        cli = raw.cli(f"raw-cli-{i + 1}-{tag}")
        time.sleep(SETTLE_S)
        if i >= 0:
            for key, value in (("meshctl", latency), ("command", command_s), ("api", api)):
                found[key].append(value)
            found["cli"].append(cli)
    return found


def _job(name: str, gpus: float, nodes: int, command: str) -> Job:
    return Job.model_validate(
        {
            "apiVersion": "meshctl/v1",
            "kind": "Job",
            "metadata": {"name": name},
            "spec": {
                "kind": "batch",
                "entrypoint": command,
                "resources": {"gpus": gpus, "nodes": nodes, "cpus": 0.1, "memory_gib": 0.25},
            },
        }
    )


def finished(template: JobRecord, n: int, now: float) -> list[JobRecord | AttemptRecord]:
    """``n`` jobs that ran and succeeded an hour or more ago, each with its attempt."""
    made: list[JobRecord | AttemptRecord] = []
    for i in range(n):
        job_id, ended = f"old-{i:06d}", now - 3600 - i
        made.append(
            replace(template, id=job_id, name=f"old-{i % 100}", state=JobState.SUCCEEDED,
                    submitted_at_s=ended - 120, updated_at_s=ended, version=0)
        )  # fmt: skip
        made.append(
            AttemptRecord(f"{job_id}-1", job_id, 1, template.pool or "local", f"meshctl-{job_id}-1",
                          "succeeded", ended - 100, ended, "", AttemptDetail())
        )  # fmt: skip
    return made


def steady(controller: Controller, cycles: int) -> tuple[float, list[float]]:
    """The first cycle's ms, then each of ``cycles`` more."""
    first = controller.cycle().duration_s
    return 1000 * first, [1000 * controller.cycle().duration_s for _ in range(cycles)]


def deep_queue(home: Path, queued: int, cycles: int, history: int) -> dict[str, Any]:
    daemon.stop(home)
    context = AppContext(home, None, None)
    rules = context.rules()
    with open_store(home) as store:
        controller = Controller(store, rules, {**clients(rules.mesh, home)})
        admit = Admission(0, None, Decision("-", "placed"))
        blocker = enqueue(
            store,
            _job("blocker", 4, 2, "python -c 'import time; time.sleep(600)'"),
            admit,
            None,
            home,
            time.time(),
        )
        deadline = time.monotonic() + DEADLINE_S
        while store.get(JobRecord, blocker.id).state is not JobState.RUNNING:  # type: ignore[union-attr]
            if time.monotonic() > deadline:
                raise SystemExit("the blocking gang job did not start")
            controller.cycle()
            time.sleep(0.2)
        started = time.perf_counter()
        waiting = _job("queued", 1, 1, "python -c pass")
        for _ in range(queued):
            enqueue(
                store,
                waiting,
                Admission(100, None, Decision("-", "pending")),
                None,
                home,
                time.time(),
            )
        enqueue_s = time.perf_counter() - started
        first, cycles_ms = steady(controller, cycles)
        dispatched = sum(
            1
            for j in store.list(JobRecord)
            if j.name == "queued" and j.state is not JobState.PENDING
        )
        found: dict[str, Any] = {
            "enqueue_ms_per_job": 1000 * enqueue_s / queued,
            "first_cycle_ms": first,
            "steady_cycle_ms": cycles_ms,
            "dispatched_while_full": dispatched,
        }
        if history:  # the same live work, and a long history: a restarted controller
            template = store.get(JobRecord, blocker.id)
            assert template is not None
            started = time.perf_counter()
            store.create_all(finished(template, history, time.time()))
            found["history_write_s"] = time.perf_counter() - started
            restarted = Controller(store, rules, {**clients(rules.mesh, home)})
            found["first_cycle_ms_history"], found["steady_cycle_ms_history"] = steady(
                restarted, cycles
            )
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--queued", type=int, default=1000)
    parser.add_argument("--cycles", type=int, default=10)
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument(
        "--history", type=int, default=0, help="finished jobs to add before the last cycles"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="meshctl-bench-"))
    home = work / "home"
    try:
        up_start = time.perf_counter()
        meshctl(home, "up", "--interval", str(args.interval))
        up_s = time.perf_counter() - up_start
        samples = submit_to_running(home, args.runs)
        queue = deep_queue(home, args.queued, args.cycles, args.history)
    finally:
        down_start = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "meshctl", "down", "--force"],  # the blocker still runs
            capture_output=True,
            env={**os.environ, "MESHCTL_HOME": str(home)},
            cwd=work,
            check=False,
        )
        down_s = time.perf_counter() - down_start
    median = statistics.median
    latency, commands = samples["meshctl"], samples["command"]
    raw = {"api": samples["api"], "cli": samples["cli"]}
    result = {
        "submit_to_running_s": median(latency),
        "raw_submit_to_running_s": median(raw["api"]),
        "ratio": median(latency) / median(raw["api"]),
        "raw_cli_to_running_s": median(raw["cli"]),
        "cli_ratio": median(latency) / median(raw["cli"]),
        "submit_to_running_samples_s": latency,
        "raw_submit_to_running_samples_s": raw["api"],
        "raw_cli_to_running_samples_s": raw["cli"],
        "submit_command_s": median(commands),
        "submit_command_samples_s": commands,
        "controller_interval_s": args.interval,
        "cycle_ms_1000_queued": statistics.median(queue["steady_cycle_ms"]),
        "queued": args.queued,
        **queue,
        "up_s": up_s,
        "down_s": down_s,
    }
    if args.history:
        result["history"] = args.history
        result["cycle_ms_empty"] = result["cycle_ms_1000_queued"]
        result[f"cycle_ms_{args.history // 1000}k_history"] = median(
            queue["steady_cycle_ms_history"]
        )
        result["history_cycle_ratio"] = (
            median(queue["steady_cycle_ms_history"]) / result["cycle_ms_empty"]
        )
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"mesh up in {up_s:.1f} s, down in {down_s:.1f} s")
    print(
        f"submit -> running: median {result['submit_to_running_s']:.2f} s over {args.runs} jobs "
        f"(controller cycles every {args.interval:g} s; samples "
        + ", ".join(f"{s:.2f}" for s in latency)
        + ")"
    )
    print(
        f"  the Ray Jobs API alone: {result['raw_submit_to_running_s']:.2f} s from the Python "
        f"SDK already imported (ratio {result['ratio']:.2f}), "
        f"{result['raw_cli_to_running_s']:.2f} s with Ray's CLI, a new process as meshctl "
        f"submit is (ratio {result['cli_ratio']:.2f})"
    )
    print(
        f"controller cycle with {args.queued:,} queued jobs: "
        f"median {result['cycle_ms_1000_queued']:.0f} ms (first cycle "
        f"{queue['first_cycle_ms']:.0f} ms: parses every job and records its decision; "
        f"{queue['dispatched_while_full']} dispatched while the pool was full)"
    )
    print(
        f"the submit command alone (a new process: imports, checks, store): "
        f"median {result['submit_command_s']:.2f} s"
    )
    print(f"enqueue: {queue['enqueue_ms_per_job']:.2f} ms per job (SQLite, one transaction each)")
    if args.history:
        print(
            f"with {args.history:,} finished jobs in the store: median cycle "
            f"{median(queue['steady_cycle_ms_history']):.0f} ms against "
            f"{result['cycle_ms_empty']:.0f} ms without (ratio "
            f"{result['history_cycle_ratio']:.2f}); a restarted controller's first cycle "
            f"{queue['first_cycle_ms_history']:.0f} ms (reads the history once)"
        )


if __name__ == "__main__":
    main()
