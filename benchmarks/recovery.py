"""Recovery from a node killed mid-training, with meshctl and with plain Ray Train.

How fast the run notices, how fast it trains again, how many steps it redoes and what the
failure costs it overall:

    python benchmarks/recovery.py [--steps 120] [--every 10] [--kill-at 45] [--runs 1] [--json]

Both sides train the example loop (examples/train/model.py: one worker, CPU, seeded) for
``--steps`` steps with ``step_delay_s`` 0.1 and a checkpoint every ``--every`` steps, with
Ray Train collecting reports every 0.1 s (``RAY_TRAIN_HEALTH_CHECK_INTERVAL_S``, what meshctl
sets for its train jobs), ``FailureConfig(max_failures=3)`` and ``CheckpointConfig(num_to_keep=3)``.
The loop runs inside ``traced_loop``, the same on both sides: rank 0 appends to a trace file
its node and the checkpoint it starts from at each (re)start, and the time and step of each
``ray.train.report`` once it returns. As soon as the trace shows step ``--kill-at``, every
process of that node is stopped (``meshctl.pools.local.remove_node``: SIGTERM, SIGKILL 3 s
later), as the integration test of train jobs does; the run is killed at the same step on both
sides, whatever their checkpoints' timing.

- ``meshctl``: a temporary embedded mesh (a local Ray cluster: a head and three emulated 1-GPU
  nodes, the controller cycling every 0.5 s) runs ``meshctl train recovery:traced_loop``. The
  job's driver (and with it Ray Train's controller) is pinned to the job's node, so the kill
  ends the attempt: the controller evicts the job, requeues it and submits attempt 2 on another
  node, which resumes from the latest checkpoint. ``detect_s``, ``resume_s`` and ``steps_lost``
  are meshctl's own account: ``meshctl jobs show -o json``'s ``training.recoveries[0]``
  (``meshctl/controller/recovery.py``), from the progress the job records beside its
  checkpoints and the controller's events.
- ``ray_train``: a plain Ray cluster of the same shape (a head with no CPUs and three 1-CPU
  nodes, started with ``meshctl.pools.local``, no meshctl controller), a ``TorchTrainer`` fitted
  by this script's own driver (on the head, so Ray Train's controller is there too), its one
  worker free to run on any of the three nodes. Ray Train restarts the worker group inside the
  run. A ``UserCallback`` (it runs in Ray Train's controller) records every report and every
  failure Ray Train sees: the same events meshctl's progress records.

The figures, per side, for the recovery from the kill:

- ``detect_s``: from the last report before the failure to the failure being seen (meshctl:
  the first of the job's eviction and a worker failure Ray Train recorded; plain Ray Train: its
  ``after_exception``). Reports are timed in Ray Train's controller on both sides.
- ``resume_s``: from the failure being seen to the first report after it.
- ``steps_lost``: the last step reported before the failure less the step of the checkpoint the
  run resumed from: the steps done again (at most ``--every`` when the kill comes after a report).
- ``ettr``: effective training time ratio, (steps - 1) x the median time per step of the run's
  uninterrupted stretches, over the wall time from the run's first report to its last: the
  useful share of the run's time, counting checkpoint writes, detection, restart and the steps
  redone as lost. Times per step are the gaps between consecutive reports of one worker group
  (from the trace); ``steps - 1`` as the first report ends step 0, so a run with nothing lost
  but its checkpoints scores just under 1.

meshctl's progress file is written at each checkpoint and at most once a second otherwise, so
when the node dies with the process that writes it, meshctl's "last report before the failure"
can be up to a second early (``detect_s`` longer, ``steps_lost`` smaller by as much); Ray Train
seeing the worker die first (its controller records that at once) avoids it. ``notes`` has,
per run, the steps the trace shows were done twice, for comparison.

With ``--runs`` > 1 each figure is the median over the runs (the killed node is started again
between runs). Prints a table, or with ``--json`` one line of JSON. Takes about 1.5 minutes
with the defaults on a 2-core machine: most of it starting the two clusters.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

from meshctl.model.mesh import NodeGroup
from meshctl.pools import local
from meshctl.pools.observed import NODE_LABEL

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "train"
DEADLINE_S = 180.0
STEP_DELAY_S = 0.1
HEALTH_CHECK_INTERVAL_S = "0.1"
FIGURES = ("detect_s", "resume_s", "steps_lost", "ettr")
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
MESH_NODE = {
    "gpus": 1,
    "cpus": 1,
    "memory_gib": 2,
    "accelerator": {"model": "A100", "memory_gib": 80},
}
PLAIN_NODE = {"cpus": 1, "memory_gib": 2}

Record = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Figures:
    detect_s: float | None
    resume_s: float | None
    steps_lost: int | None
    ettr: float | None


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


def kill_at_step(
    trace: Path, step: int, cluster: Callable[[], local.LocalCluster], run_dir: Path
) -> str:
    """Once the trace shows ``step`` reported, stop every process of the node the worker runs
    on; return the node's name."""

    def reached() -> bool:
        return any(r["kind"] == "report" and (r["step"] or 0) >= step for r in read_records(trace))

    _wait(f"step {step}", reached)
    node = str([r for r in read_records(trace) if r["kind"] == "start"][-1]["node"])
    local.remove_node(cluster(), node, run_dir)
    return node


