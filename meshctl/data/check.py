"""A job's datasets checked before it is queued (``meshctl submit``; ``meshctl validate`` checks
the sizes a job gives, without reading any source).

Each location a node's cache can read (``sources``: an absolute folder, ``file://``,
``s3://``, ``gs://``) is listed at its source: nothing there is an error naming the file, the
line and the field. Any other location (``onprem:/data/x``) is a warning: no node caches it,
and the job must read it itself. A source that
cannot be reached from here (no credentials, no route, no answer in time) is a warning, not a
refusal: the machine that submits is not the nodes, whose agents may well reach it (an
instance role, a private endpoint); if they cannot either, the job reads from the source and
``meshctl nodes show`` names the failure. A dataset larger than every node cache of the mesh
(its listed size, else the ``size_gib`` it gives) can never be cached whole and is refused; a
mesh without caches sets no such limit.

The listing runs in a child process (``python -m meshctl.data.check``), each location on a
thread of its own, and the child ends at the deadline: a source that never answers (an S3
endpoint that accepts and says nothing, GCS looking for credentials) holds up neither the
command nor its exit (pyarrow's S3 client waits for requests in flight when a process ends).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from meshctl.errors import Failure
from meshctl.files import Loaded
from meshctl.model import Job, Mesh
from meshctl.model.job import Dataset
from meshctl.model.mesh import STORAGE_SCHEMES, LocalPool, RayPool
from meshctl.problems import Problem

TIMEOUT_S = 5.0  # for all of a job's locations together: a listing, not a fetch
START_S = 30.0  # the child's start-up (Python, pyarrow) on a loaded machine, beyond TIMEOUT_S
GIB = 1024**3
READ = "an absolute folder, file://, s3:// or gs://"  # what the node caches read (``sources``)
SKIP_FLAG = "--no-data-check"  # the submit flag that lists nothing (said in the errors)


class Outcome(StrEnum):
    FOUND = "found"  # listed: its size is known
    MISSING = "missing"  # the source answered: nothing there, or no files under it
    UNREACHABLE = "unreachable"  # an error, or no answer in time
    SLOW = "slow"  # it answered, but its listing did not end in time: size unknown


@dataclass(frozen=True, slots=True)
class Seen:
    """What the source said of one location."""

    outcome: Outcome
    size_bytes: int | None = None
    why: str = ""  # the source's words (missing, unreachable)


@dataclass(frozen=True, slots=True)
class Cache:
    """The largest node cache of a mesh, and where it is."""

    gib: float
    pool: str
    group: str


def checkable(location: str) -> bool:
    """Whether the node caches can read the location (``sources``): listed at submit."""
    scheme = re.match(r"^([a-z0-9+.-]+)://", location)
    return location.startswith("/") or (scheme is not None and scheme[1] in STORAGE_SCHEMES)


def largest_cache(mesh: Mesh) -> Cache | None:
    """The node group with the largest cache; None when no node has one."""
    groups = [
        Cache(group.cache_gib, pool.name, group.name)
        for pool in mesh.spec.pools
        if isinstance(pool, LocalPool | RayPool)
        for group in pool.nodes
        if group.cache_gib > 0
    ]
    return max(groups, key=lambda c: c.gib, default=None)


def check_job(
    loaded: Loaded, mesh: Mesh, listing: bool = True, timeout_s: float = TIMEOUT_S
) -> tuple[list[Problem], list[Problem]]:
    """The errors and the warnings of a job file's datasets: each location the caches can
    read listed at its source (unless not ``listing``), each size against the mesh's caches."""
    job = loaded.document
    if not isinstance(job, Job):
        return [], []
    chosen = {i: d for i, d in enumerate(job.spec.data) if listing and checkable(d.location)}
    seen = dict(zip(chosen, look(list(chosen.values()), timeout_s), strict=True)) if chosen else {}
    return problems(loaded, mesh, seen, timeout_s)


def problems(
    loaded: Loaded, mesh: Mesh, seen: Mapping[int, Seen], timeout_s: float = TIMEOUT_S
) -> tuple[list[Problem], list[Problem]]:
    """The errors and the warnings of a job file's datasets, from what their sources said
    (``seen``, by index in ``spec.data``; a dataset not there was not listed: its
    ``size_gib``, if any, is its size)."""
    job = loaded.document
    if not isinstance(job, Job):
        return [], []
    cache = largest_cache(mesh)
    errors: list[Problem] = []
    warnings: list[Problem] = []
    for i, dataset in enumerate(job.spec.data):
        if not checkable(dataset.location):
            said = f"{dataset.location} is not a location the node caches read ({READ}): "
            warnings.append(_problem(loaded, i, "location", said + "the job reads it itself"))
        found = seen.get(i)
        message = _source_problem(dataset, found, timeout_s)
        unsure = found is not None and found.outcome in (Outcome.SLOW, Outcome.UNREACHABLE)
        if message:
            (warnings if unsure else errors).append(_problem(loaded, i, "location", message))
        if cache is not None and (unsure or not message):  # unsure: its size_gib, if given
            errors += _size_problems(loaded, i, dataset, found, cache)
    return errors, warnings


def size_problems(loaded: Loaded, mesh: Mesh) -> list[Problem]:
    """A job file's datasets whose ``size_gib`` no node cache of the mesh can hold (no I/O)."""
    return problems(loaded, mesh, {})[0]


