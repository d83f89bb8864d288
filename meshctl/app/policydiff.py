"""``meshctl policy diff``: what a change to the policies would have done to the mesh's own
history, for the CLI and the API server alike.

The history is read from the store (``history``: each job's file, submission, first start,
latest pool and run time; the nodes lost and back; the spot notices), replayed through the
simulator's engine under the base set and under the head set (the controller's own lifecycle,
``meshctl.lifecycle.cycle``), and the two outcomes are compared job by job
(``meshctl.sim.core.replay_diff``). With no history in the window, ``--trace`` replays a
trace instead. The sets: the head is a folder (default ``./policies``, else the policy
folder in use); the base is the set the controller enforces (by default), a folder, or a git
ref (its copy of the head's folder at that commit).
"""

from __future__ import annotations

import io
import json
import multiprocessing
import os
import subprocess
import tarfile
import tempfile
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from meshctl.errors import InvalidRequestError

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

    from meshctl.app.context import AppContext
    from meshctl.model import Catalog, Mesh
    from meshctl.model.job import Job
    from meshctl.policy.compiled import PolicySet
    from meshctl.sim.core.config import Result, SimConfig, SimMesh
    from meshctl.sim.core.replay import History
    from meshctl.sim.core.workload import SimJob
    from meshctl.state import Store

DAY_S = 86_400.0
BYTES_PER_JOB = 48 * 1024  # a job's records read, and its state in two replays (measured)
SERVE = "services (a service's replicas follow its traffic, which the history lacks)"
CANCELLED = "cancelled before they started"
UNREADABLE = "job files this meshctl cannot read (written for another version)"


@dataclass(frozen=True, slots=True)
class DiffRequest:
    """``base``: a folder or a git ref; None: the set the controller enforces. ``head``: a
    folder; None: ``./policies``, else the folder in use. ``since_s``: the window, back from
    ``now_s``; ``trace``: replay this trace instead of the history."""

    base: str | None = None
    head: Path | None = None
    since_s: float = 30 * DAY_S
    trace: str | None = None
    now_s: float = 0.0
    seed: int = 0


def policy_diff(context: AppContext, request: DiffRequest) -> dict[str, Any]:
    """The report (docs/JSON.md ``PolicyDiff``). Invalid sets, an unknown ref, a window with
    no history or a history too large to hold are refused (InvalidFileError,
    InvalidRequestError) before anything is replayed."""
    from meshctl.jsondata import timestamp
    from meshctl.sim.core.replay_diff import compare

    mesh, catalogs = context.mesh_and_catalogs()
    head_dir = request.head or _default_head(context)
    if not head_dir.is_dir():
        raise InvalidRequestError(f"--head: {head_dir}: no such folder")
    head = context.policy_set(head_dir, mesh)
    with _base_folder(context, request.base, head_dir) as (base_dir, base_label):
        base = context.policy_set(base_dir, mesh)
    if request.trace is not None:
        history, sim, jobs, config = _trace_run(context, request, mesh, catalogs)
    else:
        with context.store() as store:
            history = read_history(store, request.now_s - request.since_s, request.now_s)
        if not history.jobs:
            days = request.since_s / DAY_S
            raise InvalidRequestError(
                f"--since: no job was submitted in the last {days:g} days of this mesh's "
                "history; replay a trace instead (--trace philly)"
            )
        sim, jobs, config = replay_of(history, mesh, catalogs, request.seed)
    runs = replay_both(sim, jobs, config, (base, head))
    rules = rules_of(history, mesh, catalogs, base, head)
    report = compare(history, runs[0], runs[1], sim, rules)
    if request.trace is not None:
        report["fidelity"] = None
    window = report["window"]
    report["window"] = {
        "start_at": timestamp(window["start_s"]),
        "end_at": timestamp(window["end_s"]),
        "days": window["days"],
    }
    return {
        "base": {"policies": base_label, "policy_hash": base.content_hash},
        "head": {"policies": str(head_dir), "policy_hash": head.content_hash},
        "source": f"trace {request.trace}" if request.trace else "history",
        **report,
    }


