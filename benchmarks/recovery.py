"""Recovery from a node lost mid-training, killed or silent, with meshctl and with plain Ray
Train.

How fast the run notices, how fast it trains again, how many steps it redoes and what the
failure costs it overall:

    python benchmarks/recovery.py [--loss kill|stop|both] [--steps 120] [--every 10]
                                  [--kill-at 45] [--runs 1] [--deadline 300] [--json]

Both sides train the example loop (examples/train/model.py: one worker, CPU, seeded) for
``--steps`` steps with ``step_delay_s`` 0.1 and a checkpoint every ``--every`` steps, with
Ray Train collecting reports every 0.1 s (``RAY_TRAIN_HEALTH_CHECK_INTERVAL_S``, what meshctl
sets for its train jobs), ``FailureConfig(max_failures=3)`` and ``CheckpointConfig(num_to_keep=3)``.
The loop runs inside ``traced_loop``, the same on both sides: rank 0 appends to a trace file
its node and the checkpoint it starts from at each (re)start, and the time and step of each
``ray.train.report`` once it returns. As soon as the trace shows step ``--kill-at``, the node
the worker runs on is lost (``node_loss.py``), the same way and at the same step on both
sides, whatever their checkpoints' timing:

- ``kill``: every process of the node is killed (``meshctl.pools.local.remove_node``:
  SIGTERM, SIGKILL 3 s later), as the integration test of train jobs does. Connections close:
  Ray sees the node dead within seconds.
- ``stop``: a silent node. Every process of the node (the raylet and its agents, its workers,
  the job driver on it, and the node's meshctl agent where it has one: what ``remove_node``
  would end) is stopped with SIGSTOP and left stopped: nothing exits, nothing answers. Ray's
  GCS declares such a node dead after its health checks fail (with Ray 2.60's defaults about
  a minute); meshctl's controller calls it dead once its agent has been silent for the pool's
  ``agents.dead_after_s`` (mesh.yaml here sets none: the defaults, suspect after 10 s, dead
  after 30 s). Whichever comes first is what is measured; ``ray_dead_after_s`` says when Ray
  declared it dead.

``--loss both`` (the default) runs ``kill``, then ``stop``, ``--runs`` times each, on each side.
After each run the lost node's processes that are left (the stopped ones by SIGKILL: one let
go on would report steps its run no longer takes) are ended, also on any error, and the node
is started again under its name (with its agent on the meshctl side) once Ray has let the old
one go.

- ``meshctl``: a temporary embedded mesh (a local Ray cluster: a head and three emulated 1-GPU
  nodes with their agents, the controller cycling every 0.5 s) runs ``meshctl train
  recovery:traced_loop``. The job's driver (and with it Ray Train's controller) runs on the
  pool's head. A killed node, or a silent one once its agent's silence makes it dead to
  meshctl: the controller nominates a free node and Ray Train resumes there from the latest
  checkpoint inside the attempt (``meshctl.lifecycle.replacing``; for the silent node the run
  ends its unanswering worker itself, ``meshctl.train.run.Replacements``). ``detect_s``,
  ``resume_s`` and ``steps_lost`` are meshctl's own account: ``meshctl jobs show -o json``'s
  ``training.recoveries[0]`` (``meshctl/controller/recovery.py``), from the progress the job
  records beside its checkpoints and the controller's events.
- ``ray_train``: a plain Ray cluster of the same shape (a head with no CPUs and three 1-CPU
  nodes, started with ``meshctl.pools.local``, no meshctl controller), a ``TorchTrainer`` fitted
  by this script's own driver (on the head, so Ray Train's controller is there too), its one
  worker free to run on any of the three nodes. Ray Train restarts the worker group inside the
  run. A ``UserCallback`` (it runs in Ray Train's controller) records every report and every
  failure Ray Train sees: the same events meshctl's progress records.

The figures, per loss and side, for the recovery from the loss:

- ``detect_s``: from the last report before the failure to the failure being seen (meshctl:
  the first of the job's eviction and a worker failure Ray Train recorded; plain Ray Train: its
  ``after_exception``). Reports are timed in Ray Train's controller on both sides.
- ``resume_s``: from the failure being seen to the first report after it.
- ``steps_lost``: the last step reported before the failure less the step of the checkpoint the
  run resumed from: the steps done again (at most ``--every`` when the loss comes after a
  report).
- ``ettr``: effective training time ratio, (steps - 1) x the median time per step of the run's
  uninterrupted stretches, over the wall time from the run's first report to its last: the
  useful share of the run's time, counting checkpoint writes, detection, restart and the steps
  redone as lost. Times per step are the gaps between consecutive reports of one worker group
  (from the trace); ``steps - 1`` as the first report ends step 0, so a run with nothing lost
  but its checkpoints scores just under 1.

``summary`` has, per loss, ``resume_ratio`` (meshctl's ``resume_s`` over plain Ray Train's)
and ``ettr_ratio`` (the same for ``ettr``), and ``unrecovered``: a run that has not finished
within ``--deadline`` seconds of the loss is stopped (meshctl: the job cancelled; Ray Train:
aborted as Ctrl-C does) and counts as not recovered, as does one that failed or recorded no
recovery; its figures are null and the note says why.

meshctl's progress file is written at each checkpoint and at most once a second otherwise, so
when the node dies with the process that writes it, meshctl's "last report before the failure"
can be up to a second early (``detect_s`` longer, ``steps_lost`` smaller by as much); Ray Train
seeing the worker die first (its controller records that at once) avoids it. ``notes`` has,
per run, the steps the trace shows were done twice, for comparison, when Ray declared the lost
node dead, and on the meshctl side the job's events after the loss (to the second).

With ``--runs`` > 1 each figure is the median over the runs that recovered. Prints a table,
or with ``--json`` one line of JSON. Takes about 1.5 minutes with ``--loss kill`` on a 2-core
machine (most of it starting the two clusters) and about 7.5 with ``--loss both`` (the default;
4.5 for the meshctl side, 3 for plain Ray Train, on a shared 2-core machine): a silent node
costs each side a minute or more before its run trains again.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

import node_loss
import yaml

from meshctl.model.mesh import LocalPool, NodeAgents, NodeGroup
from meshctl.pools import local
from meshctl.pools.observed import NODE_LABEL

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "train"
DEADLINE_S = 180.0  # for each wait before the loss (a cluster, a step), and Ray letting go
RUN_DEADLINE_S = 300.0  # from the loss to the run's end, unless --deadline says otherwise
ABORT_GRACE_S = 30.0  # Ray Train's abort (Ctrl-C) that has not ended the run by then: again
EXIT_TIMEOUT = 124  # meshctl jobs wait: the timeout came first
STEP_DELAY_S = 0.1
HEALTH_CHECK_INTERVAL_S = "0.1"
FIGURES = ("detect_s", "resume_s", "steps_lost", "ettr")
SIDES = {"meshctl": "meshctl", "ray_train": "Ray Train"}
MESH = """\
apiVersion: meshctl/v1
kind: Mesh
metadata: {{name: recovery-bench}}
spec:
  pools:
    - name: onprem
      provider: local
      checkpoint_storage: {{uri: "file://{checkpoints}"}}
      nodes:
        - {{name: n, count: 3, gpus: 1, cpus: 1, memory_gib: 2GiB,
           accelerator: {{model: A100, memory_gib: 80GiB}}}}
