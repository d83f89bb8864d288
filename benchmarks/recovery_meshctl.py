"""The recovery benchmark's meshctl side (``recovery.py`` has the command): a temporary
embedded mesh, a ``meshctl train recovery_loop:traced_loop`` job per run whose node is lost at a
step, and the run's figures from meshctl's own account (``meshctl jobs show``).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import node_loss
import yaml
from recovery_common import (
    DEADLINE_S,
    NONE,
    Figures,
    Record,
    Run,
    _loop_config,
    _progress,
    ettr_of,
    lose_at_step,
    read_records,
    redone,
    restart_node,
)

from meshctl.model.mesh import LocalPool
from meshctl.pools import local
from meshctl.state import JobRecord, JobState, open_store
from meshctl.state.records import FINISHED  # imported here, not at the loss

EXIT_TIMEOUT = 124  # meshctl jobs wait: the timeout came first
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
        shown: bool = False,
    ) -> subprocess.CompletedProcess[str]:
        """``env``: more environment (the rest is this one's, less Ray's own settings);
        ``shown``: what it prints goes to this one's stderr as it comes (a slow ``up``)."""
        base = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
        done = subprocess.run(
            [sys.executable, "-m", "meshctl", *args],
            stdout=2 if shown else subprocess.PIPE,  # shown: both to this one's fd 2
            stderr=None if shown else subprocess.PIPE,
            text=True,
            cwd=self.work,
            env={**base, "MESHCTL_HOME": str(self.home), **(env or {})},
            timeout=timeout_s,
        )
        if check and done.returncode != 0:
            said = "" if shown else f":\n{done.stdout}{done.stderr}"
            raise SystemExit(f"meshctl {' '.join(args)} exited {done.returncode}{said}")
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
        "recovery_loop:traced_loop",
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
        waited = wait_for(mesh.home, job_id, lost.at_s + args.deadline)
        shown = mesh.show(job_id)
        if waited == EXIT_TIMEOUT:
            mesh.run("jobs", "cancel", job_id, check=False)
        return meshctl_run(shown, waited, lost, args, read_records(trace))
    finally:
        lost.end(mesh.cluster(), run_dir)


def wait_for(home: Path, job_id: str, deadline_s: float) -> int:
    """``meshctl jobs wait``'s exit status (0 succeeded, 1 failed or cancelled, 124 the
    deadline, a ``time.time()``, came first), found by reading the store in this process
    every 0.5 s, as plain Ray Train's side waits for its run in its own: a ``meshctl jobs
    wait`` process started at the loss would spend its start-up (about 0.4 CPU-s) on the
    2-core machine while the run restarts."""
    with open_store(home) as store:
        while (record := store.get(JobRecord, job_id)) is None or record.state not in FINISHED:
            if time.time() > deadline_s:
                return EXIT_TIMEOUT
            time.sleep(0.5)
    return 0 if record.state is JobState.SUCCEEDED else 1


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


def meshctl_side(args: argparse.Namespace, work: Path, loop_dir: Path) -> Iterator[Run | None]:
    """Each loss, ``--runs`` times, on one mesh, a run at each ``next``; the lost node started
    again before the next. Yields None first, once the mesh is up."""
    plan = [(loss, i) for loss in args.losses for i in range(args.runs)]
    with mesh_up(work) as mesh:
        pool = mesh_pool(work)
        yield None
        last: Run | None = None
        for loss, i in plan:
            if last is not None:
                home = mesh.home / "run"
                restart_node(mesh.cluster(), last.node, pool.nodes[0], home, pool.agents)
            last = meshctl_once(mesh, loop_dir, args, loss, i)
            _progress(last, i)
            yield last
