"""``meshctl submit``: queue a job from a file, or from a command like ``ray job submit``.

    meshctl submit jobs/train.yaml [--dry-run] [--explain]
    meshctl submit --gpus 1 --kind batch --team search --working-dir . -- python embed.py

A job that can never run on this mesh is rejected at once, with the reason (exit 2). So is a
job file whose datasets are not at their sources, whose sources do not answer within a few
seconds, or that are larger than every node cache of the mesh (``meshctl.data.check``).

The command sends the job as a request (``submitclient``): to the API server, or the home's
local API while a controller runs; else it admits it in this process, through the same
application-layer call (``queueing.request``). The flags are ``meshctl.app.submitflags``'s
(a unit test holds the two equal). ``meshctl submit`` usually runs without this module: the
entry point's submit client reads the same flags before the CLI is imported.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from meshctl.cli.context import app_context
from meshctl.cli.options import OutputOption
from meshctl.cli.queueing import request
from meshctl.cli.render import Output
from meshctl.cli.submitclient import outgoing


def submit(
    ctx: typer.Context,
    args: Annotated[
        list[str] | None,
        typer.Argument(help="JOB.yaml, or -- and the command to run.", show_default=False),
    ] = None,
    gpus: Annotated[
        float | None, typer.Option(help="GPUs per node (a fraction for one node).")
    ] = None,
    cpus: Annotated[float, typer.Option(help="CPUs per node.")] = 0.25,
    memory: Annotated[str, typer.Option(help="Memory per node, e.g. 512MiB.")] = "512MiB",
    nodes: Annotated[int, typer.Option(help="Nodes, for a gang job.", min=1)] = 1,
    kind: Annotated[str, typer.Option(help="train, inference, batch or interactive.")] = "batch",
    priority: Annotated[str | None, typer.Option(help="Priority class (the policy's).")] = None,
    criticality: Annotated[
        str, typer.Option(help="critical, standard or best-effort.")
    ] = "standard",
    team: Annotated[str, typer.Option(help="The team the job is charged to.")] = "default",
    name: Annotated[str | None, typer.Option(help="Job name (default: from the command).")] = None,
    working_dir: Annotated[
        Path | None, typer.Option("--working-dir", help="Directory uploaded with the job.")
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Check and plan; queue nothing.")
    ] = False,
    explain: Annotated[bool, typer.Option("--explain", help="Show the plan's reasons.")] = False,
    no_data_check: Annotated[
        bool,
        typer.Option(
            "--no-data-check",
            help="Do not list the job file's datasets at their sources (S3, GCS, a folder): "
            "that files are there, that the source answers within 5 s, their size. A size_gib "
            "is still checked against the mesh's largest node cache.",
        ),
    ] = False,
    output: OutputOption = Output.table,
) -> None:
    """Queue a job from a file or a command; print its id.

    A job file (JOB.yaml), or a command after --, like ray job submit: the
    job is then named after the script it runs (or --name). The working
    directory is copied at submit, so what was submitted is what runs, also
    after a requeue.

    Rejected at once, nothing queued (exit 2): a job that can never run on the
    mesh, or names an accelerator model nobody has, with the dimension and by
    how much ("needs 9 GPUs per node; the largest node has 8"); one the
    policies refuse (an undefined priority class, a team the policies do not
    declare when they declare any, both with the closest name; more than its
    team's quota could ever give); a job file whose datasets are not at their
    sources (each s3://, gs:// or folder location listed, 5 s for them all) or
    are larger than every node cache of the mesh. A source this machine
    cannot reach is a warning: the nodes may reach it. --no-data-check lists
    nothing; a size_gib is still checked.

    Examples:
      meshctl submit jobs/batch-embed.yaml
      meshctl submit jobs/gang-llm.yaml --dry-run --explain
      meshctl submit --gpus 1 --team vision -- python train.py --epochs 3
    """
    context = app_context(ctx)
    values: dict[str, object] = {
        "gpus": gpus, "cpus": cpus, "memory": memory, "nodes": nodes, "kind": kind,
        "priority": priority, "criticality": criticality, "team": team, "name": name,
        "working-dir": None if working_dir is None else str(working_dir),
        "dry-run": dry_run, "explain": explain, "no-data-check": no_data_check,
    }  # fmt: skip
    body, folder = outgoing(args or [], values)
    request(context, body, folder, output)