"""
PLAIN_NODE = {"cpus": 1, "memory_gib": 2}

Record = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Figures:
    detect_s: float | None
    resume_s: float | None
    steps_lost: int | None
    ettr: float | None


NONE = Figures(None, None, None, None)


@dataclass(frozen=True, slots=True)
class Run:
    """One run of one side (``SIDES``): the node lost and how, the figures, what they came
    from; ``note`` says why there are no figures (None: it recovered)."""

    side: str
    loss: str
    node: str
    figures: Figures
    detail: dict[str, Any] = field(default_factory=dict)
    note: str | None = None


# --- what is computed (pure) ----------------------------------------------------------------


def ettr(steps: int, stretches: Sequence[Sequence[float]]) -> float | None:
    """Effective training time ratio of a run of ``steps`` steps, from its report times, one
    list per uninterrupted stretch: (steps - 1) x the median gap between consecutive reports
    of a stretch, over the time from the first report to the last."""
    gaps = [b - a for times in stretches for a, b in pairwise(times)]
    reports = [t for times in stretches for t in times]
    if not gaps or max(reports) <= min(reports):
        return None
    return (steps - 1) * statistics.median(gaps) / (max(reports) - min(reports))


def stretches(trace: Sequence[Record]) -> list[list[Record]]:
    """The trace's reports, split where a worker group (re)started."""
    found: list[list[Record]] = []
    for record in trace:
        if record["kind"] == "start" or not found:
            found.append([])
        if record["kind"] == "report":
            found[-1].append(record)
    return [s for s in found if s]


