"""An inference surge on the embedded mesh: a Ray Serve service borrows a GPU from an elastic
Ray Train job, and gives it back.

    python benchmarks/surge.py [--surge-s 60] [--base-s 15] [--after-s 40] [--downscale-s 20]
                               [--grow-grace-s 30] [--json]

A temporary embedded mesh (a local Ray cluster: three emulated 1-GPU nodes, the controller
cycling every 0.5 s) runs, with the policy "services may borrow from elastic training":

- ``pretrain``: the example loop (examples/train/model.py) as an elastic train job,
  ``train.workers: {min: 1, max: 2}``, a checkpoint every 10 steps (0.1 s a step);
- ``classify``: the example Serve app (examples/serve/app.py, 200 ms a request) as a service
  of 1 to 2 replicas, 2 requests in flight per replica as its target, out after 5 s above
  target, in after ``--downscale-s`` (20 s) below.

The pool's grow grace (mesh.yaml ``graces.grow_s``) is ``--grow-grace-s``: 30 s, meshctl's
default. Once both run, an open-loop load generator (``meshctl.loadgen``) sends 2.5 requests
a second for ``--base-s``, then eight times that (20 a second: 4 in flight, 2 replicas' worth)
for ``--surge-s``, then 2.5 a second for ``--after-s``. The service scales out: its second
replica borrows one of the training job's nodes (it checkpoints, stops and resumes on one
worker); the traffic falls, the replica goes, the loan closes and the training job grows back
to two. The suite's test (tests/integration/serve/test_surge.py) plays the same story stage by
stage (``Surge``), each stage ending on the event it waits for instead of a fixed schedule.

Printed as labelled lines, rounded (``p50 228 ms``); with ``--json``, one line of data:

- ``surge_to_serving_s``: from the surge to Serve reporting a second replica running;
- ``shrink_s``: from the loan opening to the training job running again on one node;
- ``grow_back_s``: from the loan closing to the training job running again on two;
- ``training_steps_lost``: steps the training job did again after its two resizes (its last
  step reported before each stop less the checkpoint it resumed from), and
  ``checkpoint_every_steps``, the most one resize should lose;
- ``requests_failed`` and ``requests_total``: every request of the load, failures counted
  (an HTTP error, a refused connection, no answer in 120 s: a request queued behind a busy
  replica waits, it is not dropped); ``p50_ms`` / ``p99_ms`` over all, from when each was due
  (to 0.1 ms).

Takes about five minutes on a 2-core machine, most of it starting the cluster, the training
job and Serve; what it is doing and waiting for goes to stderr as it goes, a line at least
every 10 s. Exits 1 when the surge does not play out (no loan, no growth) in time.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from recovery_meshctl import Mesh

from meshctl import loadgen
from meshctl.controller.serving_apply import serve_ports
from meshctl.pools.serve import ServeClient

ROOT = Path(__file__).resolve().parents[1]
DEADLINE_S = 240.0
BASE_RPS, SURGE = 2.5, 8
REQUEST_TIMEOUT_S = 120.0  # queued is not dropped: a request fails on an error, or past this
PROGRESS_EVERY_S = 10.0
CHECKPOINT_EVERY = 10
MESH = """\
apiVersion: meshctl/v1
kind: Mesh
metadata: {{name: surge-bench}}
spec:
  pools:
    - name: onprem
      provider: local
      checkpoint_storage: {{uri: "file://{checkpoints}"}}
      graces: {{grow_s: {grow_grace_s}}}
      nodes:
        - {{name: n, count: 3, gpus: 1, cpus: 1, memory_gib: 2GiB,
           accelerator: {{model: A100, memory_gib: 80GiB}}}}
"""
POLICY = """\
apiVersion: meshctl/v1
kind: Policy
metadata: {name: surge}
spec:
  priority_classes: [{name: serving, value: 1000}, {name: training, value: 100}]
  default_priority_class: {inference: serving, train: training, batch: training}
  preemption:
    - name: services-borrow-from-elastic-training
      when: job.service
      victims: victim.elastic
      grace_s: 10s
