"""Admitting a job, for ``submit``, ``train`` and the API server alike: read a job file, name
a job, check a train job's loop or a Serve app, check the job against the mesh and the
policies in force (``admit``), and what a submission answers (``submitted``)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from meshctl.errors import CommandError, InvalidRequestError

if TYPE_CHECKING:
    import datetime as dt
    from collections.abc import Callable, Mapping, Sequence

    from pydantic import BaseModel, ValidationError

    from meshctl.app.context import AppContext
    from meshctl.controller.submit import Admission
    from meshctl.files import Loaded
    from meshctl.model import Accelerators, Catalog, Job, Mesh
    from meshctl.policy import PolicySet
    from meshctl.policy.evaluate import BoundPolicies


def admit(
    context: AppContext,
    job: Job,
    work: Path | None,
    planning: tuple[Mesh, dict[str, Catalog], PolicySet],
    bound: Callable[[dt.datetime], BoundPolicies] | None = None,
) -> tuple[Job, Admission]:
    """The job (a Serve app's deployment named) and its admission: its loop imports, and it
    can run on this mesh under the policies in force (``planning``: the mesh, catalogs and
    policies, ``AppContext.planning``); else ``Rejected`` or another ``InvalidInput``,
    nothing queued. ``bound``: the policies bound to the mesh at a moment, kept by a caller
    that checks many jobs. Shared by the CLI and the API server."""
    import datetime as dt

    from meshctl.controller.submit import check

    job = check_loop(
        job, work, context.warn
    )  # a train loop or Serve app imports, before anything is queued
    now = dt.datetime.now(dt.UTC)
    mesh, catalogs, policies = planning
    job = with_options(job, catalogs, mesh, context.accelerators())
    observed = _unlisted_inventory(context, mesh)
    return job, check(job, mesh, catalogs, policies, now, observed, bound and bound(now))


def with_options(job: Job, catalogs: dict[str, Catalog], mesh: Mesh, registry: Accelerators) -> Job:
    """The job with its fungible request's options worked out (``fungible.options``) and its
    TPU slice checked; what is wrong raises ``InvalidRequestError`` naming the field."""
    from meshctl.catalog import fungible
    from meshctl.catalog.check import job_models
    from meshctl.problems import dotted

    known = job_models(catalogs, mesh)
    found, problems = fungible.options(job.spec, registry.spec, known)
    problems += fungible.slices(job.spec, registry.spec)
    if problems:
        loc, message = problems[0]
        raise InvalidRequestError(f"{dotted(('spec', *loc))}: {message}")
    acc = job.spec.resources.accelerator
    if acc is None or not found:
        return job
    resources = job.spec.resources.model_copy(
        update={"accelerator": acc.model_copy(update={"options": found})}
    )
    return job.model_copy(update={"spec": job.spec.model_copy(update={"resources": resources})})


def submitted(job: Job, admission: Any, record: Any, planned: bool) -> dict[str, Any]:
    """What submit says as data (``shapes.Submitted``): one document, dry run or not."""
    from meshctl.app.decisions import decision_data

    return {
        "id": record.id if record else None,
        "name": job.metadata.name,
        "state": record.state.value if record else None,
        "priority": admission.priority,
        "priority_class": admission.priority_class,
        "decision": decision_data(admission.decision) if planned else None,
    }


def _unlisted_inventory(context: Any, mesh: Any) -> dict[str, Any]:
    """The nodes of ``ray`` pools whose mesh entry lists none, read from their clusters, with
    those the store knows of that the cluster does not list now (not alive: a node restarting
    or still joining is still the pool's)."""
    from dataclasses import replace

    from meshctl.model.mesh import RayPool

    found = {}
    for pool in mesh.spec.pools:
        if isinstance(pool, RayPool) and not pool.nodes:
            from meshctl.controller.runtime import client_for  # the pools' and clouds' clients

            client = client_for(pool, context.home)
            if client is not None:
                seen = client.observe()
                if not seen.reachable:
                    raise CommandError(
                        f"pool {pool.name}: cannot check the job against its nodes: {seen.error}"
                    )
                known = _known_nodes(context, pool.name, {n.name for n in seen.nodes})
                found[pool.name] = replace(seen, nodes=seen.nodes + known)
    return found


def _known_nodes(context: Any, pool: str, listed: set[str]) -> tuple[Any, ...]:
    """The nodes of ``pool`` the controller has recorded that are not in ``listed``, as
    observed nodes that are not alive."""
    from meshctl.pools.observed import ObservedNode
    from meshctl.state import NodeRecord

    if not context.has_store():
        return ()
    with context.store() as store:
        records = store.list(NodeRecord, pool=pool)
    found = []
    for record in records:
        name = record.id.split("/", 1)[1]
        if name in listed:
            continue
        res = record.resources
        found.append(
            ObservedNode(
                name, str(res.get("ray_node_id") or ""), False, int(res.get("gpus") or 0),
                float(res.get("cpus") or 0.0), float(res.get("memory_gib") or 0.0),
                res.get("accelerator") or None, dict(record.labels),
                devices=dict(res.get("devices") or {}),
            )
        )  # fmt: skip
    return tuple(found)


def from_file(path: Path) -> tuple[Job, Path, Loaded]:
    """A job file, read once: its job, the folder its working_dir is relative to, and the
    document with its lines (for checks that name them)."""
    from meshctl.files import load_one, load_path
    from meshctl.model import Job

    docs = load_path(path)
    found = docs[0].document if len(docs) == 1 else None
    # not one Job document: load_one says so, with the line, as for every other file
    job = found if isinstance(found, Job) else load_one(path, Job)
    return job, path.resolve().parent, docs[0]


NAME_LIMIT = 40  # leaves room in a job id (name + "-" + 6 hex) and Ray's submission id


def name_from(text: str, default: str = "job") -> str:
    """``text`` as a valid name (lower-case letters, digits and inner '-', at most
    NAME_LIMIT characters): what a cut leaves at the end is trimmed; nothing left: default."""
    stem = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return stem[:NAME_LIMIT].rstrip("-") or default


# Run by the cluster's interpreter in the job's working directory (``python -c`` puts it first
# on sys.path, as meshctl.workload.train.run does on the workers): the module imports and the
# function is there and callable. It prints one line saying what is wrong, and exits 3, if not.
_LOOP_CHECK = """
import importlib, sys
module, function, want_callable = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
try:
    found = importlib.import_module(module)
except BaseException as err:
    print(f"cannot import {module}: {type(err).__name__}: {err}".splitlines()[0])
    sys.exit(3)
if not hasattr(found, function):
    print(f"module {module} has no {function}")
    sys.exit(3)
if want_callable and not callable(getattr(found, function)):
    print(f"{module}.{function} is not callable")
    sys.exit(3)
if not want_callable:  # a Serve application: the name of its ingress deployment
    bound = getattr(getattr(found, function), "_bound_deployment", None)
    if bound is None:
        print(f"{module}.{function} is not a Serve application (Deployment.bind())")
        sys.exit(3)
    print(f"DEPLOYMENT={bound.name}")
"""
LOOP_CHECK_TIMEOUT_S = 60.0  # importing torch on a cold cache takes seconds, not minutes


def check_loop(
    job: Job,
    work: Path | None,
    warn: Callable[[Sequence[str]], None],
    timeout_s: float = LOOP_CHECK_TIMEOUT_S,
) -> Job:
    """A train job's ``module:function``, imported in a subprocess (user code may import
    torch: never in this process) with the interpreter the cluster runs it with and the job's
    environment variables. Not importable or not a function: InvalidRequestError (exit 2,
    nothing queued); the import did not finish in time: a warning (``warn``), and it is queued."""
    import os
    import subprocess
    import sys

    if job.spec.train is not None:
        field, loop, want_callable = "train.loop", job.spec.train.loop, "1"
    elif job.spec.serve is not None:
        field, loop, want_callable = "serve.app", job.spec.serve.app, "0"
    else:
        return job
    module, _, function = loop.partition(":")
    python = job.spec.runtime_env.py_executable or sys.executable
    cwd = work if work is not None else Path.cwd()
    env = {**os.environ, **job.spec.runtime_env.env_vars}
    try:
        done = subprocess.run(
            [python, "-c", _LOOP_CHECK, module, function, want_callable],
            cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout_s,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        warn([f"{field}: {loop} did not import within {timeout_s:g} s; not checked"])
        return job
    except OSError as err:
        raise InvalidRequestError(f"{field}: cannot run {python} to check {loop}: {err}") from None
    if done.returncode != 0:
        why = (done.stdout.strip() or done.stderr.strip()).splitlines() or [
            f"exit {done.returncode}"
        ]
        raise InvalidRequestError(f"{field}: {loop} in {cwd}: {why[-1]}")
    serve = job.spec.serve
    said = [line for line in done.stdout.splitlines() if line.startswith("DEPLOYMENT=")]
    if serve is None or serve.deployment is not None or not said:
        return job
    named = serve.model_copy(update={"deployment": said[-1].removeprefix("DEPLOYMENT=")})
    return job.model_copy(update={"spec": job.spec.model_copy(update={"serve": named})})


def flag_error(
    err: ValidationError, model: type[BaseModel], flags: Mapping[str, str]
) -> InvalidRequestError:
    """A ``model`` built from flags failed validation: one line naming the flag (``flags``
    maps a field's location to it) and what was expected, with the value given once."""
    from meshctl.files import error_message

    first = err.errors()[0]
    # pydantic names the branches of a union in the location ("function-before[...]"): they
    # are not fields the user could have set
    where = ".".join(str(p) for p in first["loc"] if re.fullmatch(r"\w+", str(p)))
    message = error_message(dict(first), model, tuple(first["loc"]))
    return InvalidRequestError(f"{flags.get(where, where)}: {message}")
