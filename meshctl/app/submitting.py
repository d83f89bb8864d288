"""Submitting a job, whichever way the submission comes: ``meshctl submit`` and ``train`` in
their own process (no controller runs), the home's local API socket (``meshctl.server.local``)
and the API server (``POST /v1/jobs``) all call ``submit_job``, so each answers the same.

A request (``SubmitRequest``) is the job as its user wrote it, not yet checked: a job file's
path and text (a problem names the file, the line and the field), a command and the flags that
describe it (a problem names the flag), or a job document (``meshctl train``, API clients; a
problem names ``job.<field>``); the folder that goes with it, on this host; and how to submit
it. Whatever is wrong raises ``InvalidInput`` (exit 2, a 422) and nothing is written.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any

from meshctl.app.admission import admit, flag_error, name_from, submitted
from meshctl.app.submitflags import BY_KEY, FIELD_FLAGS
from meshctl.errors import InvalidRequestError

if TYPE_CHECKING:
    import datetime as dt

    from meshctl.app.context import AppContext
    from meshctl.files import Loaded
    from meshctl.model import Catalog, Job, Mesh
    from meshctl.policy import PolicySet
    from meshctl.policy.evaluate import BoundPolicies
    from meshctl.state import Store

Planning = tuple["Mesh", dict[str, "Catalog"], "PolicySet"]


@dataclass(frozen=True, slots=True)
class JobFile:
    """A job file as its user named it (``path``: what its problems name) and its text."""

    path: str
    text: str


@dataclass(frozen=True, slots=True)
class SubmitRequest:
    """One of ``job`` (a document), ``file`` or ``command`` (with ``flags``: the job flags
    given, by key, ``submitflags.given``); ``working_dir``: the folder sent with the job, on
    this host (unpacked already); ``data_check``: list a job file's datasets at their
    sources."""

    job: Mapping[str, Any] | None = None
    file: JobFile | None = None
    command: tuple[str, ...] = ()
    flags: Mapping[str, Any] = field(default_factory=dict)
    working_dir: Path | None = None
    dry_run: bool = False
    explain: bool = False
    data_check: bool = True


@dataclass(frozen=True, slots=True)
class Answer:
    """What a submission answers: ``document`` (``shapes.Submitted``, what ``-o json``
    prints), the warnings to show with it, and whether a controller was asked to cycle
    (False: a dry run, or none runs)."""

    document: dict[str, Any]
    warnings: list[str]
    nudged: bool


Charge = Callable[[str | None], str | None]
"""The team a job is charged to, given the one it asks for (None: none asked; None back:
the job's default). Refusing raises (``PermissionError`` for a team that is not the
caller's, ``InvalidInput`` for a choice the caller must make)."""


def submit_job(
    context: AppContext,
    request: SubmitRequest,
    planning: Planning,
    store: Callable[[], AbstractContextManager[Store]],
    *,
    charge: Charge,
    owner: str,
    bound: Callable[[dt.datetime], BoundPolicies] | None = None,
) -> Answer:
    """Check the request's job against the mesh and the policies in force (``planning``) and
    queue it for ``owner`` in the store ``store`` opens (not opened for a dry run)."""
    import time

    from meshctl.controller.submit import enqueue

    warnings: list[str] = []
    told = replace(context, warn=warnings.extend)  # said with the answer, wherever it goes
    job, loaded = job_of(request, charge)
    if loaded is not None:
        warnings += file_checks(told, loaded, request, planning)
    told.warn_if_not_enforced(planning[2], False)
    job, admission = admit(told, job, request.working_dir, planning, bound)
    record = None
    if not request.dry_run:
        with store() as opened:
            record = enqueue(
                opened, job, admission, request.working_dir, context.home, time.time(),
                owner=owner, keep_files=context.shares_store(),
            )  # fmt: skip
    planned = request.dry_run or request.explain
    document = submitted(job, admission, record, planned)
    return Answer(document, warnings, record is not None and context.nudge())


def job_of(request: SubmitRequest, charge: Charge) -> tuple[Job, Loaded | None]:
    """The request's job, charged to its team, and the file it came from (None: not one)."""
    forms = {"job": request.job is not None, "file": request.file is not None,
             "command": bool(request.command)}  # fmt: skip
    named = [form for form, present in forms.items() if present]
    if len(named) != 1:
        raise InvalidRequestError(
            f"{', '.join(named)}: give one of them"
            if named
            else "job: Field required (or file, or command)"
        )
    if request.file is not None:
        job, loaded = from_file(request.file, request.flags)
        return charged(job, charge), loaded
    if request.job is not None:
        return from_document(request.job, charge), None
    return charged(from_command(list(request.command), request.flags), charge), None


def from_file(file: JobFile, flags: Mapping[str, Any]) -> tuple[Job, Loaded]:
    """The one Job document in a job file's text; flags given with it are refused."""
    from meshctl.files import cache, load_text
    from meshctl.model import Job
    from meshctl.problems import InvalidFileError, Problem

    if flags:
        names = ", ".join(BY_KEY[key].name if key in BY_KEY else key for key in flags)
        raise InvalidRequestError(
            f"{names}: describe a job given as a command; edit {file.path} instead"
        )
    docs = cache.cached(file.path, file.text, load_text)
    if len(docs) != 1 or not isinstance(docs[0].document, Job):
        found = ", ".join(type(d.document).__name__ for d in docs)
        line = docs[0].line if docs else None
        raise InvalidFileError(
            [Problem(file.path, line, "kind", f"expected one Job document, got {found}")]
        )
    return docs[0].document, docs[0]


def from_document(document: Mapping[str, Any], charge: Charge) -> Job:
    """A job document (``meshctl train``, an API client's): its team charged before it is
    checked, and a problem named ``job.<field>``."""
    from pydantic import ValidationError

    from meshctl.model import Job

    spec = document.get("spec")
    if not isinstance(spec, dict):
        raise InvalidRequestError("job.spec: expected a mapping (a Job document's spec)")
    asked = spec.get("team")
    if asked is not None and not isinstance(asked, str):
        raise InvalidRequestError(f"job.spec.team: expected a team name (a string), got {asked!r}")
    team = charge(asked)
    spec = spec if team is None else {**spec, "team": team}
    try:
        return Job.model_validate({**document, "spec": spec})
    except ValidationError as err:
        raise InvalidRequestError(f"job.{flag_error(err, Job, {})}") from None


def charged(job: Job, charge: Charge) -> Job:
    """The job with the team ``charge`` gives it (the one it asks for, if any)."""
    asked = job.spec.team if "team" in job.spec.model_fields_set else None
    team = charge(asked)
    if team is None or team == job.spec.team:
        return job
    return job.model_copy(update={"spec": job.spec.model_copy(update={"team": team})})


def from_command(command: list[str], flags: Mapping[str, Any]) -> Job:
    """A job that runs ``command``, described by ``flags`` (by key; the others their
    defaults, ``submitflags.JOB``); a problem names the flag."""
    from pydantic import ValidationError

    from meshctl.model import Job

    unknown = [key for key in flags if key not in BY_KEY]
    if unknown:
        raise InvalidRequestError(f"flags.{unknown[0]}: not a flag of meshctl submit")
    value = {key: flags.get(key, flag.default) for key, flag in BY_KEY.items()}
    raw: dict[str, Any] = {
        "apiVersion": "meshctl/v1",
        "kind": "Job",
        "metadata": {"name": value["name"] or name_of(command)},
        "spec": {
            "kind": value["kind"],
            "entrypoint": shlex.join(command),
            "criticality": value["criticality"],
            "resources": {"gpus": value["gpus"] or 0, "cpus": value["cpus"],
                          "memory_gib": value["memory"], "nodes": value["nodes"]},
        },
    }  # fmt: skip
    if "team" in flags:
        raw["spec"]["team"] = value["team"]
    if value["priority"]:
        raw["spec"]["priority_class"] = value["priority"]
    try:
        return Job.model_validate(raw)
    except ValidationError as err:
        raise flag_error(err, Job, FIELD_FLAGS) from None


# A word that names a script or a module (train.py, pkg.mod), not a program given inline
# (python -c "import ray; ..."), whose text makes no name.
_SCRIPT = re.compile(r"[\w./-]+\.\w+")


def name_of(command: Sequence[str]) -> str:
    """A job name from its command: the script or module it runs, else the program."""
    words = [w for w in command if not w.startswith("-")]
    script = next((w for w in words[1:] if _SCRIPT.fullmatch(w)), words[0] if words else "")
    return name_from(PurePath(script).stem if script else "")


def file_checks(
    context: AppContext, loaded: Loaded, request: SubmitRequest, planning: Planning
) -> list[str]:
    """A job file's accelerator models, its export and its datasets checked, each problem
    with its file and line (``InvalidFileError``); the datasets' warnings."""
    from meshctl.catalog.check import export_problems, job_accelerators
    from meshctl.data.check import check_job
    from meshctl.problems import InvalidFileError

    mesh, catalogs, _ = planning
    problems = job_accelerators(loaded, catalogs, mesh, context.accelerators())
    if request.working_dir is not None:
        problems += export_problems(loaded, request.working_dir)
    if problems:
        raise InvalidFileError(problems)
    problems, warnings = check_job(loaded, mesh, request.data_check)
    if problems:
        raise InvalidFileError(problems)
    return [str(w) for w in warnings]


def planning_of(context: AppContext, file: bool) -> Planning:
    """The mesh, catalogs and policies a submission in this process plans with: the
    controller's (``AppContext.policy_set``); whether they are the ones it enforces is said
    with the answer (``submit_job``). For a job ``file``, the catalogs are read before the
    mesh: with both broken, the catalog's problem is the one shown."""
    mesh, catalogs = context.mesh_and_catalogs(context.catalog_map() if file else None)
    return mesh, catalogs, context.policy_set(mesh=mesh)
