"""``meshctl train``: submit a Ray Train job and follow it until it finishes.

    meshctl train examples/train/train.yaml
    meshctl train --workers 2 --gpus-per-worker 1 --config steps=300 model:train_loop

The loop (``module:function`` in the working directory) is written the normal Ray Train V2
way; meshctl builds the ``TorchTrainer`` around it (``meshctl.workload.train.run``). The job id is
printed first; then the job's events (placement, checkpoint requests, evictions, resumes)
until it ends. Exit 0 when it succeeded, 1 otherwise.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from meshctl.app.admission import flag_error, from_file, name_from
from meshctl.cli.context import app_context
from meshctl.cli.options import OutputOption, duration_flag
from meshctl.cli.queueing import request
from meshctl.cli.render import Output
from meshctl.errors import EXIT_TIMEOUT, CommandError, InvalidRequestError

if TYPE_CHECKING:
    from meshctl.model import Job


def train(
    ctx: typer.Context,
    target: Annotated[
        str, typer.Argument(help="JOB.yaml, or the loop as MODULE:FUNCTION.", show_default=False)
    ],
    workers: Annotated[int, typer.Option(help="Ray Train workers.", min=1)] = 1,
    workers_per_node: Annotated[int, typer.Option(help="Workers on each node.", min=1)] = 1,
    gpus_per_worker: Annotated[float, typer.Option(help="GPUs per worker.", min=0)] = 1,
    cpus_per_worker: Annotated[float, typer.Option(help="CPUs per worker.", min=0.01)] = 0.25,
    memory_per_worker: Annotated[str, typer.Option(help="Memory per worker.")] = "512MiB",
    config: Annotated[
        list[str] | None, typer.Option(help="KEY=VALUE for the loop's config (JSON values).")
    ] = None,
    max_failures: Annotated[int, typer.Option(help="Failures recovered inside a run.")] = 3,
    hang_timeout: Annotated[
        str | None, typer.Option(help="Restart from the checkpoint after this long quiet.")
    ] = None,
    export: Annotated[
        str | None,
        typer.Option(help="onnx: export the model the loop returns, checked with onnxruntime."),
    ] = None,
    checkpoint_interval: Annotated[
        str, typer.Option(help="A duration, or auto (Young/Daly).")
    ] = "auto",
    criticality: Annotated[str, typer.Option(help="critical, standard or best-effort.")] = (
        "standard"
    ),
    team: Annotated[str, typer.Option(help="The team the job is charged to.")] = "default",
    name: Annotated[str | None, typer.Option(help="Job name (default: the module).")] = None,
    working_dir: Annotated[
        Path, typer.Option("--working-dir", help="Directory uploaded with the job.")
    ] = Path("."),
    follow: Annotated[bool, typer.Option(help="Follow the job until it ends.")] = True,
    timeout: Annotated[
        str, typer.Option(help="Stop following after this long (seconds, or 90s, 10m, 2h).")
    ] = "1d",
    output: OutputOption = Output.table,
) -> None:
    """Submit a Ray Train job and follow it until it ends.

    A job file, or a loop (MODULE:FUNCTION) and its scaling: meshctl builds
    the TorchTrainer around the loop. Prints the job id first, then the job's
    events. The loop is imported first, in a subprocess with the cluster's
    interpreter in the working directory: a module that does not import or a
    function that is not there is one error line, exit 2, nothing queued.

    --export onnx (or train.export: onnx in the job file): the model the loop
    returns leaves as model.onnx beside the checkpoints, checked with
    onnxruntime against PyTorch (rtol 1e-4, atol 1e-5); jobs show lists it
    (docs/ACCELERATORS.md).

    Exit codes:
      0  the job succeeded (or was submitted, with --no-follow)
      1  the job failed or was cancelled
      2  invalid input: nothing queued
      124  --timeout came before the job ended

    Examples:
      meshctl train examples/train/train.yaml
      meshctl train --workers 4 --gpus-per-worker 1 model:train_loop
      meshctl train --workers 2 --config steps=300 --no-follow model:train_loop
    """
    from meshctl.catalog.check import export_problems
    from meshctl.problems import InvalidFileError
    from meshctl.workload.train.loops import returns_value

    context = app_context(ctx)
    timeout_s = duration_flag("--timeout", timeout)
    remote = context.remote()
    if target.endswith((".yaml", ".yml")):
        if not Path(target).is_file():
            raise InvalidRequestError(f"{target}: no such job file")
        job, job_dir, loaded = from_file(Path(target))
        if job.spec.train is None:
            raise InvalidRequestError(f"{target}: spec.train: expected a train section")
        work = (job_dir / job.spec.working_dir).resolve()
        problems = export_problems(loaded, work)
        if problems:
            raise InvalidFileError(problems)
    else:
        if workers % workers_per_node:
            raise InvalidRequestError(
                f"--workers: expected a multiple of --workers-per-node {workers_per_node}, "
                f"got {workers}"
            )
        # on a shared mesh a team not named is the user's (the server picks it)
        asked = None if remote is not None and team == "default" else team
        job = _job(target, workers, workers_per_node, gpus_per_worker, cpus_per_worker,
                   memory_per_worker, _config(config or []), max_failures, hang_timeout,
                   export, checkpoint_interval, criticality, asked, name)  # fmt: skip
        work = working_dir.resolve()
        if export and returns_value(work, target) is False:
            raise InvalidRequestError(
                f"--export: expected a loop that returns its model ({{'model': module,"
                f" 'example': inputs}}), got {target}, which never returns a value"
            )
    quiet = output is not Output.table  # with -o json|yaml the exit code says how it ended
    # the job as written: defaults the user did not set stay unset, the team among them
    body = {"job": job.model_dump(mode="json", exclude_unset=True, exclude_none=True)}
    job_id = request(context, body, work, output)
    if follow and job_id is not None and remote is not None:
        _follow_remote(remote, job_id, timeout_s, quiet)
    elif follow and job_id is not None:
        _follow(context, job_id, timeout_s, quiet)


def _config(pairs: list[str]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise InvalidRequestError(f"--config: expected KEY=VALUE, got {pair!r}")
        try:
            found[key] = json.loads(raw)
        except ValueError:
            found[key] = raw  # a plain string
    return found


def _job(
    loop: str,
    workers: int,
    per_node: int,
    gpus: float,
    cpus: float,
    memory: str,
    config: dict[str, Any],
    max_failures: int,
    hang_timeout: str | None,
    export: str | None,
    interval: str,
    criticality: str,
    team: str | None,
    name: str | None,
) -> Job:
    from pydantic import ValidationError

    from meshctl.model import Job
    from meshctl.units import parse_memory_gib

    try:
        memory_gib = parse_memory_gib(memory)
    except ValueError as err:
        raise InvalidRequestError(f"--memory-per-worker: {err}") from None
    train: dict[str, Any] = {"loop": loop, "workers_per_node": per_node,
                             "max_failures": max_failures, "config": config}  # fmt: skip
    if hang_timeout:
        train["hang_timeout"] = hang_timeout
    if export:
        train["export"] = export
    raw = {
        "apiVersion": "meshctl/v1",
        "kind": "Job",
        "metadata": {"name": name or _name_of(loop)},
        "spec": {
            "kind": "train",
            **({} if team is None else {"team": team}),
            "criticality": criticality,
            "resources": {
                "gpus": gpus * per_node,
                "cpus": cpus * per_node,
                "memory_gib": memory_gib * per_node,
                "nodes": workers // per_node,
            },
            "train": train,
            "checkpoint": {"interval": interval},
        },
    }
    try:
        return Job.model_validate(raw)
    except ValidationError as err:
        raise flag_error(err, Job, _FLAGS) from None


_FLAGS = {
    "metadata.name": "--name",
    "spec.team": "--team",
    "spec.criticality": "--criticality",
    "spec.train.loop": "MODULE:FUNCTION",
    "spec.train.hang_timeout": "--hang-timeout",
    "spec.train.export": "--export",
    "spec.train.max_failures": "--max-failures",
    "spec.checkpoint.interval": "--checkpoint-interval",
    "spec.resources.gpus": "--gpus-per-worker",
    "spec.resources": "--gpus-per-worker",
}


def _name_of(loop: str) -> str:
    return name_from(loop.partition(":")[0].rsplit(".", 1)[-1], default="train")


def _follow(context: Any, job_id: str, timeout: float, quiet: bool = False) -> None:
    """Print the job's events as they happen until it ends; exit 1 unless it succeeded."""
    from meshctl.cli import render
    from meshctl.state import JobRecord
    from meshctl.state.records import FINISHED

    deadline, after = time.monotonic() + timeout, 0
    with context.store() as store:
        while True:
            for event in store.events(job_id=job_id, after_seq=after):
                if not quiet:
                    render.plain(f"{render.clock(event.at_s)} {event.kind}: {event.message}")
                after = event.seq
            record = store.get(JobRecord, job_id)
            if record is None or record.state in FINISHED:
                break
            _in_time(job_id, record.state.value, deadline, timeout)
            time.sleep(0.5)
    _ended(job_id, None if record is None else record.state.value)


