"""Faults in what meshctl drives and stands on, one after another under a stream of jobs:
does any job fail for a reason not its own, run twice or get lost, and how long does each
fault hold work up?

    python benchmarks/chaos.py [--faults all|KIND,...] [--outage 20] [--cloud-outage 60]
                               [--calm 10] [--every 4] [--interval 1] [--nodes 3] [--run-s 3]
                               [--no-train]
                               [--deadline 300] [--keep DIR] [--json]

The mesh, in a temporary folder: an on-prem pool (``provider: local``: a Ray head and ``--nodes``
emulated 2-GPU nodes, each with its meshctl agent), an AWS pool on moto_server and a GCP pool
on the tests' GCE emulator (each instance a local Ray node booted by its startup script), the
state store on a throwaway Postgres server, the controller (``meshctl up``, a cycle every
``--interval`` s) and the API server (``meshctl server``) on it. Teams ``aws`` and ``gcp`` run
on their cloud (a policy of this benchmark), every other job on-prem.

The stream: every ``--every`` s a job is submitted over HTTP, as a user's client would (a 503
or a dropped connection is tried again; after a dropped one the job is first looked for by its
name), alternately one node with one GPU and a gang of two nodes with one GPU each, each
running ``sleep --run-s`` between two marks in a file of its own in a shared folder (job id,
attempt, pid: when it started, whether it finished its work).
With ``--train`` (the default) a Ray Train job (``examples/train/model.py``, a checkpoint every
10 steps) trains through the first faults. Before the faults, one job per cloud measures a
burst in calm (``cloud_baseline_s``).

The faults (``chaos_faults.py`` tells each): ``job-agent``, ``dashboard``, ``node-kill``,
``head-restart``, ``controller-kill``, ``postgres-restart`` (``--outage`` s each),
``cloud-throttled`` and ``cloud-unreachable`` (``--cloud-outage`` s each), each once the
previous fault's probes have started and ``--calm`` s more have passed. As each begins, a
probe job is submitted (for the cloud faults, one per cloud), of a higher priority class than
the stream's: its wait is the fault's, not a place in the queue.

Figures:

- ``jobs``: acknowledged submissions; ``succeeded``;
- ``failed_by_fault``: jobs that ended failed (every job here succeeds on its own), with why;
- ``ran_twice``: jobs one of whose attempts ran more than once, or whose work, done (the
  run's marker says so after its sleep), was run again; ``run_again``: jobs a fault killed
  mid-run that ran again in a new attempt, as they should; ``lost``: acknowledged jobs the
  store does not hold or that never ended; ``http_500``: the API server's 500s (503 is its
  word for the store away, and the client tries again);
- per fault: ``outage_s``; ``delay_s``, the worst over the jobs it held up (its probes, and
  the jobs running when it began that had to start again) of the time from the fault's start
  (or the job's submission, when later) to the job's next start, less the calm figure
  (the median start of the stream's jobs of its kind started before the first fault,
  ``baseline_single_s`` or ``baseline_gang_s``: a gang starts later, its placement group
  first; for a cloud fault, the calm cloud bursts' slower, ``cloud_baseline_s``);
  ``within``: whether that is at most the outage plus two cycles. For a cloud fault,
  ``to_launch_s`` too, to tell where the time went: the same up to the provider's launch of
  the probe's instance (its launch time as the provider reports it), less the calm bursts'
  figure, and ``launch_within``, the same test of it. The rest is the instance's boot and
  join, the machine's (a local Ray node starting on this loaded machine: 17 to 33 s, run to
  run), not the fault's once the instance was launched after it.

Targets (issue 46): ``failed_by_fault`` 0, ``ran_twice`` 0, ``lost`` 0, every fault within.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from chaos_client import Client, Submitted  # noqa: E402
from chaos_faults import (  # noqa: E402
    CLOUD_KINDS,
    KINDS,
    Fault,
    World,
)

MESH = """\
apiVersion: meshctl/v1
kind: Mesh
metadata: {{name: chaos}}
spec:
  pools:
    - name: {pool}
      provider: local
      labels: {{tier: strategic}}
      nodes:
        - {{name: gpu, count: {nodes}, gpus: 2, cpus: 2, memory_gib: 4GiB,
           accelerator: {{model: A100, memory_gib: 80GiB}}}}
      agents: {{}}
      checkpoint_storage: {{uri: "file://{work}/checkpoints"}}
