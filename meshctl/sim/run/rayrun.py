"""A sweep's runs as Ray tasks: one task per run (a policy set, a trace, a seed), each the run
``meshctl sim run`` makes (``meshctl.sim.run.run``), gathered with ``ray.wait``.

    cluster = embedded(run_dir, ["onprem"]) or remote("ray://head:10001")
    finished, unfinished = execute(cluster, tasks, inputs, retries=3, progress=tick)

- Each task asks one CPU and no GPU (``num_cpus=1, num_gpus=0``): it never holds a job's GPUs,
  and a cluster runs as many at once as it has CPUs to give.
- What every run shares (the mesh, the catalogs, each policy set's parsed files) is put in
  the object store once; a task gets its ``RunSpec`` and that reference. Policies travel as
  parsed files and are compiled in the worker (compiled CEL programs do not pickle).
- A task whose worker dies (killed, out of memory, its node lost) is run again by Ray up to
  ``retries`` times (``max_retries``); an exception raised by the simulator is not retried
  (the same inputs would raise it again). A run that still fails is returned as
  ``Unfinished`` with why, not raised. A finished run says which attempt finished it.
- Where the code comes from: on the embedded mesh the workers run this machine's interpreter
  and checkout (``meshctl up`` started them from it). A remote cluster (``remote``) gets this
  ``meshctl`` package with the job (``runtime_env`` ``py_modules``); its nodes need meshctl's
  dependencies installed, and the trace files under the same path (or ``synthetic``).

Test hook: with ``hold`` set (``sim sweep`` reads it from ``MESHCTL_SWEEP_HOLD``), each
attempt writes its worker's pid to ``<hold>/run-<index>.<attempt>.pid`` and waits, before
simulating, until ``<hold>/release`` exists (at most ``HOLD_LIMIT_S``): a test can kill a task
mid-run and see it retried.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, redirect_stdout
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from meshctl.errors import Failure
from meshctl.model.catalog import Catalog
from meshctl.model.mesh import Mesh
from meshctl.policy.compiled import Source
from meshctl.sim.run import RunSpec
from meshctl.sim.run.sweep import Finished, RunKey, Unfinished

HOLD_ENV = "MESHCTL_SWEEP_HOLD"
HOLD_LIMIT_S = 600.0
# The worker's death, not the run's own error: Ray retries these (max_retries).
DIED = ("WorkerCrashedError", "NodeDiedError", "OutOfMemoryError", "ObjectLostError")

Progress = Callable[[int, int], None]  # (runs done, of which unfinished)


class SweepError(Failure):
    """The sweep could not start: no cluster to run on, or it refused the connection."""


@dataclass(frozen=True)
class Inputs:
    """What every run of a sweep shares: put in Ray's object store once."""

    mesh: Mesh
    catalogs: Mapping[str, Catalog]
    policies: Mapping[str, tuple[Source, ...] | None]  # by policy set name; None: no policies


@dataclass(frozen=True)
class Task:
    key: RunKey
    spec: RunSpec
    index: int  # its place in the sweep: names its pid file under ``hold``
    hold: str | None = None


@dataclass(frozen=True)
class Cluster:
    """Where a sweep runs: a Ray address, the environment to connect with (None removes a
    variable), the job's runtime environment, and a name for people."""

    address: str
    name: str
    env: Mapping[str, str | None] = field(default_factory=dict)
    runtime_env: Mapping[str, Any] | None = None


def run_one(task: Task, inputs: Inputs) -> dict[str, Any]:
    """One run, in a Ray worker: the report ``sim run`` would print, and which attempt this is."""
    from meshctl.policy.compiled import compile_policies
    from meshctl.sim.run import run

    attempt = _attempt()
    if task.hold is not None:
        _hold(Path(task.hold), task.index, attempt)
    sources = inputs.policies[task.key.policies]
    policies = None if sources is None else compile_policies(list(sources))
    outcome = run(task.spec, inputs.mesh, inputs.catalogs, policies, task.key.policies)
    return {"report": outcome.report, "attempt": attempt}


def _attempt() -> int:
    """Which attempt of its task this is, from 1. Ray counts them from 0 and says so only
    through its core worker (the task's attempt number, as its state API lists it)."""
    import ray

    worker: Any = ray._private.worker.global_worker  # no public accessor in Ray 2.60
    return int(worker.core_worker.get_current_task_attempt_number()) + 1


def _hold(folder: Path, index: int, attempt: int) -> None:
    """The test hook: say which process runs this attempt, then wait to be released."""
    path = folder / f"run-{index}.{attempt}.pid"
    temporary = path.with_suffix(".tmp")
    temporary.write_text(str(os.getpid()))
    temporary.rename(path)  # whole or absent: a reader never sees half a pid
    deadline = time.monotonic() + HOLD_LIMIT_S
    while not (folder / "release").exists() and time.monotonic() < deadline:
        time.sleep(0.05)