def working_dir(work: Path) -> Path:
    """The jobs' working directory: the example and this module (``traced_loop``)."""
    folder = work / "loop"
    folder.mkdir()
    shutil.copy(EXAMPLE / "model.py", folder / "model.py")
    shutil.copy(Path(__file__), folder / "recovery.py")
    return folder


# --- meshctl --------------------------------------------------------------------------------


class Mesh:
    """``python -m meshctl`` in a temporary home, from a temporary working directory."""

    def __init__(self, work: Path) -> None:
        self.work, self.home = work, work / "home"

    def run(
        self, *args: str, check: bool = True, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """``env``: more environment (the rest is this one's, less Ray's own settings)."""
        base = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
        done = subprocess.run(
            [sys.executable, "-m", "meshctl", *args],
            capture_output=True,
            text=True,
            cwd=self.work,
            env={**base, "MESHCTL_HOME": str(self.home), **(env or {})},
            timeout=DEADLINE_S + 60,
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


def meshctl_once(
    mesh: Mesh, loop_dir: Path, args: argparse.Namespace, index: int
) -> tuple[Figures, str, dict[str, Any]]:
    """One train job whose node is killed at ``--kill-at``: its figures, the node, the detail."""
    trace = mesh.work / f"meshctl-trace-{index}.jsonl"
    command = [
        "train",
        "recovery:traced_loop",
        "--name",
        f"recovery-{index}",
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
    job_id = mesh.run(*command).stdout.strip().splitlines()[-1]
    victim = kill_at_step(trace, args.kill_at, mesh.cluster, mesh.home / "run")
    mesh.run("jobs", "wait", job_id, "--timeout", str(int(DEADLINE_S)))
    training = mesh.show(job_id)["training"]
    if not training["recoveries"]:
        raise SystemExit(f"meshctl job {job_id} recorded no recovery: {training}")
    first = training["recoveries"][0]
    records = read_records(trace)
    figures = Figures(
        first["detect_s"], first["resume_s"], first["steps_lost"], ettr_of(args.steps, records)
    )
    detail = {**first, "recoveries": len(training["recoveries"]), "steps_redone": redone(records)}
    return figures, victim, detail


def meshctl_side(
    args: argparse.Namespace, work: Path, loop_dir: Path
) -> tuple[list[Figures], list[dict[str, Any]]]:
    runs, details = [], []
    with mesh_up(work) as mesh:
        for i in range(args.runs):
            figures, victim, detail = meshctl_once(mesh, loop_dir, args, i)
            print(f"meshctl, run {i + 1}: {figures}, node {victim} killed; {detail}", flush=True)
            runs.append(figures)
            details.append(detail)
            if i + 1 < args.runs:  # three nodes again for the next run
                group = NodeGroup.model_validate({"name": victim, **MESH_NODE})
                local.add_node(mesh.cluster(), victim, group, mesh.home / "run")
    return runs, details


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
    cluster: local.LocalCluster, run_dir: Path, args: argparse.Namespace, index: int
) -> tuple[Figures, str, dict[str, Any]]:
    from ray.train.v2.api.config import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
    from ray.train.v2.torch.torch_trainer import TorchTrainer

    folder = run_dir / f"ray-train-{index}"
    folder.mkdir(parents=True)
    events, trace = folder / "events.jsonl", folder / "trace.jsonl"
    trainer = TorchTrainer(
        traced_loop,
        train_loop_config=_loop_config(args, trace),
        scaling_config=ScalingConfig(num_workers=1),  # 1 CPU: on a node, never the head
        run_config=RunConfig(
            name=f"recovery-{index}",
            storage_path=str(folder / "storage"),
            failure_config=FailureConfig(max_failures=3),
            checkpoint_config=CheckpointConfig(num_to_keep=3),
            callbacks=[_callback(str(events))],
        ),
    )
    killed: list[str] = []
    killer = threading.Thread(
        target=lambda: killed.append(kill_at_step(trace, args.kill_at, lambda: cluster, run_dir)),
        daemon=True,
    )
    killer.start()
    trainer.fit()
    killer.join(timeout=DEADLINE_S)
    if not killed:
        raise SystemExit("recovery benchmark: the plain Ray Train run ended before the kill")
    records = read_records(trace)
    figures, detail = ray_train_figures(args.steps, read_records(events), records)
    return figures, killed[0], {**detail, "steps_redone": redone(records)}


def ray_train_side(
    args: argparse.Namespace, work: Path, loop_dir: Path
) -> tuple[list[Figures], list[dict[str, Any]]]:
    run_dir = work / "plain"
    runs, details = [], []
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
            for i in range(args.runs):
                figures, victim, detail = ray_train_once(cluster, run_dir, args, i)
                print(f"Ray Train, run {i + 1}: {figures}, node {victim} killed; {detail}")
                runs.append(figures)
                details.append(detail)
                if i + 1 < args.runs:
                    group = NodeGroup.model_validate({"name": victim, **PLAIN_NODE})
                    local.add_node(cluster, victim, group, run_dir)
        finally:
            ray.shutdown()
    return runs, details


# --- output ---------------------------------------------------------------------------------


def _fmt(value: float | int | None, spec: str = ".2f", unit: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{unit}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=120, help="training steps")
    parser.add_argument("--every", type=int, default=10, help="checkpoint interval in steps")
    parser.add_argument("--kill-at", type=int, default=45, help="kill the node after this step")
    parser.add_argument("--runs", type=int, default=1, help="runs per side (medians)")
    parser.add_argument("--json", action="store_true", help="one line of JSON")
    args = parser.parse_args()
    if not 0 < args.kill_at < args.steps - 1:
        parser.error(f"--kill-at: expected a step from 1 to {args.steps - 2}")
    if not 0 < args.every < args.steps:
        parser.error(f"--every: expected 1 to {args.steps - 1} steps")
    if args.runs < 1:
        parser.error("--runs: expected 1 or more")
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="meshctl-recovery-") as tmp:
        work = Path(tmp)
        loop_dir = working_dir(work)
        # Progress and Ray's chatter go to stderr; stdout is the result.
        with contextlib.redirect_stdout(sys.stderr):
            meshctl_runs, meshctl_details = meshctl_side(args, work, loop_dir)
            meshctl_s = time.perf_counter() - started
            ray_runs, ray_details = ray_train_side(args, work, loop_dir)
    elapsed_s = time.perf_counter() - started
    result: dict[str, Any] = {
        "meshctl": median_figures(meshctl_runs),
        "ray_train": median_figures(ray_runs),
        "checkpoint_interval_steps": args.every,
        "runs": args.runs,
        "notes": {
            "steps": args.steps,
            "kill_at_step": args.kill_at,
            "step_delay_s": STEP_DELAY_S,
            "samples": {
                "meshctl": [
                    {**asdict(f), **d} for f, d in zip(meshctl_runs, meshctl_details, strict=True)
                ],
                "ray_train": [
                    {**asdict(f), **d} for f, d in zip(ray_runs, ray_details, strict=True)
                ],
            },
            "meshctl_side_s": round(meshctl_s, 1),
            "ray_train_side_s": round(elapsed_s - meshctl_s, 1),
        },
    }
    if args.json:
        print(json.dumps(result))
        return
    print(
        f"a node killed at step {args.kill_at} of {args.steps}, a checkpoint every {args.every} "
        f"steps ({args.runs} run{'s' if args.runs > 1 else ''} each, medians)"
    )
    print(f"{'':10} {'detect':>8} {'resume':>8} {'steps lost':>11} {'ETTR':>6}")
    for label, key in (("meshctl", "meshctl"), ("Ray Train", "ray_train")):
        row = result[key]
        print(
            f"{label:10} {_fmt(row['detect_s'], unit=' s'):>8} "
            f"{_fmt(row['resume_s'], unit=' s'):>8} "
            f"{_fmt(row['steps_lost'], 'g'):>11} {_fmt(row['ettr']):>6}"
        )
    print(f"({elapsed_s:.0f} s in all)")


if __name__ == "__main__":
    main()