def replay_of(
    history: History, mesh: Mesh, catalogs: dict[str, Catalog], seed: int = 0
) -> tuple[SimMesh, list[SimJob], SimConfig]:
    """The history as the simulator's engine runs it (under either set): its jobs, its
    failures and notices, the window's calendar; a cycle whenever something changes, as the
    controller's loop (a second apart) does. It decides as ``sim run`` does, for speed: the
    best of 8 candidate nodes a pool for a single-node job and the first 500 waiting jobs
    a cycle (the controller: 32, and every one); on a large mesh a job may land on another
    node of the same pool, rarely in another pool (the fidelity figure says how rarely)."""
    from meshctl.scheduler import SchedulerConfig
    from meshctl.sim.core.config import SimConfig
    from meshctl.sim.core.replay import fitted_clouds, injected, sim_jobs
    from meshctl.sim.run import sim_mesh

    failures, notices = injected(history)
    window_s = history.end_s - history.start_s
    config = SimConfig(
        seed=seed,
        injected_failures=failures,
        injected_notices=notices,
        start_epoch_s=history.start_s,
        until_s=window_s,
        window_s=window_s,
        scheduler=SchedulerConfig(max_candidates=8, queue_depth=500, explain=False),
    )
    sim = sim_mesh(mesh, catalogs, 0.3)
    sim = replace(sim, clouds=fitted_clouds(sim.clouds, history))
    return sim, sim_jobs(history), config


PARALLEL_FROM = 2_000  # jobs: fewer replay faster one after the other than forked


def replay_both(
    sim: SimMesh, jobs: list[SimJob], config: SimConfig, sets: Sequence[PolicySet]
) -> list[Result]:
    """The replays under each set, each in a process of its own when the history is large
    and the machine has the cores (the two runs share nothing): what a job did and the
    totals come back (``replay_diff.slim``), which is all the comparison reads."""
    from meshctl.sim.core.engine import simulate
    from meshctl.sim.core.replay_diff import rebuilt

    if len(jobs) < PARALLEL_FROM or (os.cpu_count() or 1) < 2 or not _can_fork():
        return [simulate(sim, jobs, config, policies) for policies in sets]
    context = multiprocessing.get_context("fork")
    pipes, children = [], []
    for policies in sets:
        mine, theirs = context.Pipe(duplex=False)
        child = context.Process(target=_replay_into, args=(theirs, sim, jobs, config, policies))
        child.start()
        theirs.close()
        pipes.append(mine)
        children.append(child)
    answers = [pipe.recv() for pipe in pipes]  # before join: a large answer fills the pipe
    for child in children:
        child.join()
    by_id = {j.id: j for j in jobs}
    out = []
    for kind, value in answers:
        if kind == "error":
            raise RuntimeError(f"a replay failed: {value}")
        out.append(rebuilt(value, by_id))
    return out


def _can_fork() -> bool:
    return "fork" in multiprocessing.get_all_start_methods()


def _replay_into(
    pipe: Connection, sim: SimMesh, jobs: list[SimJob], config: SimConfig, policies: PolicySet
) -> None:
    """In a forked child: one replay, sent back slim."""
    from meshctl.sim.core.engine import simulate
    from meshctl.sim.core.replay_diff import slim

    try:
        pipe.send(("ok", slim(simulate(sim, jobs, config, policies))))
    except Exception as err:  # said in the parent, which raises it
        pipe.send(("error", f"{type(err).__name__}: {err}"))
    finally:
        pipe.close()


