"""Taking a job in: check it could ever run, keep a copy of its files, queue it.

A job that no pool of the mesh could ever hold (too many GPUs for any node or gang) is
rejected here with the reason, not queued forever; so is one the policies refuse whatever the
mesh holds (an undefined priority class, a team quota it can never fit in, no pool allowed),
as inadmissible under the current policies. The working directory is copied under
``$MESHCTL_HOME/packages/<job id>`` at submit time, as ``ray job submit`` uploads it at
once: what was submitted is what runs, also when the job is requeued hours later after its
files changed.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import secrets
import shutil
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from meshctl.errors import InvalidInput
from meshctl.host.packing import IGNORED
from meshctl.lifecycle.configured import snapshot_from_mesh
from meshctl.model.catalog import Catalog
from meshctl.model.job import Job
from meshctl.model.mesh import Mesh
from meshctl.model.policy import TeamQuota
from meshctl.policy.compiled import PolicySet
from meshctl.policy.evaluate import BoundPolicies, bind
from meshctl.policy.facts import mesh_snapshot
from meshctl.policy.names import did_you_mean
from meshctl.policy.tenancy import hourly_headroom, hours_left_in_month, quota_ceiling
from meshctl.policy.verdict import Verdict
from meshctl.scheduler import (
    FromPolicyEngine,
    Pending,
    Permissive,
    PolicyView,
    Request,
    schedule,
)
from meshctl.scheduler.plan import Decision
from meshctl.state.private import private_dir, private_tree
from meshctl.state.records import Event, JobRecord, JobState
from meshctl.state.store import ConflictError, Store

if TYPE_CHECKING:
    from meshctl.pools.observed import PoolObservation

MAX_PACKAGE_BYTES = 100 * 1024**2


class Rejected(InvalidInput):
    """The job can never run on this mesh (or its files cannot be taken); nothing is stored."""


@dataclass(frozen=True, slots=True)
class Admission:
    priority: int
    priority_class: str | None
    decision: Decision  # the scheduler's view of the job on the mesh as configured


INADMISSIBLE = "inadmissible under the current policies"


def check(
    job: Job,
    mesh: Mesh,
    catalogs: Mapping[str, Catalog],
    policies: PolicySet | None,
    now: dt.datetime,
    observed: Mapping[str, PoolObservation] | None = None,
    bound: BoundPolicies | None = None,
) -> Admission:
    """One scheduling cycle on the configured (idle) mesh: unschedulable means never.

    What the policies refuse (an undefined priority class, more GPUs than the team's quota
    could ever give, no pool allowed) is said to be inadmissible under the current policies,
    not impossible on this mesh: a policy change admits it. ``observed``: the inventory of
    ``ray`` pools whose mesh entry lists no nodes (an existing cluster is what it is; its
    nodes are read from it). ``bound``: the policies bound to this mesh at about ``now``
    already (a server checking many jobs binds once a second)."""
    name = job.metadata.name
    priority, klass, view, headroom = _policy_view(job, mesh, catalogs, policies, now, bound)
    pending = Pending(name, job.spec.team, priority, Request.of(job), now.timestamp(), None)
    snapshot = snapshot_from_mesh(mesh, catalogs, None, [pending], now.timestamp(), headroom)
    for pool_name, observation in (observed or {}).items():
        pool = mesh.pool(pool_name)
        if pool is not None:
            # the controller's view of nodes and jobs: imported only when a pool is observed
            from meshctl.controller.deciding.nodes import observed_nodes

            extra = observed_nodes(pool, observation)
            snapshot = replace(snapshot, nodes=snapshot.nodes + tuple(extra))
    decision = schedule(snapshot, view).decisions[name]
    if decision.status == "unschedulable":
        raise Rejected(f"job {name} can never run on this mesh: {decision.reason}")
    return Admission(priority, klass, decision)


def _policy_view(
    job: Job,
    mesh: Mesh,
    catalogs: Mapping[str, Catalog],
    policies: PolicySet | None,
    now: dt.datetime,
    bound: BoundPolicies | None = None,
) -> tuple[int, str | None, PolicyView, dict[str, float | None]]:
    """The job's priority and class, what the scheduler asks of the policies, and each pool's
    budget headroom per hour; Rejected if the policies refuse the job outright."""
    if policies is None:
        return 0, None, Permissive(), {}
    if bound is None:
        bound = bind(policies, mesh_snapshot(mesh, catalogs), now)
    verdict = bound.evaluate(job)
    view = FromPolicyEngine(bound, {job.metadata.name: job}, {})
    refused = inadmissible(job, verdict, view.quotas, policies.teams)
    if refused is not None:
        raise Rejected(f"job {job.metadata.name} is {INADMISSIBLE}: {refused}")
    hours = hours_left_in_month(now)
    headroom = {
        p.name: hourly_headroom(verdict.budgets, p.name, p.provider, hours) for p in mesh.spec.pools
    }
    return verdict.priority, verdict.priority_class, view, headroom


def inadmissible(
    job: Job,
    verdict: Verdict,
    quotas: Mapping[str, TeamQuota],
    teams: Collection[str] = (),
) -> str | None:
    """What the policies refuse the job whatever the mesh holds; None if nothing. ``teams``:
    the teams the policies know; when they know any, a job of another team is refused (a
    misspelt team would otherwise get around every quota)."""
    if teams and job.spec.team not in teams:
        known = ", ".join(sorted(teams))
        hint = did_you_mean(job.spec.team, teams)
        return f"team {job.spec.team!r} is not declared by the policies (teams: {known}){hint}"
    if verdict.priority_problem:
        return verdict.priority_problem
    if not verdict.eligible_pools:
        reasons = {p.reason for p in verdict.pools}
        why = (
            reasons.pop()
            if len(reasons) == 1
            else "; ".join(f"{p.pool}: {p.reason}" for p in verdict.pools)
        )
        return f"every pool is denied to it: {why}"
    team, needs = job.spec.team, job.spec.resources.total_gpus
    ceiling = quota_ceiling(team, quotas)
    if needs > ceiling + 1e-9:
        quota = quotas[team]
        borrowing = f" ({ceiling:g} with what it may borrow)" if ceiling > quota.gpus else ""
        gpus = f"{quota.gpus:g} GPU{'' if quota.gpus == 1 else 's'}"
        return f"team {team}'s quota is {gpus}{borrowing}, the job needs {needs:g}"
    return None


# A new id is the job's name and 24 random bits, short enough to read and type. Jobs of one name
# share the bits, so some ids come out taken (10,000 submissions of one name meet about 3): it
# is drawn again then. All ID_TRIES taken: about 1 in 2**85 with 10,000 jobs of that name stored,
# 1 in 2**32 with a million.
ID_TRIES = 8


class PackageTaken(FileExistsError):
    """The folder of a job id's files exists: another job's, or another submission's that is
    not stored yet."""


def new_job_id(name: str) -> str:
    return f"{name[:50]}-{secrets.token_hex(3)}"


def package(source: Path, destination: Path) -> Path:
    """Copy a working directory (without VCS, caches, virtualenvs) for the job to run from."""
    if not source.is_dir():
        raise Rejected(f"working_dir: expected a directory, got {source}")
    source, destination = source.resolve(), destination.resolve()
    # meshctl's own home inside the working directory (--home ./state): never copied into
    # itself, package after package
    home = (
        source / destination.relative_to(source).parts[0]
        if destination.is_relative_to(source)
        else None
    )
    size = sum(
        f.stat().st_size
        for f in source.rglob("*")
        if f.is_file()
        and not any(part in IGNORED for part in f.relative_to(source).parts)
        and not (home is not None and f.is_relative_to(home))
    )
    if size > MAX_PACKAGE_BYTES:
        raise Rejected(
            f"working_dir {source}: {size / 1024**2:.0f} MiB, over the "
            f"{MAX_PACKAGE_BYTES // 1024**2} MiB a job may carry; keep data in storage"
        )
    private_dir(destination.parent)  # packages/: 0700, like the whole state folder
    patterns = shutil.ignore_patterns(*IGNORED)

    def ignored(folder: str, names: list[str]) -> set[str]:
        skip = set(patterns(folder, names))
        return skip | {n for n in names if home is not None and Path(folder, n) == home}

    _claim(destination)
    try:
        shutil.copytree(source, destination, ignore=ignored, dirs_exist_ok=True)
        # Ray names an uploaded working directory by its content hash; jobs sharing one package
        # were seen (Ray 2.60) to start before the node had finished unpacking it for another
        # job ("can't open file"). A file naming the job makes every job's package its own.
        (destination / ".meshctl-job").write_text(destination.name + "\n")
        private_tree(destination)  # the copy keeps the source's modes: make it the owner's
    except BaseException:
        shutil.rmtree(destination, ignore_errors=True)
        raise
    return destination


def _claim(folder: Path) -> None:
    """``folder`` made, in one step, for this submission's files; ``PackageTaken`` if it is
    there already: another's, which nothing here removes."""
    try:
        folder.mkdir(mode=0o700)
    except FileExistsError as err:
        raise PackageTaken(err.errno, "a job's files are there already", str(folder)) from None


