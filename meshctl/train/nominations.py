"""Replacement nodes for a running train job, asked of the controller and answered by it,
beside the job's checkpoints (``<checkpoint uri>/.meshctl/``, through ``meshctl.storage``).

A train run's workers are pinned to the nodes meshctl placed them on. When Ray Train restarts
its workers after a failure and a node they were pinned to has died, starting them on the same
pins would wait for that node for ever. Instead the run (its Ray Train controller, which lives
with the driver) asks which nodes to start on, and the controller, which keeps the mesh's
books, nominates them:

- ``nominate-<attempt>-<n>.json``, written by the run for its ``n``-th such restart in the
  attempt: ``at_s``, ``lost`` (the node ids that died), ``node_ids`` (the pins it has, one per
  node, in worker order) and ``workers_per_node``;
- ``nominated-<attempt>-<n>.json``, the controller's answer: ``node_ids`` (every pin, the
  living ones kept in place), or ``refused`` with the reason.

An answer that does not come within the run's wait, or a refusal, leaves the pins as they
were: the workers cannot start, and the controller ends the attempt as it does for any job
whose node died (the job resumes from its latest checkpoint in a new attempt).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass

from meshctl.storage import FOLDER, filesystem, read, write

_ASKED = re.compile(r"nominate-(\d+)-(\d+)\.json$")


@dataclass(frozen=True, slots=True)
class Ask:
    """What a run asked for its ``n``-th restart on lost nodes in ``attempt``."""

    attempt: int
    n: int
    at_s: float
    lost: tuple[str, ...]
    node_ids: tuple[str, ...]
    workers_per_node: int


@dataclass(frozen=True, slots=True)
class Answer:
    """The controller's answer: the pins to start on, or why there are none."""

    node_ids: tuple[str, ...] = ()
    refused: str | None = None


def ask(uri: str, endpoint_url: str | None, request: Ask) -> None:
    fs, base = filesystem(uri, endpoint_url)
    document = {
        "attempt": request.attempt,
        "n": request.n,
        "at_s": request.at_s,
        "lost": list(request.lost),
        "node_ids": list(request.node_ids),
        "workers_per_node": request.workers_per_node,
    }
    write(fs, base, f"nominate-{request.attempt}-{request.n}.json", document)


def answer(uri: str, endpoint_url: str | None, attempt: int, n: int, given: Answer) -> None:
    fs, base = filesystem(uri, endpoint_url)
    document = {"node_ids": list(given.node_ids), "refused": given.refused}
    write(fs, base, f"nominated-{attempt}-{n}.json", document)


def answered(uri: str, endpoint_url: str | None, attempt: int, n: int) -> Answer | None:
    fs, base = filesystem(uri, endpoint_url)
    document = read(fs, f"{base.rstrip('/')}/{FOLDER}/nominated-{attempt}-{n}.json")
    if not isinstance(document, dict):
        return None
    refused = document.get("refused")
    ids = document.get("node_ids") or []
    if refused is None and not (isinstance(ids, list) and all(isinstance(i, str) for i in ids)):
        return Answer(refused="an answer without node ids")
    return Answer(tuple(ids), str(refused) if refused is not None else None)


def unanswered(uri: str, endpoint_url: str | None, attempt: int) -> list[Ask]:
    """The requests of ``attempt`` the controller has not answered yet, oldest first."""
    import pyarrow.fs as pafs

    fs, base = filesystem(uri, endpoint_url)
    folder = f"{base.rstrip('/')}/{FOLDER}"
    try:
        infos = fs.get_file_info(pafs.FileSelector(folder, allow_not_found=True))
    except OSError:
        return []
    names = {info.base_name for info in infos}
    found = []
    for name in sorted(names):
        match = _ASKED.match(name)
        if match is None or int(match[1]) != attempt or f"nominated-{name[9:]}" in names:
            continue
        request = _request(read(fs, f"{folder}/{name}"))
        if request is not None:
            found.append(request)
    return sorted(found, key=lambda r: r.n)


def _request(document: object) -> Ask | None:
    if not isinstance(document, dict):
        return None
    try:
        return Ask(
            int(document["attempt"]),
            int(document["n"]),
            float(document["at_s"]),
            tuple(str(i) for i in document["lost"]),
            tuple(str(i) for i in document["node_ids"]),
            int(document["workers_per_node"]),
        )
    except (KeyError, TypeError, ValueError):
        return None


def wait_for_answer(
    uri: str,
    endpoint_url: str | None,
    attempt: int,
    n: int,
    wait_s: float,
    *,
    poll_s: float = 0.2,
    clock: Callable[[], float] = time.monotonic,
    pause: Callable[[float], None] = time.sleep,
) -> Answer | None:
    """The answer to request ``n``, read every ``poll_s`` until it comes or ``wait_s`` passes."""
    deadline = clock() + wait_s
    while True:
        given = answered(uri, endpoint_url, attempt, n)
        if given is not None or clock() >= deadline:
            return given
        pause(poll_s)
