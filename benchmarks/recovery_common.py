"""The recovery benchmark's shared pieces (``recovery.py`` has the command): the runs and
their figures, what is computed from what a run recorded, the loop both sides train
(``recovery_loop.traced_loop``), its trace and its working directory, and losing a node at a
step and starting it again.

The working directory holds this module and its siblings, so that the jobs' workers import
them by the same names as the benchmark: both sides' workers ``recovery_loop`` alone
(meshctl's through ``recovery_loop:traced_loop``, plain Ray Train's to unpickle the loop), plain
Ray Train's controller this module and ``recovery_ray_train`` for the callback.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

import node_loss

from meshctl.model.mesh import NodeAgents, NodeGroup
from meshctl.pools import local

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
EXAMPLE = ROOT / "examples" / "train"
DEADLINE_S = 180.0  # for each wait before the loss (a cluster, a step), and Ray letting go
STEP_DELAY_S = 0.1
SIDES = {"meshctl": "meshctl", "ray_train": "Ray Train"}
# What the jobs' working directory holds beside the example (``working_dir``): the benchmark's
# modules, for its workers to import by the same names.
MODULES = (
    "recovery",
    "recovery_common",
    "recovery_loop",
    "recovery_meshctl",
    "recovery_ray_train",
    "node_loss",
)

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


# --- both sides -----------------------------------------------------------------------------


def read_records(path: Path) -> list[dict[str, Any]]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in lines if line.endswith("}")]


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
    """The jobs' working directory: the example and the benchmark's modules (``recovery_loop``
    for the workers, and the others plain Ray Train's controller unpickles its callback with)."""
    folder = work / "loop"
    folder.mkdir()
    shutil.copy(EXAMPLE / "model.py", folder / "model.py")
    for name in MODULES:
        shutil.copy(HERE / f"{name}.py", folder / f"{name}.py")
    return folder


def _progress(run: Run, index: int) -> None:
    said = run.note or run.figures
    print(f"{SIDES[run.side]}, {run.loss} run {index + 1}: node {run.node}: {said}; {run.detail}")