def read_history(store: Store, start_s: float, end_s: float) -> History:
    """What the mesh ran from ``start_s`` to ``end_s``, read once; refused (never half read)
    when it would not fit in the memory this machine has free."""
    from meshctl.sim.core.replay import History, RecordedJob, pairs
    from meshctl.state import AttemptRecord, JobRecord, JobState

    _fits_in_memory(len(store.versions(JobRecord)))
    jobs = [j for j in store.list(JobRecord) if start_s <= j.submitted_at_s < end_s]
    wanted = {j.id for j in jobs}
    attempts: dict[str, list[AttemptRecord]] = defaultdict(list)
    for attempt in store.list(AttemptRecord):
        if attempt.job_id in wanted:
            attempts[attempt.job_id].append(attempt)
    recorded: list[RecordedJob] = []
    left_out: dict[str, int] = defaultdict(int)
    read = _Reader()
    for job in jobs:
        spec = job.spec.get("spec") if isinstance(job.spec, dict) else None
        mine = sorted(attempts.get(job.id, ()), key=lambda a: a.number)
        started = [a for a in mine if a.started_at_s is not None]
        if isinstance(spec, dict) and spec.get("serve") is not None:
            left_out[SERVE] += 1
            continue
        if not started and job.state == JobState.CANCELLED:
            left_out[CANCELLED] += 1
            continue
        model = read(job.spec)
        if model is None:
            left_out[UNREADABLE] += 1
            continue
        held = sum(min(a.ended_at_s or end_s, end_s) - (a.started_at_s or 0.0) for a in started)
        recorded.append(
            RecordedJob(
                id=job.id,
                document=job.spec,
                job=model,
                submitted_s=job.submitted_at_s,
                runtime_s=held if started else None,
                pool=mine[-1].pool if started else None,
                started_s=started[0].started_at_s if started else None,
                state=str(job.state),
            )
        )
    lost, back, notices = _world_events(store, start_s, end_s)
    return History(
        start_s=start_s,
        end_s=end_s,
        jobs=tuple(recorded),
        failures=pairs(lost, back, end_s),
        notices=tuple(notices),
        left_out=dict(left_out),
        provision_s=_provision(store, start_s, end_s),
    )


def _provision(store: Store, start_s: float, end_s: float) -> dict[str, float]:
    """Per cloud pool, the median time its instances launched in the window took to join:
    from the launch to the first sight of the node it became."""
    import statistics

    from meshctl.pools.observed import node_name
    from meshctl.state import InstanceRecord, NodeRecord

    seen = {n.id: n.detail.first_seen_s for n in store.list(NodeRecord)}
    took: dict[str, list[float]] = defaultdict(list)
    for instance in store.list(InstanceRecord):
        launched = instance.launched_at_s
        if launched is None or not start_s <= launched < end_s:
            continue
        first = seen.get(f"{instance.pool}/{node_name(instance.id)}")
        if first is not None and first >= launched:
            took[instance.pool].append(first - launched)
    return {pool: statistics.median(times) for pool, times in took.items()}


class _Reader:
    """Stored job files read as job files are (None: one this meshctl cannot read), each
    content once: a month's jobs are a few hundred files submitted thousands of times, and
    reading one costs more than the rest of its record. Files alike (the same JSON, key order
    aside) share one frozen ``Job``."""

    def __init__(self) -> None:
        self._read: dict[str, Job | None] = {}

    def __call__(self, document: Any) -> Job | None:
        try:
            key = json.dumps(document, sort_keys=True)
        except (TypeError, ValueError):  # not JSON (never so from the store): read it alone
            return _read(document)
        if key not in self._read:
            self._read[key] = _read(document)
        return self._read[key]


def _read(document: Any) -> Job | None:
    """A stored job file, read as a job file is; None when this meshctl cannot read it."""
    from pydantic import ValidationError

    from meshctl.model.job import Job

    try:
        return Job.model_validate(document)
    except ValidationError:
        return None


def _world_events(
    store: Store, start_s: float, end_s: float
) -> tuple[list[tuple[float, str]], list[tuple[float, str]], list[tuple[float, str, int]]]:
    """Nodes lost and back (by name, as the mesh names them) and spot notices (by pool and
    the instance's launch order in it), from the event log, a page at a time."""
    lost: list[tuple[float, str]] = []
    back: list[tuple[float, str]] = []
    notices: list[tuple[float, str, int]] = []
    launched: dict[str, dict[str, int]] = defaultdict(dict)  # pool -> instance -> order
    after = 0
    while page := store.events(after_seq=after, limit=10_000):
        after = page[-1].seq
        for event in page:
            head = event.message.split(":", 1)[0]
            if event.kind == "instance.launched":
                instance, _, rest = event.message.partition(" ")
                pool = rest.split(" in ", 1)[1].split(" ", 1)[0] if " in " in rest else ""
                launched[pool].setdefault(instance, len(launched[pool]))
            if not start_s <= event.at_s < end_s:
                continue
            node = str(event.data.get("node") or head.rsplit("/", 1)[-1])
            if event.kind == "node.lost":
                lost.append((event.at_s, node))
            elif event.kind == "node.back":
                back.append((event.at_s, node))
            elif event.kind == "instance.notice" and " in " in head:
                instance, pool = head.split(" in ", 1)
                order = launched.get(pool, {}).get(instance)
                if order is not None:
                    notices.append((event.at_s, pool, order))
    return lost, back, notices