def ettr_of(steps: int, trace: Sequence[Record]) -> float | None:
    return ettr(steps, [[r["at_s"] for r in s] for s in stretches(trace)])


def redone(trace: Sequence[Record]) -> int | None:
    """Steps the trace shows done twice: the last one reported before the restart less the one
    the run resumed at (the loop starts at the step after its checkpoint's)."""
    found = stretches(trace)
    if len(found) < 2:
        return None
    return int(found[0][-1]["step"]) - (int(found[1][0]["step"]) - 1)


def ray_train_figures(
    steps: int, events: Sequence[Record], trace: Sequence[Record]
) -> tuple[Figures, dict[str, Any]]:
    """The recovery's figures from what the callback (reports and failures, in time order)
    and the trace recorded; and what they came from."""
    failure = next((e for e in events if e["kind"] == "failure"), None)
    if failure is None:
        return Figures(None, None, None, ettr_of(steps, trace)), {}
    reports = [e for e in events if e["kind"] == "report"]
    before = [e for e in reports if e["at_s"] <= failure["at_s"]]
    after = [e for e in reports if e["at_s"] > failure["at_s"]]
    step_of = {e["checkpoint"]: e["step"] for e in reports if e.get("checkpoint")}
    restart = next((r for r in trace if r["kind"] == "start" and r["at_s"] > failure["at_s"]), None)
    resumed: int | None = None
    if restart is not None:
        resumed = step_of.get(restart["checkpoint"]) if restart["checkpoint"] else -1
    if resumed is None and after:
        resumed = int(after[0]["step"]) - 1
    last = before[-1] if before else None
    figures = Figures(
        failure["at_s"] - last["at_s"] if last else None,
        after[0]["at_s"] - failure["at_s"] if after else None,
        int(last["step"]) - resumed if last and resumed is not None else None,
        ettr_of(steps, trace),
    )
    detail = {
        "last_step": last["step"] if last else None,
        "resumed_from_step": resumed,
        "error": failure.get("error"),
    }
    return figures, detail


def median_figures(runs: Sequence[Figures]) -> dict[str, float | int | None]:
    """Each figure's median over the runs that have it (None: none has)."""
    out: dict[str, float | int | None] = {}
    for key in FIGURES:
        values = [v for r in runs if (v := getattr(r, key)) is not None]
        out[key] = statistics.median(values) if values else None
    return out


def ratio(mine: float | int | None, theirs: float | int | None) -> float | None:
    """``mine`` over ``theirs``, to 3 places; None when either is missing or ``theirs`` is 0."""
    if mine is None or not theirs:
        return None
    return round(mine / theirs, 3)


def loss_result(runs: Sequence[Run], loss: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """For one kind of loss: each side's median figures; and the summary: meshctl's resume
    time and ETTR over plain Ray Train's, and the notes of the runs that did not recover."""
    mine = [r for r in runs if r.loss == loss]
    figures = {side: median_figures([r.figures for r in mine if r.side == side]) for side in SIDES}
    summary = {
        "resume_ratio": ratio(figures["meshctl"]["resume_s"], figures["ray_train"]["resume_s"]),
        "ettr_ratio": ratio(figures["meshctl"]["ettr"], figures["ray_train"]["ettr"]),
        "unrecovered": [f"{r.side}: {r.note}" for r in mine if r.note],
    }
    return figures, summary


# --- both sides -----------------------------------------------------------------------------


def _append(path: str, record: dict[str, Any]) -> None:
    with open(path, "a", encoding="utf-8") as out:
        out.write(json.dumps(record) + "\n")


def read_records(path: Path) -> list[dict[str, Any]]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in lines if line.endswith("}")]