"""
TRAIN = f"""\
apiVersion: meshctl/v1
kind: Job
metadata: {{name: pretrain}}
spec:
  kind: train
  working_dir: train
  train:
    loop: model:train_loop
    workers: {{min: 1, max: 2}}
    config: {{steps: 100000, step_delay_s: 0.1, checkpoint_every_steps: {CHECKPOINT_EVERY}}}
  resources: {{gpus: 1, cpus: 250m, memory_gib: 512MiB}}
"""
SERVICE = """\
apiVersion: meshctl/v1
kind: Job
metadata: {{name: classify}}
spec:
  kind: inference
  working_dir: serve
  runtime_env: {{env_vars: {{MESHCTL_SERVE_COST_MS: "200"}}}}
  serve:
    app: app:app
    route_prefix: /classify
    replicas: {{min: 1, max: 2}}
    target_ongoing_requests: 2
    max_ongoing_requests: 8
    upscale_delay: 5s
    downscale_delay: {downscale_s:g}s
  resources: {{gpus: 1, cpus: 250m, memory_gib: 256MiB}}
"""


def progress(line: str) -> None:
    """A line on stderr: the story as it goes (stdout keeps the figures, or the JSON)."""
    print(f"surge: {line}", file=sys.stderr, flush=True)


def wait(what: str, check: Callable[[], Any], deadline_s: float = DEADLINE_S) -> Any:
    """Poll ``check`` every half second until it answers (not None or False); say what it
    waits for, a line every ``PROGRESS_EVERY_S`` while it does, and how long it took."""
    started = time.monotonic()
    end, told = started + deadline_s, started
    progress(f"waiting for {what} ...")
    while time.monotonic() < end:
        found = check()
        if found:
            progress(f"  {what}: after {time.monotonic() - started:.0f} s")
            return found
        if time.monotonic() - told >= PROGRESS_EVERY_S:
            progress(f"  still waiting for {what}: {time.monotonic() - started:.0f} s")
            told = time.monotonic()
        time.sleep(0.5)
    raise SystemExit(f"surge: {what}: not within {deadline_s:g} s")


def at_s(event: dict[str, Any]) -> float:
    from datetime import datetime

    return datetime.fromisoformat(event["occurred_at"].replace("Z", "+00:00")).timestamp()


def first_after(found: list[dict[str, Any]], kind: str, after_s: float) -> float | None:
    times = [at_s(e) for e in found if e["kind"] == kind and at_s(e) >= after_s]
    return min(times) if times else None


class Load:
    """``meshctl.loadgen`` on a thread: ``schedule`` sent to the service until it ends or
    ``stop()``; ``result()`` waits for every request."""

    def __init__(self, url: str, schedule: list[tuple[float, float]]) -> None:
        self._stop = threading.Event()
        self._done: list[loadgen.LoadResult] = []
        self._thread = threading.Thread(target=lambda: self._done.append(
            loadgen.run(url, schedule, timeout_s=REQUEST_TIMEOUT_S, stop=self._stop)))  # fmt: skip
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def result(self, tell: Callable[[], str] | None = None) -> loadgen.LoadResult:
        """Every request's outcome, once the last has its answer; ``tell``: what to say every
        ``PROGRESS_EVERY_S`` meanwhile."""
        while self._thread.is_alive():
            self._thread.join(PROGRESS_EVERY_S)
            if tell is not None and self._thread.is_alive():
                progress(tell())
        (done,) = self._done
        return done


class Surge:
    """The story on a temporary embedded mesh, stage by stage. The benchmark plays it out on a
    fixed schedule (``surge`` below); the suite's test (tests/integration/serve/test_surge.py)
    runs the stages one by one, each ending on the event it waits for."""

    def __init__(self, work: Path, downscale_s: float, grow_grace_s: float) -> None:
        (work / "policies").mkdir()
        (work / "policies" / "surge.yaml").write_text(POLICY)
        shutil.copytree(ROOT / "examples" / "train", work / "train")
        shutil.copytree(ROOT / "examples" / "serve", work / "serve")
        (work / "train.yaml").write_text(TRAIN)
        (work / "service.yaml").write_text(SERVICE.format(downscale_s=downscale_s))
        mesh_yaml = MESH.format(checkpoints=work / "checkpoints", grow_grace_s=grow_grace_s)
        (work / "mesh.yaml").write_text(mesh_yaml)
        self.mesh = Mesh(work)
        self.train = self.service = self.url = ""

    def up(self) -> None:
        """``meshctl up`` with Ray exporting its metrics (a service's traffic, as the controller
        reads it) every 2 s instead of Ray's 10 s: the surge is seen sooner. Ray reads the
        setting from the environment its nodes start in, which ``up`` passes on."""
        args = ["--mesh", str(self.mesh.work / "mesh.yaml"), "up", "--interval", "0.5"]
        progress("meshctl up: a local Ray cluster of three 1-GPU nodes and the controller ...")
        started = time.monotonic()
        self.mesh.run(*args, env={"RAY_metrics_report_interval_ms": "2000"}, shown=True)
        progress(f"  up after {time.monotonic() - started:.0f} s")

    def down(self) -> None:
        self.mesh.run("down", "--force", check=False)

    def start_training(self) -> None:
        """Submit the elastic training job; wait for it on two nodes."""
        self.train = self.mesh.run("submit", "train.yaml").stdout.strip().splitlines()[-1]
        progress(f"submitted {self.train}: elastic training, 1 to 2 workers")
        wait("the training job on two nodes", lambda: self.running_on(2))

    def start_service(self) -> None:
        """Submit the service; wait for it running, on one replica."""
        self.service = self.mesh.run("submit", "service.yaml").stdout.strip().splitlines()[-1]
        progress(f"submitted {self.service}: a Ray Serve service of 1 to 2 replicas")
        wait("the service running", lambda: self.mesh.show(self.service)["state"] == "running")
        port = serve_ports(self.mesh.home)["onprem"]
        self.url = f"http://127.0.0.1:{port}/classify"
        cluster = self.mesh.cluster()
        self.serve = ServeClient(cluster.dashboard, cluster.token)

    def load(self, schedule: list[tuple[float, float]]) -> Load:
        return Load(self.url, schedule)

    def replicas(self) -> int:
        """The service's replicas running, as Serve says."""
        found = self.serve.status().get(self.service)
        if found is None:
            return 0
        return sum(d.counts.get("RUNNING", 0) for d in found.deployments.values())

    def running_on(self, count: int) -> bool:
        """Whether the training job runs on ``count`` nodes."""
        shown = self.mesh.show(self.train)
        return shown["state"] == "running" and len(shown["nodes"]) == count

    def events(self) -> list[dict[str, Any]]:
        """The training job's events."""
        shown: list[dict[str, Any]] = self.mesh.show(self.train)["events"]
        return shown

    def steps_lost(self) -> list[int]:
        """Per resize the training job recovered from: the steps it did again."""
        training = self.mesh.show(self.train).get("training", {})
        recoveries = training.get("recoveries", [])
        return [r["steps_lost"] for r in recoveries if r["steps_lost"] is not None]

    def resized(self, since_s: float) -> dict[str, float | None]:
        """Since ``since_s``: when the loan opened and closed, and when the training job ran
        again after each (on one node, then on two)."""
        found = self.events()
        opened = first_after(found, "loan.opened", since_s)
        closed = first_after(found, "loan.closed", since_s)
        return {
            "opened": opened,
            "closed": closed,
            "shrunk": None if opened is None else first_after(found, "job.running", opened),
            "grown": None if closed is None else first_after(found, "job.running", closed),
        }

    def show(self) -> None:
        """The story, as meshctl tells it: each job's events, its loans."""
        for job_id in (self.service, self.train):
            print(f"\n$ meshctl jobs show {job_id}", flush=True)
            print(self.mesh.run("jobs", "show", job_id).stdout, flush=True)


