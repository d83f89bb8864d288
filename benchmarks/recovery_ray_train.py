"""The recovery benchmark's plain Ray Train side (``recovery.py`` has the command): a Ray
cluster with no meshctl, a ``TorchTrainer`` fitted per run whose worker's node is lost at a
step, a ``UserCallback`` recording the reports and failures Ray Train sees, and the run's
figures from them.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import node_loss
from recovery_common import (
    DEADLINE_S,
    NONE,
    Record,
    Run,
    _loop_config,
    _progress,
    lose_at_step,
    ray_train_figures,
    read_records,
    redone,
    restart_node,
)
from recovery_loop import append, traced_loop

from meshctl.model.mesh import NodeGroup
from meshctl.pools import local

ABORT_GRACE_S = 30.0  # Ray Train's abort (Ctrl-C) that has not ended the run by then: again
HEALTH_CHECK_INTERVAL_S = "0.1"
PLAIN_NODE = {"cpus": 1, "memory_gib": 2}


def _callback(path: str) -> Any:
    """A ``UserCallback`` (it runs in Ray Train's controller) appending every report and
    failure to ``path``."""
    from ray.train.v2.api.callback import UserCallback

    class Recorder(UserCallback):
        def after_report(
            self, run_context: Any, metrics: list[dict[str, Any]], checkpoint: Any
        ) -> None:
            step = (metrics[0] if metrics else {}).get("step")
            append(
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
            append(path, {"kind": "failure", "at_s": time.time(), "error": error})

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


def ray_train_side(args: argparse.Namespace, work: Path, loop_dir: Path) -> Iterator[Run | None]:
    """Each loss, ``--runs`` times, on one plain cluster, a run at each ``next``; the lost node
    started again before the next. Yields None first, once the cluster is up and this
    process connected to it."""
    run_dir = work / "plain"
    plan = [(loss, i) for loss in args.losses for i in range(args.runs)]
    with plain_cluster(run_dir) as cluster:
        # Ray reads its auth mode once, when it is first imported: not before this. (meshctl's
        # side drops RAY_* from what it runs, and its nodes are started with their own.)
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
            yield None
            last: Run | None = None
            for loss, i in plan:
                if last is not None:
                    group = NodeGroup.model_validate({"name": last.node, **PLAIN_NODE})
                    restart_node(cluster, last.node, group, run_dir)
                last = ray_train_once(cluster, run_dir, args, loss, i)
                _progress(last, i)
                yield last
        finally:
            ray.shutdown()
