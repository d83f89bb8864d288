"""Replacement nodes for a running train job, asked for by the run and nominated by the
controller, beside the job's checkpoints (``<checkpoint uri>/.meshctl/``, through
``meshctl.workload.storage``).

A train run's workers are pinned to the nodes meshctl placed them on. When Ray Train restarts
its workers after a failure and a node they were pinned to has died, starting them on the same
pins would wait for that node for ever. Instead the run (its Ray Train controller, which lives
with the driver) takes the nodes the controller, which keeps the mesh's books, nominates:

- ``nominate-<attempt>-<n>.json``, written by the run for its ``n``-th restart on lost nodes
  in the attempt: ``at_s``, ``lost`` (the node ids Ray reports dead), ``node_ids`` (the pins it
  has, one per node, in worker order) and ``workers_per_node``. A record, and a request: the
  controller nominates when its cycle sees the node dead, before it is asked or after; where
  the storage is a folder of its machine, an ask it has not seen wakes its loop at once
  (``asked_here``, read by the controller's watch every tenth of a second).
- ``nominated-<attempt>.json``, the controller's: ``node_ids``, every pin of the attempt as it
  stands (the living kept in place, each lost one replaced), and ``at_s``. Written again at
  each replacement.

The run starts its workers on the nominated pins once they name none of the nodes it lost.
Nothing within its wait leaves the pins as they were: the workers cannot start, and the
controller ends the attempt as for any job whose node died, or has already (the job resumes
from its latest checkpoint in a new attempt).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass

from meshctl.workload.storage import FOLDER, filesystem, local_folder, read, write

LOCAL_POLL_S = 0.05
REMOTE_POLL_S = 0.2
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


def nominate(uri: str, endpoint_url: str | None, attempt: int, node_ids: tuple[str, ...]) -> None:
    fs, base = filesystem(uri, endpoint_url)
    document = {"attempt": attempt, "node_ids": list(node_ids), "at_s": time.time()}
    write(fs, base, f"nominated-{attempt}.json", document)


def nominated(uri: str, endpoint_url: str | None, attempt: int) -> tuple[str, ...] | None:
    """The attempt's pins as the controller last nominated them; None before it has (or when
    what is there cannot be read)."""
    fs, base = filesystem(uri, endpoint_url)
    document = read(fs, f"{base.rstrip('/')}/{FOLDER}/nominated-{attempt}.json")
    ids = document.get("node_ids") if isinstance(document, dict) else None
    if not isinstance(ids, list) or not all(isinstance(i, str) and i for i in ids):
        return None
    return tuple(ids)


def requests(uri: str, endpoint_url: str | None, attempt: int) -> list[Ask]:
    """What the run of ``attempt`` asked for, oldest first."""
    import pyarrow.fs as pafs

    fs, base = filesystem(uri, endpoint_url)
    folder = f"{base.rstrip('/')}/{FOLDER}"
    try:
        infos = fs.get_file_info(pafs.FileSelector(folder, allow_not_found=True))
    except OSError:
        return []
    found = []
    for info in infos:
        match = _ASKED.match(info.base_name)
        if match is None or int(match[1]) != attempt:
            continue
        request = _request(read(fs, f"{folder}/{info.base_name}"))
        if request is not None:
            found.append(request)
    return sorted(found, key=lambda r: r.n)


def asked_here(uri: str, attempt: int) -> list[int] | None:
    """The numbers of the asks the run of ``attempt`` wrote, from a listing of the folder, when
    the job's storage is a folder of this machine: cheap enough to look often. None for remote
    storage."""
    folder = local_folder(uri)
    if folder is None:
        return None
    try:
        names = os.listdir(os.path.join(folder, FOLDER))
    except OSError:  # nothing written yet
        return []
    found = (_ASKED.match(name) for name in names)
    return sorted(int(m[2]) for m in found if m is not None and int(m[1]) == attempt)


def poll_interval(uri: str) -> float:
    """How often a run reads its nomination while it waits: a local file often, an object
    store's GET less so."""
    return LOCAL_POLL_S if local_folder(uri) is not None else REMOTE_POLL_S


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


def wait_for_nomination(
    uri: str,
    endpoint_url: str | None,
    attempt: int,
    fits: Callable[[tuple[str, ...]], bool],
    wait_s: float,
    *,
    poll_s: float | None = None,
    clock: Callable[[], float] = time.monotonic,
    pause: Callable[[float], None] = time.sleep,
) -> tuple[str, ...] | None:
    """The attempt's nominated pins once they ``fit`` (the run's test: one per node, none it
    lost), read every ``poll_s`` (by default ``poll_interval(uri)``); None when ``wait_s``
    passes first."""
    every = poll_s if poll_s is not None else poll_interval(uri)
    deadline = clock() + wait_s
    while True:
        pins = nominated(uri, endpoint_url, attempt)
        if pins is not None and fits(pins):
            return pins
        if clock() >= deadline:
            return None
        pause(every)