"""
CLOUD_POOLS = """\
    - name: aws-burst
      provider: aws
      region: us-east-1
      zones: [us-east-1a]
      endpoint_url: {aws}
      labels: {{tier: burst, vendor: aws}}
      node_types: [{{name: g6.xlarge, max_nodes: 1}}]
      head_node_type: m7i.large
      max_nodes: 2
      idle_minutes: 0.1
    - name: gcp-burst
      provider: gcp
      project: meshctl-chaos
      region: us-central1
      zones: [us-central1-a]
      endpoint_url: {gcp}
      labels: {{tier: burst, vendor: gcp}}
      node_types: [{{name: g2-standard-8, max_nodes: 1}}]
      max_nodes: 1
      idle_minutes: 0.1
"""
POLICY = """\
apiVersion: meshctl/v1
kind: Policy
metadata: {name: chaos}
spec:
  pools:
    - name: cloud-teams-on-their-cloud
      when: job.team == "aws" || job.team == "gcp"
      allow: pool.cloud && pool.labels.vendor == job.team
      reason: the teams aws and gcp run on their own cloud
    - name: the-rest-on-prem
      when: job.team != "aws" && job.team != "gcp"
      allow: "!pool.cloud"
      reason: every other team runs on-prem
  burst:
    - name: cloud-teams-burst-at-once
      when: job.team == "aws" || job.team == "gcp"
      to: pool.cloud && pool.labels.vendor == job.team
      max_usd_per_hour: 60
"""
ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
PROBE = "research"  # the probes' priority class (the stream's: batch)
MARK = (
    "import os, pathlib, time\n"
    "env = os.environ\n"
    "name = f\"{{env['MESHCTL_JOB_ID']}}.{{env.get('MESHCTL_ATTEMPT', '0')}}.{{os.getpid()}}\"\n"
    "mark = pathlib.Path({runs!r}, name)\n"
    "mark.write_text(repr(time.time()))\n"
    "time.sleep({run_s})\n"
    "mark.write_text(mark.read_text() + ' done')\n"  # the run's work is done
)


@dataclass(frozen=True)
class Runs:
    """Where the jobs mark their runs, and how long each job's work takes."""

    folder: Path
    run_s: float


def job(
    name: str, runs: Runs, nodes: int = 1, team: str = "default", priority: str = "batch"
) -> dict[str, Any]:
    code = MARK.format(runs=str(runs.folder), run_s=runs.run_s)
    spec = {
        "kind": "batch",
        "entrypoint": f"{shlex.quote(sys.executable)} -c {shlex.quote(code)}",
        "resources": {"gpus": 1, "nodes": nodes, "cpus": 0.25, "memory_gib": 0.25},
        "team": team,
        "priority_class": priority,
    }
    return {"apiVersion": "meshctl/v1", "kind": "Job", "metadata": {"name": name}, "spec": spec}


class Stream(threading.Thread):
    """Submits a job every ``every`` s until stopped; single-node and gangs in turn."""

    def __init__(self, client: Client, runs: Runs, every: float) -> None:
        super().__init__(daemon=True)
        self.client, self.runs, self.every = client, runs, every
        self.stopped = threading.Event()
        self.sent: list[Submitted] = []

    def run(self) -> None:
        n = 0
        while not self.stopped.wait(0 if n == 0 else self.every):
            n += 1
            nodes = 1 if n % 2 else 2
            self.sent.append(self.client.submit(job(f"stream-{n}", self.runs, nodes)))


def marks(runs: Path) -> dict[str, list[tuple[int, float, bool]]]:
    """Each job's runs: (attempt, start time, whether its work was done), in order of start."""
    found: dict[str, list[tuple[int, float, bool]]] = {}
    for path in runs.iterdir():
        job_id, attempt, _pid = path.name.rsplit(".", 2)
        start, *done = path.read_text().split()
        found.setdefault(job_id, []).append((int(attempt), float(start), bool(done)))
    return {k: sorted(v, key=lambda r: r[1]) for k, v in found.items()}