def run(args: argparse.Namespace) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="meshctl-surge-"))
    try:
        story = Surge(work, args.downscale_s, args.grow_grace_s)
        story.up()
        try:
            return surge(story, args)
        finally:
            story.down()
    finally:
        shutil.rmtree(work, ignore_errors=True)


def surge(story: Surge, args: argparse.Namespace) -> dict[str, Any]:
    story.start_training()
    story.start_service()
    schedule = [
        (float(args.base_s), BASE_RPS),
        (float(args.surge_s), BASE_RPS * SURGE),
        (float(args.after_s), BASE_RPS),
    ]
    started = time.time()
    load = story.load(schedule)
    surge_at = started + schedule[0][0]
    progress(f"traffic: {phases(schedule)}")
    serving_at = wait("a second replica serving", lambda: story.replicas() >= 2 and time.time())
    length_s = sum(d for d, _ in schedule)

    def tell() -> str:
        at = time.time() - started
        replicas = story.replicas()
        return f"  traffic at {min(at, length_s):.0f} s of {length_s:g} s: {replicas} replica(s)"

    done = load.result(tell)
    wait("the training job back on two nodes", lambda: story.running_on(2))
    resized = story.resized(started)
    opened, closed = resized["opened"], resized["closed"]
    if opened is None or closed is None:
        kinds = [e["kind"] for e in story.events()]
        raise SystemExit(f"surge: no loan opened and closed: {kinds}")
    shrunk, grown = resized["shrunk"], resized["grown"]
    if args.show:
        story.show()
    lost = story.steps_lost()
    story.mesh.run("jobs", "cancel", story.train, check=False)
    return {
        "surge_to_serving_s": round(serving_at - surge_at, 2),
        "shrink_s": None if shrunk is None else round(shrunk - opened, 2),
        "grow_back_s": None if grown is None else round(grown - closed, 2),
        "training_steps_lost": sum(lost) if lost else None,
        "resizes": len(lost),
        "checkpoint_every_steps": CHECKPOINT_EVERY,
        "phases_s": {"base": args.base_s, "surge": args.surge_s, "after": args.after_s},
        "downscale_s": args.downscale_s,
        "grow_grace_s": args.grow_grace_s,
        "requests_failed": done.failed,
        "requests_total": done.total,
        "p50_ms": None if done.p50_ms is None else round(done.p50_ms, 1),
        "p99_ms": None if done.p99_ms is None else round(done.p99_ms, 1),
        "failures": done.failures,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--surge-s", type=float, default=60.0, help="the surge's length")
    parser.add_argument("--base-s", type=float, default=15.0, help="base traffic before it")
    parser.add_argument("--after-s", type=float, default=40.0, help="base traffic after it")
    parser.add_argument(
        "--downscale-s", type=float, default=20.0, help="the service's downscale_delay"
    )
    parser.add_argument(
        "--grow-grace-s", type=float, default=30.0, help="the pool's grow grace (graces.grow_s)"
    )
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--show", action="store_true", help="print both jobs as meshctl shows them")
    args = parser.parse_args()
    figures = run(args)
    if args.json:
        print(json.dumps(figures))
        return
    for label, value in report(figures):
        print(f"{label:>34}  {value}")


def phases(schedule: list[tuple[float, float]]) -> str:
    """``15 s at 2.5/s, 60 s at 20/s, 40 s at 2.5/s``."""
    return ", ".join(f"{d:g} s at {rps:g}/s" for d, rps in schedule)


def seconds(value: float | None, after: str = "") -> str:
    return "-" if value is None else f"{value:.1f} s{after}"


def ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f} ms"