def traced_loop(config: dict[str, Any]) -> Any:
    """What the worker runs on both sides: the example loop, rank 0 appending to the file
    ``config["bench_trace"]`` each (re)start (node, checkpoint) and each report (time, step)."""
    import ray
    import ray.train

    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # the working_dir: model.py
    import model

    trace = str(config["bench_trace"])
    rank0 = ray.train.get_context().get_world_rank() == 0
    if rank0:
        checkpoint = ray.train.get_checkpoint()
        node = ray.get_runtime_context().get_node_labels().get(NODE_LABEL)
        start = {
            "kind": "start",
            "at_s": time.time(),
            "node": node[0] if isinstance(node, list) else node,
            "checkpoint": checkpoint.path if checkpoint is not None else None,
        }
        _append(trace, start)
    report = ray.train.report

    def recorded(metrics: dict[str, Any], *args: Any, **kwargs: Any) -> None:
        report(metrics, *args, **kwargs)
        if rank0:
            _append(trace, {"kind": "report", "at_s": time.time(), "step": metrics.get("step")})

    ray.train.report = recorded  # model.py calls ray.train.report(...)
    try:
        return model.train_loop({k: v for k, v in config.items() if not k.startswith("bench_")})
    finally:
        ray.train.report = report


def _loop_config(args: argparse.Namespace, trace: Path) -> dict[str, Any]:
    return {
        "steps": args.steps,
        "checkpoint_every_steps": args.every,
        "step_delay_s": STEP_DELAY_S,
        "bench_trace": str(trace),
    }


def _wait(what: str, done: Callable[[], bool], interval_s: float = 0.02) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not done():
        if time.monotonic() > deadline:
            raise SystemExit(f"recovery benchmark: {what} not within {DEADLINE_S:.0f} s")
        time.sleep(interval_s)


def lose_at_step(
    trace: Path,
    step: int,
    cluster: Callable[[], local.LocalCluster],
    run_dir: Path,
    loss: str,
    abandon: threading.Event | None = None,
) -> node_loss.LostNode | None:
    """Once the trace shows ``step`` reported, lose the node the worker runs on (``loss``:
    kill or stop every process of it); None if ``abandon`` was set first (the run ended)."""

    def reached() -> bool:
        return any(r["kind"] == "report" and (r["step"] or 0) >= step for r in read_records(trace))

    _wait(f"step {step}", lambda: reached() or (abandon is not None and abandon.is_set()))
    if not reached():
        return None
    node = str([r for r in read_records(trace) if r["kind"] == "start"][-1]["node"])
    return node_loss.lose(cluster(), node, run_dir, loss)


def restart_node(
    cluster: local.LocalCluster,
    name: str,
    group: NodeGroup,
    run_dir: Path,
    agents: NodeAgents | None = None,
) -> None:
    """The lost node started again, under its name (with its agent: ``agents``), once Ray no
    longer lists the old one alive (else the new one would seem up at once)."""
    if not node_loss.wait_gone(cluster, name, DEADLINE_S):
        raise SystemExit(f"recovery benchmark: Ray still lists node {name} alive")
    local.add_node(cluster, name, group, run_dir, agents)


def working_dir(work: Path) -> Path:
    """The jobs' working directory: the example and this module (``traced_loop``), with the
    module it imports."""
    folder = work / "loop"
    folder.mkdir()
    shutil.copy(EXAMPLE / "model.py", folder / "model.py")
    shutil.copy(Path(__file__), folder / "recovery.py")
    shutil.copy(Path(node_loss.__file__), folder / "node_loss.py")
    return folder


# --- meshctl --------------------------------------------------------------------------------


class Mesh:
    """``python -m meshctl`` in a temporary home, from a temporary working directory."""

    def __init__(self, work: Path) -> None:
        self.work, self.home = work, work / "home"

    def run(
        self,
        *args: str,
        check: bool = True,
        env: dict[str, str] | None = None,
        timeout_s: float = DEADLINE_S + 60,
    ) -> subprocess.CompletedProcess[str]:
        """``env``: more environment (the rest is this one's, less Ray's own settings)."""
        base = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
        done = subprocess.run(
            [sys.executable, "-m", "meshctl", *args],
            capture_output=True,
            text=True,
            cwd=self.work,
            env={**base, "MESHCTL_HOME": str(self.home), **(env or {})},
            timeout=timeout_s,
        )
        if check and done.returncode != 0:
            raise SystemExit(
                f"meshctl {' '.join(args)} exited {done.returncode}:\n{done.stdout}{done.stderr}"
            )
        return done

    def show(self, job_id: str) -> dict[str, Any]:
        shown: dict[str, Any] = json.loads(self.run("jobs", "show", job_id, "-o", "json").stdout)
        return shown

    def cluster(self) -> local.LocalCluster:
        return local.LocalCluster.load(local.run_file(self.home / "run", "onprem"))


