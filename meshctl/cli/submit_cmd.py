"""``meshctl submit``: queue a job from a file, or from a command like ``ray job submit``.

    meshctl submit jobs/train.yaml [--dry-run] [--explain]
    meshctl submit --gpus 1 --kind batch --team search --working-dir . -- python embed.py

A job that can never run on this mesh is rejected at once, with the reason (exit 2). So is a
job file whose datasets are not at their sources, whose sources do not answer within a few
seconds, or that are larger than every node cache of the mesh (``meshctl.data.check``).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Annotated, Any

import typer

from meshctl.app.admission import flag_error, from_file, name_from
from meshctl.app.context import AppContext
from meshctl.cli.context import app_context
from meshctl.cli.options import OutputOption
from meshctl.cli.queueing import queue
from meshctl.cli.render import Output
from meshctl.errors import InvalidRequestError
from meshctl.problems import InvalidFileError

if TYPE_CHECKING:
    from meshctl.app.remote import Remote
    from meshctl.model import Catalog, Job, Mesh


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
    command_flags = {
        "--gpus": gpus is not None,
        "--nodes": nodes != 1,
        "--kind": kind != "batch",
        "--priority": priority is not None,
        "--team": team != "default",
        "--name": name is not None,
        "--working-dir": working_dir is not None,
        "--cpus": cpus != 0.25,
        "--memory": memory != "512MiB",
        "--criticality": criticality != "standard",
    }
    args = args or []
    remote = context.remote()
    if len(args) == 1 and args[0].endswith((".yaml", ".yml")) and not Path(args[0]).is_file():
        raise InvalidRequestError(f"{args[0]}: no such job file")
    if len(args) == 1 and args[0].endswith((".yaml", ".yml")) and Path(args[0]).is_file():
        given = [flag for flag, set_ in command_flags.items() if set_]
        if given:
            raise InvalidRequestError(
                f"{', '.join(given)}: describe a job given as a command; edit {args[0]} instead"
            )
        work: Path | None
        if remote is not None:  # the server checks it against its mesh
            from meshctl.app.admission import from_file

            job, job_dir, _ = from_file(Path(args[0]))
            work, held = (job_dir / job.spec.working_dir).resolve(), None
        else:
            job, work, held = _checked_file(context, Path(args[0]), listing=not no_data_check)
    elif args:
        asked = team if command_flags["--team"] else None  # else: the default, or the user's
        job = _from_command(
            args, gpus or 0, cpus, memory, nodes, kind, priority, criticality, asked, name
        )
        work = working_dir.resolve() if working_dir else None
        held = None
    else:
        raise InvalidRequestError("expected JOB.yaml, or -- and a command (see --help)")
    if remote is not None:
        _submit_remote(remote, job, work, dry_run, explain, output)
        return
    queue(context, job, work, dry_run, explain, output, held)


def _submit_remote(
    remote: Remote, job: Job, work: Path | None, dry_run: bool, explain: bool, output: Output
) -> str | None:
    """Send the job (as written: defaults the user did not set stay unset, the team among
    them) and its working directory to the API server; print what it says and return the
    job's id (None: a dry run). Shared by ``submit`` and ``train``."""
    from meshctl.app.remote import pack
    from meshctl.cli import render
    from meshctl.controller.submit import IGNORED

    body: dict[str, Any] = {
        "job": job.model_dump(mode="json", exclude_unset=True, exclude_none=True),
        "dry_run": dry_run,
        "explain": explain,
    }
    if work is not None:
        if not work.is_dir():
            raise InvalidRequestError(f"working_dir: {work} is not a directory")
        body["job"].setdefault("spec", {}).pop("working_dir", None)
        body["working_dir"] = pack(work, IGNORED)
    said = remote.call("POST", "/v1/jobs", body)
    if output is not Output.table:
        render.emit_data(said, output)
    elif said.get("decision"):
        render.say(
            f"[bold]{render.esc(said['name'])}[/]: {render.esc(said['decision']['summary'])}"
        )
        for note in said["decision"].get("notes", []):
            render.say(f"  {render.esc(note)}")
    if output is Output.table and said.get("id"):
        render.plain(said["id"])
    found = said.get("id")
    return None if found is None else str(found)


def _checked_file(
    context: AppContext, path: Path, listing: bool = True
) -> tuple[Job, Path | None, tuple[Mesh, dict[str, Catalog]]]:
    """A job file read once, its accelerator models and its datasets checked (file:line),
    with the mesh and catalogs it was checked against, kept for planning. ``listing``: the
    datasets are listed at their sources."""
    from meshctl.catalog.check import export_problems, job_accelerators
    from meshctl.cli import render
    from meshctl.data.check import check_job

    job, job_dir, loaded = from_file(path)
    # the catalogs before the mesh: with both broken, the catalog's problem is the one shown
    mesh, catalogs = context.mesh_and_catalogs(context.catalog_map())
    problems = job_accelerators(loaded, catalogs, mesh, context.accelerators())
    problems += export_problems(loaded, (job_dir / job.spec.working_dir).resolve())
    if problems:
        raise InvalidFileError(problems)
    problems, warnings = check_job(loaded, mesh, listing)
    if problems:
        raise InvalidFileError(problems)
    render.warnings(str(w) for w in warnings)
    return job, (job_dir / job.spec.working_dir).resolve(), (mesh, catalogs)


def _from_command(
    command: list[str],
    gpus: float,
    cpus: float,
    memory: str,
    nodes: int,
    kind: str,
    priority: str | None,
    criticality: str,
    team: str | None,
    name: str | None,
) -> Job:
    from pydantic import ValidationError

    from meshctl.model import Job

    raw: dict[str, Any] = {
        "apiVersion": "meshctl/v1",
        "kind": "Job",
        "metadata": {"name": name or _name_of(command)},
        "spec": {
            "kind": kind,
            "entrypoint": shlex.join(command),
            "criticality": criticality,
            "resources": {"gpus": gpus, "cpus": cpus, "memory_gib": memory, "nodes": nodes},
        },
    }
    if team is not None:
        raw["spec"]["team"] = team
    if priority:
        raw["spec"]["priority_class"] = priority
    try:
        return Job.model_validate(raw)
    except ValidationError as err:
        raise flag_error(err, Job, _FLAGS) from None


_FLAGS = {
    "metadata.name": "--name",
    "spec.kind": "--kind",
    "spec.team": "--team",
    "spec.criticality": "--criticality",
    "spec.priority_class": "--priority",
    "spec.resources.gpus": "--gpus",
    "spec.resources.cpus": "--cpus",
    "spec.resources.memory_gib": "--memory",
    "spec.resources.nodes": "--nodes",
    "spec.resources": "--gpus/--nodes",
    "spec.entrypoint": "COMMAND",
}


# A word that names a script or a module (train.py, pkg.mod), not a program given inline
# (python -c "import ray; ..."), whose text makes no name.
_SCRIPT = re.compile(r"[\w./-]+\.\w+")


def _name_of(command: list[str]) -> str:
    """A job name from its command: the script or module it runs, else the program."""
    words = [w for w in command if not w.startswith("-")]
    script = next((w for w in words[1:] if _SCRIPT.fullmatch(w)), words[0] if words else "")
    return name_from(PurePath(script).stem if script else "")