def report(figures: dict[str, Any]) -> list[tuple[str, str]]:
    """The figures as labelled lines, rounded, for people (``--json`` has them as data)."""
    phase, lost = figures["phases_s"], figures["training_steps_lost"]
    rates = (BASE_RPS, BASE_RPS * SURGE, BASE_RPS)
    traffic = list(zip((phase["base"], phase["surge"], phase["after"]), rates, strict=True))
    every = f"a checkpoint every {figures['checkpoint_every_steps']} steps"
    failures = ", ".join(f"{n} {why}" for why, n in figures["failures"].items())
    failed = f"{figures['requests_failed']} failed" + (f" ({failures})" if failures else "")
    return [
        ("traffic", phases(traffic)),
        ("surge to a second replica serving", seconds(figures["surge_to_serving_s"])),
        ("training shrunk to one node", seconds(figures["shrink_s"], " after the loan opened")),
        ("training grown back to two", seconds(figures["grow_back_s"], " after the loan closed")),
        ("training steps lost", f"{'-' if lost is None else lost} ({every})"),
        ("resizes", str(figures["resizes"])),
        ("requests", f"{figures['requests_total']:,}, {failed}"),
        (
            "latency from when each was due",
            f"p50 {ms(figures['p50_ms'])}, p99 {ms(figures['p99_ms'])}",
        ),
        ("service downscale delay", f"{figures['downscale_s']:g} s"),
        ("pool grow grace", f"{figures['grow_grace_s']:g} s"),
    ]


if __name__ == "__main__":
    sys.exit(main())