def wait_started(runs: Path, ids: list[str], timeout_s: float, strict: bool = True) -> None:
    """Until each of these jobs has started once; past ``timeout_s``, stop the benchmark
    (``strict``) or go on (the figures tell)."""
    deadline = time.monotonic() + timeout_s
    while not all(any(p.name.startswith(f"{i}.") for p in runs.iterdir()) for i in ids):
        if time.monotonic() > deadline:
            if strict:
                raise SystemExit(f"chaos.py: {', '.join(ids)} did not start in {timeout_s:g} s")
            return
        time.sleep(0.5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--faults", default="all", help=f"all, or some of {', '.join(KINDS)}")
    parser.add_argument("--outage", type=float, default=20.0)
    parser.add_argument("--cloud-outage", type=float, default=60.0)
    parser.add_argument("--calm", type=float, default=10.0)
    parser.add_argument("--every", type=float, default=4.0)
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--nodes", type=int, default=3, help="the on-prem pool's (2 GPUs each)")
    parser.add_argument("--run-s", type=float, default=3.0, help="each job's sleep")
    parser.add_argument("--train", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--deadline", type=float, default=300.0, help="for the jobs to end")
    parser.add_argument("--keep", type=Path, help="work in this new folder and keep it")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    kinds = list(KINDS) if args.faults == "all" else args.faults.split(",")
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        parser.error(f"--faults: unknown {', '.join(unknown)}; expected some of {', '.join(KINDS)}")
    if args.keep:
        args.keep.mkdir(parents=True)
        result = run(args, kinds, args.keep.resolve())
    else:
        with tempfile.TemporaryDirectory(prefix="meshctl-chaos-") as tmp:
            result = run(args, kinds, Path(tmp))
    if args.json:
        print(json.dumps(result))
        return
    for key in ("faults", "jobs", "succeeded", "failed_by_fault", "ran_twice", "run_again", "lost"):
        print(f"{key}: {result[key]}")
    print(f"baseline_s: {result['baseline_s']}  cloud_baseline_s: {result['cloud_baseline_s']}")
    for fault in result["per_fault"]:
        notes = "; ".join(fault["notes"])
        launch = f" (to its launch {fault['to_launch_s']} s)" if "to_launch_s" in fault else ""
        print(f"  {fault['kind']:<18} outage {fault['outage_s']:6.1f} s  delay "
              f"{fault['delay_s']} s{launch}  within: {fault['within']}  {notes}")  # fmt: skip
    for line in result["failures"]:
        print(f"  failed: {line}")


@dataclass
class Outcome:
    """What a run sent and what became of it."""

    faults: list[Fault]
    sent: list[Submitted]  # every job, probes and calm bursts included; not the train job
    probes: dict[str, list[Submitted]]  # by fault
    clouds: list[Submitted]  # the calm bursts
    train: str | None
    records: dict[str, Any] = field(default_factory=dict)  # by job id (chaos_world.records)
    started: dict[str, list[tuple[int, float, bool]]] = field(default_factory=dict)  # marks()
    answers: dict[str, int] = field(default_factory=dict)  # the API server's, to each try
    launched: dict[str, float] = field(default_factory=dict)  # cloud jobs: their instance's


def run(args: argparse.Namespace, kinds: list[str], work: Path) -> dict[str, Any]:
    from chaos_world import world_up

    runs = Runs(work / "runs", args.run_s)
    runs.folder.mkdir()
    faults = [KINDS[k](k, args.cloud_outage if k in CLOUD_KINDS else args.outage) for k in kinds]
    clouds = any(k in CLOUD_KINDS for k in kinds)
    mesh_text = MESH + (CLOUD_POOLS if clouds else "")
    with ExitStack() as stack:
        world, client, mesh = world_up(stack, work, args, mesh_text, POLICY, ENV)
        train = mesh.train() if args.train else None
        stream = Stream(client, runs, args.every)
        stream.start()
        time.sleep(args.calm)
        calm = [client.submit(job(f"calm-{t}", runs, team=t)) for t in ("aws", "gcp") if clouds]
        wait_started(runs.folder, [c.id for c in calm], args.deadline)  # the calm figure, untouched
        probes: dict[str, list[Submitted]] = {}
        for fault in faults:
            time.sleep(args.calm)
            probes[fault.kind] = inject(fault, world, client, runs)
            # the next fault once this one's probes run: a delay is one fault's alone
            wait_started(runs.folder, [p.id for p in probes[fault.kind]], args.deadline, False)
        stream.stopped.set()
        stream.join()
        sent = [*stream.sent, *calm, *(p for ps in probes.values() for p in ps)]
        outcome = Outcome(faults, sent, probes, calm, train)
        ids = [s.id for s in sent] + ([train] if train else [])
        mesh.wait_ended(ids, args.deadline)
        outcome.records = mesh.records(ids)
        clouded = [*calm, *(p for k in CLOUD_KINDS for p in probes.get(k, []))]
        outcome.launched = mesh.launches([s.id for s in clouded])
        if args.keep:  # what the mesh did, for a reader of the kept folder
            mesh.events(work / "events.log")
        outcome.answers = dict(client.answers)
    outcome.started = marks(runs.folder)
    return figures(args, outcome)


def inject(fault: Fault, world: World, client: Client, runs: Runs) -> list[Submitted]:
    """Begin the fault, send its probes, hold it for its outage, end it."""
    fault.began_s = time.time()
    fault.begin(world)
    teams = ("aws", "gcp") if fault.kind in CLOUD_KINDS else ("default",)
    with ThreadPoolExecutor(len(teams)) as senders:  # a store away holds a submission up
        # ahead of the stream in the queue: its wait is the fault's, not the stream's
        probes = [job(f"probe-{fault.kind}-{t}", runs, team=t, priority=PROBE) for t in teams]
        sending = [senders.submit(client.submit, p) for p in probes]
        time.sleep(max(0.0, fault.began_s + fault.outage_s - time.time()))
        fault.end(world)
        fault.ended_s = time.time()
        return [s.result() for s in sending]


def figures(args: argparse.Namespace, out: Outcome) -> dict[str, Any]:
    started = out.started
    first_fault = out.faults[0].began_s if out.faults else float("inf")
    calm = [(s.id, started[s.id][0][1] - s.first_try_s) for s in out.sent
            if s.name.startswith("stream-") and s.id in started
            and started[s.id][0][1] < first_fault]  # fmt: skip
    baseline = statistics.median(t for _, t in calm) if calm else 0.0
    gangs = [t for job_id, t in calm if _gang(job_id)]  # a gang starts slower: its group
    gang_baseline = statistics.median(gangs) if gangs else baseline
    singles = [t for job_id, t in calm if not _gang(job_id)]
    single_baseline = statistics.median(singles) if singles else baseline
    cloud_calm = [started[s.id][0][1] - s.first_try_s for s in out.clouds if s.id in started]
    cloud_baseline = max(cloud_calm) if cloud_calm else 0.0
    launch_calm = [out.launched[s.id] - s.first_try_s for s in out.clouds if s.id in out.launched]
    launch_baseline = max(launch_calm) if launch_calm else 0.0
    failures, lost, twice, again = [], [], [], []
    for job_id in [s.id for s in out.sent] + ([out.train] if out.train else []):
        record = out.records.get(job_id)
        if record is None or record["state"] not in ("succeeded", "failed", "cancelled"):
            lost.append(job_id)
        elif record["state"] != "succeeded":
            failures.append(f"{job_id} ({record['name']}): {record['state']}: {record['why']}")
        ran = started.get(job_id, [])
        attempts = [a for a, _, _ in ran]
        if len(set(attempts)) != len(attempts) or any(done for _, _, done in ran[:-1]):
            twice.append(job_id)  # an attempt run twice, or a run whose work was done redone
        elif len(ran) > 1:
            again.append(job_id)  # killed by a fault and run again, as it should be

    def calm_start(job_id: str) -> float:
        return gang_baseline if _gang(job_id) else single_baseline

    per_fault = [
        _held_up(
            f,
            out,
            (lambda _: cloud_baseline) if f.kind in CLOUD_KINDS else calm_start,
            args.interval,
        )
        for f in out.faults
    ]
    for fault, figure in zip(out.faults, per_fault, strict=True):
        if fault.kind in CLOUD_KINDS:
            launch = _to_launch(fault, out, launch_baseline, args.interval)
            figure["notes"] += launch.pop("told")
            figure.update(launch)
    return {
        "faults": len(out.faults),
        "jobs": len(out.sent) + (1 if out.train else 0),
        "succeeded": sum(1 for r in out.records.values() if r["state"] == "succeeded"),
        "failed_by_fault": len(failures),
        "ran_twice": len(twice),
        "run_again": len(again),
        "lost": len(lost),
        "http_500": out.answers.get("500", 0),
        "baseline_s": round(baseline, 2),
        "baseline_single_s": round(single_baseline, 2),
        "baseline_gang_s": round(gang_baseline, 2),
        "cloud_baseline_s": round(cloud_baseline, 2),
        "cloud_launch_baseline_s": round(launch_baseline, 2),
        "per_fault": per_fault,
        "failures": failures,
        "lost_ids": lost,
        "ran_twice_ids": twice,
        "ran_twice_runs": {job_id: _runs(out, job_id) for job_id in twice},
        "run_again_ids": again,
        "answers": out.answers,
        "train": out.records.get(out.train) if out.train else None,
    }


def _gang(job_id: str) -> bool:
    """Whether the job is one of the stream's gangs (its even-numbered jobs)."""
    found = re.match(r"stream-(\d+)-", job_id)
    return found is not None and int(found.group(1)) % 2 == 0


def _held_up(
    fault: Fault, out: Outcome, baseline: Callable[[str], float], interval: float
) -> dict[str, Any]:
    """How long the fault held work up: its probes from their sending, and the jobs running
    as it began that had to start again from its start, to their next start; less the calm
    figure for a job of its kind. Within: at most the outage (until what it broke was back)
    plus two cycles."""
    held: dict[str, float] = {}  # job id -> held up for
    told = []
    for probe in out.probes[fault.kind]:
        sent = max(fault.began_s, probe.first_try_s)
        held[probe.id] = _next_start(out.started.get(probe.id, []), sent) - sent
        told.append(f"{probe.name}: acknowledged after {probe.acked_s - sent:.1f} s, "
                    f"started after {held[probe.id]:.1f} s")  # fmt: skip
    for job_id, ran in out.started.items():
        cut = [t for _, t, done in ran if t < fault.began_s and not done]  # killed mid-run
        if cut and ran[-1][1] > fault.began_s:
            held[job_id] = _next_start(ran, fault.began_s) - fault.began_s
            told.append(f"{job_id}: running, started again after {held[job_id]:.1f} s")
    outage = fault.ended_s - fault.began_s
    worst = max((t - baseline(job_id) for job_id, t in held.items()), default=None)
    delay = None if worst is None or worst == float("inf") else worst  # None: never
    return {
        "kind": fault.kind,
        "outage_s": round(outage, 1),
        "delay_s": None if delay is None else round(delay, 1),
        "within": delay is not None and delay <= outage + 2 * interval,
        "held_up": len(held),
        "notes": fault.notes + told,
    }


def _to_launch(fault: Fault, out: Outcome, baseline: float, interval: float) -> dict[str, Any]:
    """A cloud fault's hold on work up to the launch: from each probe's sending to the
    provider's launch of its instance, less the calm bursts' figure; whether that is within
    the outage plus two cycles."""
    waits, told = {}, []
    for probe in out.probes[fault.kind]:
        sent = max(fault.began_s, probe.first_try_s)
        launched = out.launched.get(probe.id)
        waits[probe.id] = float("inf") if launched is None else launched - sent
        ran = out.started.get(probe.id, [])
        boot = f", started {ran[0][1] - launched:.1f} s after it" if ran and launched else ""
        told.append(f"{probe.name}: its instance launched after {waits[probe.id]:.1f} s{boot}")
    worst = max(waits.values(), default=float("inf"))
    to_launch = None if worst == float("inf") else worst - baseline
    outage = fault.ended_s - fault.began_s
    return {
        "to_launch_s": None if to_launch is None else round(to_launch, 1),
        "launch_within": to_launch is not None and to_launch <= outage + 2 * interval,
        "told": told,
    }


def _runs(out: Outcome, job_id: str) -> list[str]:
    """Each run of a job: its attempt, when it started against the fault last begun before
    it, and whether its work was done."""
    told = []
    for attempt, at, done in out.started.get(job_id, []):
        before = [f for f in out.faults if f.began_s <= at]
        when = f"{at - before[-1].began_s:+.1f} s from {before[-1].kind}" if before else "calm"
        told.append(f"attempt {attempt} started {when}, {'done' if done else 'not done'}")
    return told


def _next_start(ran: list[tuple[int, float, bool]], after_s: float) -> float:
    later = [t for _, t, _ in ran if t >= after_s]
    return later[0] if later else float("inf")


if __name__ == "__main__":
    main()