def _source_problem(dataset: Dataset, seen: Seen | None, timeout_s: float) -> str:
    where = dataset.location
    if seen is None or seen.outcome is Outcome.FOUND:
        return ""
    if seen.outcome is Outcome.MISSING:
        return f"expected files at {where}, got {seen.why}"
    if seen.outcome is Outcome.SLOW:
        return f"{where} was still being listed after {timeout_s:g} s: its size there is unchecked"
    return (
        f"{where} could not be reached from here: {seen.why}; queued all the same (the nodes' "
        f"agents fetch it; {SKIP_FLAG} skips this listing)"
    )


def _size_problems(
    loaded: Loaded, i: int, dataset: Dataset, seen: Seen | None, cache: Cache
) -> list[Problem]:
    listed = seen.size_bytes if seen is not None else None
    gib = listed / GIB if listed is not None else dataset.size_gib
    if gib is None or gib <= cache.gib:
        return []
    largest = f"the largest node cache (pool {cache.pool}, node group {cache.group})"
    at = f" listed at {dataset.location}" if listed is not None else ""
    message = f"expected at most {_gib(cache.gib)} GiB, {largest}, got {_gib(gib)} GiB{at}"
    return [_problem(loaded, i, "size_gib" if listed is None else "location", message)]


def _problem(loaded: Loaded, i: int, key: str, message: str) -> Problem:
    line = loaded.line_of("spec", "data", i, key)
    return Problem(loaded.path, line, f"spec.data[{i}].{key}", message)


def _gib(gib: float) -> str:
    """A size in GiB as a person reads it: ``2048``, ``1.5``, ``0.00195``."""
    return f"{gib:.2f}".rstrip("0").rstrip(".") if gib >= 1 else f"{gib:.3g}"


# --- listing, in a child process --------------------------------------------------------------


def look(datasets: Sequence[Dataset], timeout_s: float = TIMEOUT_S) -> list[Seen]:
    """What each dataset's source says of it, within ``timeout_s`` for them all."""
    request = {
        "timeout_s": timeout_s,
        "datasets": [{"location": d.location, "endpoint_url": d.endpoint_url} for d in datasets],
    }
    command = [sys.executable, "-m", "meshctl.data.check"]
    try:
        done = subprocess.run(
            command, input=json.dumps(request), capture_output=True, text=True,
            timeout=timeout_s + START_S,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return [Seen(Outcome.UNREACHABLE, why=f"no answer within {timeout_s:g} s")] * len(datasets)
    except OSError as err:
        raise Failure(f"the data check did not run: {err} ({SKIP_FLAG} skips it)") from None
    try:  # its last line: what a library printed on the way is not the answer
        rows = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else None
    except (ValueError, IndexError):
        rows = None
    if not isinstance(rows, list) or len(rows) != len(datasets):
        said = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        raise Failure(f"the data check did not run: {said} ({SKIP_FLAG} skips it)")
    return [Seen(Outcome(x["outcome"]), x["size_bytes"], str(x["why"])) for x in rows]


class _Stage:
    """How far the listing of one location went, written by its thread."""

    def __init__(self) -> None:
        self.reached = False
        self.seen: Seen | None = None


def _look_one(location: str, endpoint_url: str | None, timeout_s: float, stage: _Stage) -> None:
    from meshctl.data.sources import Source, SourceError, SourceMissing

    try:
        source = Source(location, endpoint_url, timeout_s)
        top = source.found()
        stage.reached = True
        stage.seen = Seen(Outcome.FOUND, source.listing(top).size_bytes)
    except SourceMissing as err:
        found = "a folder with no files" if err.empty else "nothing there"
        stage.seen = Seen(Outcome.MISSING, why=found)
    except SourceError as err:  # its words, less the location they start with
        stage.seen = Seen(Outcome.UNREACHABLE, why=str(err).removeprefix(f"{location}: "))


def _look_here(datasets: Sequence[Mapping[str, str | None]], timeout_s: float) -> list[Seen]:
    """Every location listed on a thread of its own; what is not done at the deadline is
    slow (it answered) or unreachable (it did not). The threads are left running."""
    stages = [_Stage() for _ in datasets]
    threads = [
        threading.Thread(
            target=_look_one,
            args=(str(d["location"]), d.get("endpoint_url"), timeout_s, stage),
            daemon=True,
        )
        for d, stage in zip(datasets, stages, strict=True)
    ]
    deadline = time.monotonic() + timeout_s
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    late = f"no answer within {timeout_s:g} s"
    return [
        stage.seen or Seen(Outcome.SLOW if stage.reached else Outcome.UNREACHABLE, why=late)
        for stage in stages
    ]


def main() -> None:
    """The child: a request as JSON on stdin, what was seen as JSON on stdout. What the
    listing imports (pyarrow's file systems: a second or more on a loaded machine) is imported
    before the deadline starts, so the deadline is the sources' alone. It ends without
    waiting for what is still in flight (``os._exit``)."""
    import meshctl.data.sources  # noqa: F401  # pyarrow: start-up (START_S), not the deadline's

    request = json.loads(sys.stdin.read())
    seen = _look_here(request["datasets"], float(request["timeout_s"]))
    rows = [{"outcome": s.outcome.value, "size_bytes": s.size_bytes, "why": s.why} for s in seen]
    sys.stdout.write("\n" + json.dumps(rows) + "\n")
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