def enqueue(
    store: Store,
    job: Job,
    admission: Admission,
    working_dir: Path | None,
    home: Path,
    now_s: float,
    job_id: str | None = None,
    *,
    draw: Callable[[str], str] = new_job_id,
    owner: str = "",
    keep_files: bool = False,
) -> JobRecord:
    """Store the job as pending, with its files copied; the controller takes it from there.
    ``job_id``: the caller's (the differential check keeps the simulator's), stored under it
    or not at all (``ConflictError``: taken); default a new one, ``draw`` of the job's name,
    drawn again while the one drawn is taken, by a stored job or by another submission's
    files (``ID_TRIES`` in all, then the last ``ConflictError`` or ``PackageTaken``).
    ``owner``: the user who submits it, on a shared mesh. ``keep_files``: the files are
    kept in the store too, for controllers on other hosts (``controller/packages.py``)."""
    store_as = partial(_store_as, owner=owner, keep_files=keep_files)
    if job_id is not None:
        return store_as(job_id, store, job, admission, working_dir, home, now_s)
    tries = 0
    while True:
        try:
            drawn = draw(job.metadata.name)
            return store_as(drawn, store, job, admission, working_dir, home, now_s)
        except (ConflictError, PackageTaken):
            tries += 1
            if tries == ID_TRIES:
                raise