@contextlib.contextmanager
def mesh_up(work: Path) -> Iterator[Mesh]:
    (work / "mesh.yaml").write_text(MESH.format(checkpoints=work / "checkpoints"))
    mesh = Mesh(work)
    try:
        mesh.run("--mesh", str(work / "mesh.yaml"), "up", "--interval", "0.5")
        yield mesh
    finally:
        mesh.run("down", "--force", check=False)


def mesh_pool(work: Path) -> LocalPool:
    """The pool mesh.yaml describes: the shape of its nodes and its agents' settings."""
    spec = yaml.safe_load((work / "mesh.yaml").read_text())["spec"]
    return LocalPool.model_validate(spec["pools"][0])


def train_command(args: argparse.Namespace, loop_dir: Path, trace: Path, name: str) -> list[str]:
    command = [
        "train",
        "recovery:traced_loop",
        "--name",
        name,
        "--no-follow",
        "--cpus-per-worker",
        "0.5",
        "--gpus-per-worker",
        "1",
        "--memory-per-worker",
        "512MiB",
        "--working-dir",
        str(loop_dir),
    ]
    for key, value in _loop_config(args, trace).items():
        command += ["--config", f"{key}={json.dumps(value)}"]
    return command


def meshctl_once(
    mesh: Mesh, loop_dir: Path, args: argparse.Namespace, loss: str, index: int
) -> Run:
    """One train job whose node is lost (``loss``) at ``--kill-at``, waited for at most
    ``--deadline`` seconds from the loss (then cancelled); the node's leftovers ended."""
    trace = mesh.work / f"meshctl-{loss}-trace-{index}.jsonl"
    name = f"recovery-{loss}-{index}"
    job_id = mesh.run(*train_command(args, loop_dir, trace, name)).stdout.strip().splitlines()[-1]
    run_dir = mesh.home / "run"
    lost = lose_at_step(trace, args.kill_at, mesh.cluster, run_dir, loss)
    assert lost is not None  # nothing abandons it
    try:
        left_s = max(1.0, lost.at_s + args.deadline - time.time())
        waited = mesh.run(
            "jobs", "wait", job_id, "--timeout", f"{left_s:.0f}", check=False,
            timeout_s=left_s + 60,
        )  # fmt: skip
        shown = mesh.show(job_id)
        if waited.returncode == EXIT_TIMEOUT:
            mesh.run("jobs", "cancel", job_id, check=False)
        return meshctl_run(shown, waited.returncode, lost, args, read_records(trace))
    finally:
        lost.end(mesh.cluster(), run_dir)


def meshctl_run(
    shown: Mapping[str, Any],
    waited: int,
    lost: node_loss.LostNode,
    args: argparse.Namespace,
    trace: Sequence[Record],
) -> Run:
    """The run's figures from ``jobs show`` (``shown``) and the trace, or why there are none
    (``waited``: ``jobs wait``'s exit status)."""
    recoveries = (shown.get("training") or {}).get("recoveries") or []
    first = recoveries[0] if recoveries else {}
    detail = {
        **first,
        "recoveries": len(recoveries),
        "steps_redone": redone(trace),
        "ray_dead_after_s": lost.ray_dead_after_s,
        "events": events_after(shown.get("events") or [], lost.at_s),
    }
    note = None
    if waited == EXIT_TIMEOUT:
        note = f"not finished {args.deadline:g} s after the loss ({shown.get('state')}): cancelled"
    elif waited != 0:
        note = f"the job ended {shown.get('state')}"
    elif first.get("resume_s") is None:
        note = "the job recorded no recovery"
    if note is not None:
        return Run("meshctl", lost.kind, lost.node, NONE, detail, note)
    figures = Figures(
        first["detect_s"], first["resume_s"], first["steps_lost"], ettr_of(args.steps, trace)
    )
    return Run("meshctl", lost.kind, lost.node, figures, detail)


def events_after(events: Sequence[Record], at_s: float) -> list[str]:
    """The job's events from the second of ``at_s`` on, as ``+12 s kind: message``."""
    found = []
    for event in events:
        when = dt.datetime.fromisoformat(str(event["occurred_at"])).timestamp()
        if when >= int(at_s):
            found.append(f"{when - at_s:+.0f} s {event['kind']}: {str(event['message'])[:120]}")
    return found