def _fits_in_memory(jobs: int) -> None:
    """Refuse a history whose replays would not fit in half the memory free now."""
    free = _available_bytes()
    need = jobs * BYTES_PER_JOB
    if free is not None and need > free // 2:
        raise InvalidRequestError(
            f"--since: the store holds {jobs:,} jobs, about {need / 2**30:.1f} GiB to replay "
            f"twice, over half the {free / 2**30:.1f} GiB free; choose a shorter window"
        )


def _available_bytes() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _default_head(context: AppContext) -> Path:
    here = Path("policies")
    return here if here.is_dir() else context.policy_dir()


@contextmanager
def _base_folder(context: AppContext, base: str | None, head: Path) -> Iterator[tuple[Path, str]]:
    """The base set's folder and how the report names it: the controller's (None), a
    folder, or the head folder's copy at a git ref (checked out in a temporary folder)."""
    if base is None:
        running = context.enforced()
        where = Path(str(running["policies"])) if running and running.get("policies") else None
        folder = where if where is not None and where.is_dir() else context.policy_dir()
        yield folder, f"{folder} (the controller's)" if running else str(folder)
        return
    if Path(base).is_dir():
        yield Path(base), base
        return
    with tempfile.TemporaryDirectory(prefix="meshctl-base-") as tmp:
        yield _checkout(base, head, Path(tmp)), f"{base}:{head}"


def _checkout(ref: str, head: Path, into: Path) -> Path:
    """The head folder as it was at ``ref`` in its git repository, written under ``into``."""
    folder = head.resolve()
    top = _git(folder, "rev-parse", "--show-toplevel")
    if top is None:
        raise InvalidRequestError(
            f"--base: {ref} is no folder, and {head} is not in a git repository"
        )
    root = Path(top.decode().strip()).resolve()
    relative = folder.relative_to(root)
    # from the repository's top: git refuses to archive from inside a subfolder by path
    archive = _git(root, "archive", "--format=tar", f"{ref}:{relative.as_posix()}")
    if archive is None:
        raise InvalidRequestError(
            f"--base: {ref} is no folder, nor a commit of {top.decode().strip()} that holds "
            f"{relative.as_posix()}"
        )
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into


def _git(cwd: Path, *args: str) -> bytes | None:
    try:
        done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, check=False, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def _trace_run(
    context: AppContext, request: DiffRequest, mesh: Mesh, catalogs: dict[str, Catalog]
) -> tuple[History, SimMesh, list[SimJob], SimConfig]:
    """A trace's window prepared as ``sim run`` prepares it, and a history of its jobs with
    no record of where they ran (the report has no fidelity)."""
    from meshctl.sim.core.replay import History, RecordedJob
    from meshctl.sim.run import RunSpec, prepare

    spec = RunSpec(mesh=context.mesh_file(), trace=str(request.trace),
                   days=request.since_s / DAY_S, seed=request.seed)  # fmt: skip
    ready = prepare(spec, mesh, catalogs)
    window_s = ready.config.until_s or request.since_s
    jobs = tuple(
        RecordedJob(j.id, {}, None, j.arrival_s, j.duration_s, None, None, "trace")
        for j in ready.jobs
    )
    return History(0.0, window_s, jobs), ready.mesh, ready.jobs, ready.config


def rules_of(
    history: History, mesh: Mesh, catalogs: dict[str, Catalog], base: PolicySet, head: PolicySet
) -> Callable[[str], list[str]]:
    """What ``replay_diff.compare`` asks of a moved job: the rules that decide differently
    for it (``replay_diff.rules_that_differ``), at its submission, against the mesh as its
    file configures it."""
    import datetime as dt

    from meshctl.policy.facts import mesh_snapshot
    from meshctl.sim.core.replay_diff import rules_that_differ

    configured = mesh_snapshot(mesh, catalogs)
    by_id = {j.id: j for j in history.jobs}

    def differ(job_id: str) -> list[str]:
        job = by_id[job_id]
        if job.job is None:  # a trace's job: no file of its own
            return []
        when = dt.datetime.fromtimestamp(job.submitted_s, dt.UTC)
        return rules_that_differ(base, head, configured, job.job, when)

    return differ
