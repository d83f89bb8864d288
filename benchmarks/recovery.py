"""Recovery from a node lost mid-training, killed or silent, with meshctl and with plain Ray
Train.

How fast the run notices, how fast it trains again, how many steps it redoes and what the
failure costs it overall:

    python benchmarks/recovery.py [--loss kill|stop|both] [--steps 120] [--every 10]
                                  [--kill-at 45] [--runs 1] [--deadline 300]
                                  [--side meshctl|ray_train|both] [--json]

Both sides train the example loop (examples/train/model.py: one worker, CPU, seeded) for
``--steps`` steps with ``step_delay_s`` 0.1 and a checkpoint every ``--every`` steps, with
Ray Train collecting reports every 0.1 s (``RAY_TRAIN_HEALTH_CHECK_INTERVAL_S``, what meshctl
sets for its train jobs), ``FailureConfig(max_failures=3)`` and ``CheckpointConfig(num_to_keep=3)``.
The loop runs inside ``traced_loop`` (``recovery_loop.py``), the same on both sides: rank 0
appends to a trace file its node and the checkpoint it starts from at each (re)start, and the
time and step of each ``ray.train.report`` once it returns. As soon as the trace shows step
``--kill-at``, the node the worker runs on is lost (``node_loss.py``), the same way and at the
same step on both sides, whatever their checkpoints' timing:

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

``--loss both`` (the default) runs ``kill``, then ``stop``, ``--runs`` times each, on each side;
``--side`` runs one side alone (the suite tests each side on its own), its figures only, the
other side's and the ratios null.
Both sides' clusters are up for the whole benchmark and the runs take turns (meshctl's, plain
Ray Train's, and again: ``interleaved``), so that whatever else loads this shared machine over
the minutes a benchmark takes weighs on both alike; each side idles while the other runs.
After each run the lost node's processes that are left (the stopped ones by SIGKILL: one let
go on would report steps its run no longer takes) are ended, also on any error, and the node
is started again under its name (with its agent on the meshctl side) once Ray has let the old
one go.

- ``meshctl``: a temporary embedded mesh (a local Ray cluster: a head and three emulated 1-GPU
  nodes with their agents, the controller cycling every 0.5 s) runs ``meshctl train
  recovery_loop:traced_loop``. The job's driver (and with it Ray Train's controller) runs on the
  pool's head. A killed node, or a silent one once its agent's silence makes it dead to
  meshctl: the controller nominates a free node and Ray Train resumes there from the latest
  checkpoint inside the attempt (``meshctl.lifecycle.replacing``; for the silent node the run
  ends its unanswering worker itself, ``meshctl.workload.train.run.Replacements``). ``detect_s``,
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
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import node_loss
from recovery_common import SIDES, STEP_DELAY_S, Figures, Run, working_dir
from recovery_meshctl import meshctl_side
from recovery_ray_train import ray_train_side

RUN_DEADLINE_S = 300.0  # from the loss to the run's end, unless --deadline says otherwise
FIGURES = ("detect_s", "resume_s", "steps_lost", "ettr")


# --- what is computed (pure) ----------------------------------------------------------------


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


def interleaved(sides: Mapping[str, Iterator[Run | None]]) -> tuple[list[Run], dict[str, float]]:
    """Both sides up first, then one run of each in turn (meshctl's, plain Ray Train's, and
    again), so that what else loads this shared machine over the minutes a benchmark takes
    weighs on both alike; each side's seconds (its start and its runs). Each side's
    generator yields None once up, then a run at each ``next``; both are closed at the end
    (their clusters stopped), also on an error."""
    spent = dict.fromkeys(sides, 0.0)
    runs: list[Run] = []
    with contextlib.ExitStack() as stack:
        for side in sides.values():
            stack.callback(side.close)

        def step(name: str) -> Run | None:
            started = time.perf_counter()
            try:
                return next(sides[name], None)
            finally:
                spent[name] += time.perf_counter() - started

        for name in sides:
            step(name)  # up
        while True:
            done = [r for name in sides if (r := step(name)) is not None]
            if not done:
                return runs, spent
            runs += done


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
    parser.add_argument(
        "--side", choices=(*SIDES, "both"), default="both",
        help="run meshctl's side, plain Ray Train's, or both (the ratios need both)",
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
    args.sides = list(SIDES) if args.side == "both" else [args.side]
    return args


def main() -> None:
    args = parse()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="meshctl-recovery-") as tmp:
        work = Path(tmp)
        loop_dir = working_dir(work)
        # Progress and Ray's chatter go to stderr; stdout is the result.
        with contextlib.redirect_stdout(sys.stderr):
            sides = {"meshctl": meshctl_side, "ray_train": ray_train_side}
            runs, side_s = interleaved(
                {name: sides[name](args, work, loop_dir) for name in args.sides}
            )
    elapsed_s = time.perf_counter() - started
    result = result_of(args, runs, side_s)
    if args.json:
        print(json.dumps(result))
        return
    print("\n".join(table(args, result, elapsed_s)))


if __name__ == "__main__":
    main()