def _follow_remote(remote: Any, job_id: str, timeout: float, quiet: bool) -> None:
    """``_follow`` through the API server: the job shown again every second, its new events
    printed (they come in order, and only ever grow)."""
    from meshctl.cli import render
    from meshctl.state.records import FINISHED

    deadline, seen = time.monotonic() + timeout, 0
    while True:
        shown = remote.call("GET", f"/v1/jobs/{job_id}")
        events = shown.get("events", [])
        for event in events[seen:]:
            if not quiet:
                at = render.clock_of(event["occurred_at"])
                render.plain(f"{at} {event['kind']}: {event['message']}")
        seen = max(seen, len(events))
        if shown["state"] in {s.value for s in FINISHED}:
            break
        _in_time(job_id, shown["state"], deadline, timeout)
        time.sleep(1.0)
    _ended(job_id, shown["state"])


def _in_time(job_id: str, state: str, deadline: float, timeout: float) -> None:
    if time.monotonic() > deadline:
        raise CommandError(
            f"{job_id} still {state} after {timeout:g} s (meshctl jobs wait {job_id})",
            exit_code=EXIT_TIMEOUT,
        )


def _ended(job_id: str, state: str | None) -> None:
    """Exit 1 unless the job succeeded (None: it is gone)."""
    from meshctl.state import JobState

    if state != JobState.SUCCEEDED.value:
        raise CommandError(f"{job_id} {state or 'gone'} (meshctl jobs show {job_id})")