def meshctl_side(args: argparse.Namespace, work: Path, loop_dir: Path) -> list[Run]:
    """Each loss, ``--runs`` times, on one mesh; the lost node started again after each."""
    runs: list[Run] = []
    plan = [(loss, i) for loss in args.losses for i in range(args.runs)]
    with mesh_up(work) as mesh:
        pool = mesh_pool(work)
        for n, (loss, i) in enumerate(plan):
            run = meshctl_once(mesh, loop_dir, args, loss, i)
            _progress(run, i)
            runs.append(run)
            if n + 1 < len(plan):
                restart_node(
                    mesh.cluster(), run.node, pool.nodes[0], mesh.home / "run", pool.agents
                )
    return runs


def _progress(run: Run, index: int) -> None:
    said = run.note or run.figures
    print(f"{SIDES[run.side]}, {run.loss} run {index + 1}: node {run.node}: {said}; {run.detail}")


# --- plain Ray Train ------------------------------------------------------------------------


def _callback(path: str) -> Any:
    """A ``UserCallback`` (it runs in Ray Train's controller) appending every report and
    failure to ``path``."""
    from ray.train.v2.api.callback import UserCallback

    class Recorder(UserCallback):
        def after_report(
            self, run_context: Any, metrics: list[dict[str, Any]], checkpoint: Any
        ) -> None:
            step = (metrics[0] if metrics else {}).get("step")
            _append(
                path,
                {
                    "kind": "report",
                    "at_s": time.time(),
                    "step": step,
                    "checkpoint": checkpoint.path if checkpoint else None,
                },
            )

        def after_exception(self, run_context: Any, worker_exceptions: dict[int, Any]) -> None:
            error = "; ".join(
                f"worker {k}: {type(v).__name__}" for k, v in worker_exceptions.items()
            )
            _append(path, {"kind": "failure", "at_s": time.time(), "error": error})

    return Recorder()


@contextlib.contextmanager
def plain_cluster(run_dir: Path) -> Iterator[local.LocalCluster]:
    """A Ray cluster (no meshctl): a head with no CPUs and three 1-CPU nodes, n-0 .. n-2."""
    cluster = local.start_head("plain", run_dir)
    try:
        group = NodeGroup.model_validate({"name": "n", "count": 3, **PLAIN_NODE})
        for name in group.node_names():
            local.add_node(cluster, name, group, run_dir)
        yield cluster
    finally:
        local.stop(cluster)


def ray_train_once(
    cluster: local.LocalCluster, run_dir: Path, args: argparse.Namespace, loss: str, index: int
) -> Run:
    """One fit whose worker's node is lost (``loss``) at ``--kill-at``, aborted if it has not
    ended ``--deadline`` seconds after the loss; the node's leftovers ended."""
    folder = run_dir / f"ray-train-{loss}-{index}"
    folder.mkdir(parents=True)
    events, trace = folder / "events.jsonl", folder / "trace.jsonl"
    trainer = _trainer(args, folder, f"recovery-{loss}-{index}", events, trace)
    lost: list[node_loss.LostNode] = []
    ended = threading.Event()

    def lose() -> None:
        found = lose_at_step(trace, args.kill_at, lambda: cluster, run_dir, loss, ended)
        lost.extend([found] if found else [])

    killer = threading.Thread(target=lose, daemon=True)
    killer.start()
    try:
        note = fit_within(trainer, lambda: lost[0].at_s if lost else None, args.deadline)
    finally:
        ended.set()
        killer.join(timeout=DEADLINE_S)
        for each in lost:
            each.end(cluster, run_dir)
    if not lost:
        raise SystemExit(
            f"recovery benchmark: the plain Ray Train run ended before the loss: {note}"
        )
    return ray_train_run(args, lost[0], read_records(events), read_records(trace), note)