def embedded(run_dir: Path, pools: Sequence[str]) -> Cluster | None:
    """The first of these embedded (local-provider) pools that is up, as ``meshctl up``
    started it (its run file: GCS address and token file), or None."""
    from meshctl.pools import local

    for pool in pools:
        path = local.run_file(run_dir, pool)
        if not path.is_file():
            continue
        cluster = local.LocalCluster.load(path)
        if local.running(cluster):
            env = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": cluster.token_file,
                   "RAY_AUTH_TOKEN": None, "RAY_ADDRESS": None}  # fmt: skip
            return Cluster(cluster.gcs, f"embedded pool {pool} ({cluster.gcs})", env)
    return None


def remote(address: str) -> Cluster:
    """Any Ray cluster (``host:port`` of its GCS, or ``ray://host:10001``), with this meshctl
    package sent along; its token, if it asks one, from Ray's own variables or file."""
    import meshctl

    package = str(Path(meshctl.__file__).parent)
    runtime_env = {"py_modules": [package], "excludes": ["__pycache__", "*.pyc"]}
    return Cluster(address, f"Ray at {address}", {}, runtime_env)


@contextmanager
def _environment(env: Mapping[str, str | None]) -> Iterator[None]:
    saved = {name: os.environ.get(name) for name in env}
    _apply(env)
    try:
        yield
    finally:
        _apply(saved)


def _apply(env: Mapping[str, str | None]) -> None:
    for name, value in env.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@contextmanager
def connected(cluster: Cluster) -> Iterator[Any]:
    """Ray, connected to ``cluster`` as a driver for the sweep's tasks; disconnected after
    (the tasks still running then are cancelled with the job). Ray prints the cluster's
    error messages for the job (a worker that died, a task retried) on stdout whatever
    ``log_to_driver`` says: they go to stderr here, so stdout holds only the sweep's table
    or JSON."""
    with _environment(cluster.env), redirect_stdout(sys.stderr):
        try:
            import ray
        except ImportError:
            raise SweepError("Ray is not installed: pip install 'meshctl[ray]'") from None

        try:
            ray.init(
                address=cluster.address,
                runtime_env=dict(cluster.runtime_env) if cluster.runtime_env else None,
                logging_level=logging.WARNING,
                log_to_driver=False,
                configure_logging=False,
            )
        except Exception as err:  # Ray's connection errors share no base class
            raise SweepError(f"could not connect to {cluster.name}: {_first_line(err)}") from err
        try:
            yield ray
        finally:
            ray.shutdown()


def execute(
    cluster: Cluster,
    tasks: Sequence[Task],
    inputs: Inputs,
    retries: int,
    progress: Progress | None = None,
) -> tuple[list[Finished], list[Unfinished]]:
    """Every task on ``cluster``, gathered as they end; the ones that failed after their
    retries are returned with why, never raised."""
    finished: list[Finished] = []
    unfinished: list[Unfinished] = []
    with connected(cluster) as ray:
        shared = ray.put(inputs)
        remote_run = ray.remote(num_cpus=1, num_gpus=0, max_retries=retries)(run_one)
        by_ref = {}
        for task in tasks:
            name = f"sim {task.key.policies} {task.key.trace} seed {task.key.seed}"
            by_ref[remote_run.options(name=name).remote(task, shared)] = task
        pending = list(by_ref)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                key = by_ref[ref].key
                try:
                    out = ray.get(ref)
                except ray.exceptions.RayError as err:
                    unfinished.append(Unfinished(key, reason_of(err), attempts_of(err, retries)))
                else:
                    finished.append(Finished(key, out["report"], out["attempt"]))
            if progress is not None:
                progress(len(finished) + len(unfinished), len(unfinished))
    return finished, unfinished


def reason_of(err: BaseException) -> str:
    """One line: what went wrong in a task, its exception's own words (not Ray's wrapper and
    traceback)."""
    cause = getattr(err, "cause", None)
    if "RayTaskError" in type(err).__name__ and isinstance(cause, BaseException):
        return f"{type(cause).__name__}: {_first_line(cause)}"
    if type(err).__name__ in DIED:
        return f"its worker died ({type(err).__name__}): {_first_line(err)}"
    return f"{type(err).__name__}: {_first_line(err)}"


def attempts_of(err: BaseException, retries: int) -> int:
    """How many times a failed task ran: all its tries when its worker died each time, one
    when the run itself raised (not retried)."""
    return retries + 1 if type(err).__name__ in DIED else 1


def _first_line(err: BaseException) -> str:
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return lines[0][:300] if lines else type(err).__name__