def _store_as(
    job_id: str,
    store: Store,
    job: Job,
    admission: Admission,
    working_dir: Path | None,
    home: Path,
    now_s: float,
    owner: str = "",
    keep_files: bool = False,
) -> JobRecord:
    """The job stored as pending under ``job_id``, its files copied first (and kept in the
    store, with ``keep_files``); nothing left of any on failure."""
    from meshctl.host.packing import archive

    spec = job.model_dump(mode="json", exclude_none=True)
    copy: Path | None = None
    kept = False
    if working_dir is not None:
        copy = package(working_dir, home / "packages" / job_id)
        spec["spec"]["working_dir"] = str(copy)
    else:
        spec["spec"]["working_dir"] = ""
    if admission.priority_class and not job.spec.priority_class:
        spec["spec"]["priority_class"] = admission.priority_class
    record = JobRecord(
        id=job_id,
        name=job.metadata.name,
        team=job.spec.team,
        state=JobState.PENDING,
        priority=admission.priority,
        spec=spec,
        pool=None,
        submitted_at_s=now_s,
        updated_at_s=now_s,
        owner=owner,
    )
    event = Event(now_s, "job.pending", job_id, "submitted", {"to": "pending"})
    try:
        if copy is not None and keep_files:
            store.put_package(job_id, archive(copy))
            kept = True
        return store.create(record, events=[event])
    except BaseException:
        if copy is not None:  # ours: package made it
            shutil.rmtree(copy, ignore_errors=True)
        if kept:
            with contextlib.suppress(Exception):  # the job's id is not stored: a stray copy
                store.delete_package(job_id)
        raise