def ray_train_run(
    args: argparse.Namespace,
    lost: node_loss.LostNode,
    events: Sequence[Record],
    trace: Sequence[Record],
    note: str | None,
) -> Run:
    """The run's figures from what the callback and the trace recorded, or why there are
    none (``note``: why the fit did not end well)."""
    figures, detail = ray_train_figures(args.steps, events, trace)
    seen = next((e["at_s"] for e in events if e["kind"] == "failure"), None)
    detail = {
        **detail,
        "steps_redone": redone(trace),
        "failure_seen_after_s": None if seen is None else round(seen - lost.at_s, 2),
        "ray_dead_after_s": lost.ray_dead_after_s,
    }
    if note is None and figures.resume_s is None:
        note = "Ray Train recorded no recovery"
    if note is not None:
        return Run("ray_train", lost.kind, lost.node, NONE, detail, note)
    return Run("ray_train", lost.kind, lost.node, figures, detail)


def _trainer(args: argparse.Namespace, folder: Path, name: str, events: Path, trace: Path) -> Any:
    from ray.train.v2.api.config import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
    from ray.train.v2.torch.torch_trainer import TorchTrainer

    return TorchTrainer(
        traced_loop,
        train_loop_config=_loop_config(args, trace),
        scaling_config=ScalingConfig(num_workers=1),  # 1 CPU: on a node, never the head
        run_config=RunConfig(
            name=name,
            storage_path=str(folder / "storage"),
            failure_config=FailureConfig(max_failures=3),
            checkpoint_config=CheckpointConfig(num_to_keep=3),
            callbacks=[_callback(str(events))],
        ),
    )


def fit_within(trainer: Any, lost_at: Callable[[], float | None], deadline_s: float) -> str | None:
    """``trainer.fit()``, aborted as Ctrl-C aborts it once ``deadline_s`` have passed since
    the loss (``lost_at``: its time, None before): ``fit`` (in the main thread) installs Ray
    Train's SIGINT handler, which aborts the run on the first signal and exits on the third.
    Returns None when the fit ended well, else why not."""
    ended, aborted = threading.Event(), threading.Event()

    def watchdog() -> None:
        while not ended.wait(1.0):
            at_s = lost_at()
            if at_s is None or time.time() < at_s + deadline_s:
                continue
            aborted.set()
            for _ in range(3):
                if not ended.is_set():
                    os.kill(os.getpid(), signal.SIGINT)
                if ended.wait(ABORT_GRACE_S):
                    return

    previous = signal.getsignal(signal.SIGINT)
    threading.Thread(target=watchdog, daemon=True).start()
    try:
        trainer.fit()
    except SystemExit:  # Ray Train's SIGINT handler, once it aborted the run
        if not aborted.is_set():
            raise
    except Exception as err:  # the run failed: reported, not raised
        if not aborted.is_set():
            return f"fit raised {type(err).__name__}: {str(err)[:300]}"
    finally:
        ended.set()
        signal.signal(signal.SIGINT, previous)
    if aborted.is_set():
        return f"not finished {deadline_s:g} s after the loss: aborted"
    return None


def ray_train_side(args: argparse.Namespace, work: Path, loop_dir: Path) -> list[Run]:
    """Each loss, ``--runs`` times, on one plain cluster; the lost node started again after
    each."""
    run_dir = work / "plain"
    runs: list[Run] = []
    plan = [(loss, i) for loss in args.losses for i in range(args.runs)]
    with plain_cluster(run_dir) as cluster:
        # Ray reads its auth mode once, when it is first imported: not before this.
        os.environ.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=cluster.token_file)
        os.environ.pop("RAY_AUTH_TOKEN", None)
        import ray

        ray.init(
            address=cluster.gcs,
            log_to_driver=False,
            runtime_env={
                "working_dir": str(loop_dir),
                "env_vars": {"RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": HEALTH_CHECK_INTERVAL_S},
            },
        )
        try:
            for n, (loss, i) in enumerate(plan):
                run = ray_train_once(cluster, run_dir, args, loss, i)
                _progress(run, i)
                runs.append(run)
                if n + 1 < len(plan):
                    group = NodeGroup.model_validate({"name": run.node, **PLAIN_NODE})
                    restart_node(cluster, run.node, group, run_dir)
        finally:
            ray.shutdown()
    return runs


# --- output ---------------------------------------------------------------------------------


def result_of(
    args: argparse.Namespace, runs: Sequence[Run], side_s: Mapping[str, float]
) -> dict[str, Any]:
    """The JSON: per loss, each side's figures; the summary per loss; the notes."""
    result: dict[str, Any] = {}
    summary: dict[str, Any] = {}
    for loss in args.losses:
        result[loss], summary[loss] = loss_result(runs, loss)
    samples = {
        loss: {
            side: [
                {"node": r.node, **asdict(r.figures), "note": r.note, **r.detail}
                for r in runs
                if r.loss == loss and r.side == side
            ]
            for side in SIDES
        }
        for loss in args.losses
    }
    return {
        **result,
        "summary": summary,
        "checkpoint_interval_steps": args.every,
        "runs": args.runs,
        "deadline_s": args.deadline,
        "notes": {
            "steps": args.steps,
            "kill_at_step": args.kill_at,
            "step_delay_s": STEP_DELAY_S,
            "samples": samples,
            **{f"{side}_side_s": round(s, 1) for side, s in side_s.items()},
        },
    }


def _fmt(value: float | int | None, spec: str = ".2f", unit: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{unit}"


def _times(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def table(args: argparse.Namespace, result: Mapping[str, Any], elapsed_s: float) -> list[str]:
    runs = f"{args.runs} run{'s' if args.runs > 1 else ''} each"
    lines = [
        f"a node lost at step {args.kill_at} of {args.steps}, a checkpoint every {args.every} "
        f"steps ({runs}, medians)",
        "(kill: its processes killed; stop: its processes stopped, a silent node)",
        f"{'loss':5} {'':10} {'detect':>8} {'resume':>8} {'steps lost':>11} {'ETTR':>6}",
    ]
    for loss in args.losses:
        for n, (key, label) in enumerate(SIDES.items()):
            row = result[loss][key]
            lines.append(
                f"{loss if n == 0 else '':5} {label:10} {_fmt(row['detect_s'], unit=' s'):>8} "
                f"{_fmt(row['resume_s'], unit=' s'):>8} "
                f"{_fmt(row['steps_lost'], 'g'):>11} {_fmt(row['ettr']):>6}"
            )
        summary = result["summary"][loss]
        lines.append(
            f"{'':5} meshctl / Ray Train: resume {_times(summary['resume_ratio'])}, "
            f"ETTR {_times(summary['ettr_ratio'])}"
        )
        lines += [f"{'':5} not recovered, {note}" for note in summary["unrecovered"]]
    lines.append(f"({elapsed_s:.0f} s in all)")
    return lines


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--loss", choices=(*node_loss.LOSSES, "both"), default="both",
        help="kill the node's processes, stop them (a silent node), or both in turn",
    )  # fmt: skip
    parser.add_argument("--steps", type=int, default=120, help="training steps")
    parser.add_argument("--every", type=int, default=10, help="checkpoint interval in steps")
    parser.add_argument("--kill-at", type=int, default=45, help="lose the node after this step")
    parser.add_argument("--runs", type=int, default=1, help="runs per loss and side (medians)")
    parser.add_argument(
        "--deadline", type=float, default=RUN_DEADLINE_S,
        help="seconds from the loss for a run to end; later it is stopped, not recovered",
    )  # fmt: skip
    parser.add_argument("--json", action="store_true", help="one line of JSON")
    args = parser.parse_args(argv)
    if not 0 < args.kill_at < args.steps - 1:
        parser.error(f"--kill-at: expected a step from 1 to {args.steps - 2}")
    if not 0 < args.every < args.steps:
        parser.error(f"--every: expected 1 to {args.steps - 1} steps")
    if args.runs < 1:
        parser.error("--runs: expected 1 or more")
    if args.deadline <= 0:
        parser.error(f"--deadline: expected seconds above 0, got {args.deadline:g}")
    args.losses = list(node_loss.LOSSES) if args.loss == "both" else [args.loss]
    return args


def main() -> None:
    args = parse()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="meshctl-recovery-") as tmp:
        work = Path(tmp)
        loop_dir = working_dir(work)
        # Progress and Ray's chatter go to stderr; stdout is the result.
        with contextlib.redirect_stdout(sys.stderr):
            runs = meshctl_side(args, work, loop_dir)
            meshctl_s = time.perf_counter() - started
            runs += ray_train_side(args, work, loop_dir)
    elapsed_s = time.perf_counter() - started
    side_s = {"meshctl": meshctl_s, "ray_train": elapsed_s - meshctl_s}
    result = result_of(args, runs, side_s)
    if args.json:
        print(json.dumps(result))
        return
    print("\n".join(table(args, result, elapsed_s)))


if __name__ == "__main__":
    main()
