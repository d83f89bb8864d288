"""The controller's side of a job's checkpoint storage (a local or shared directory, S3, GCS):
write a checkpoint request (the format and the job's side are in ``meshctl.workload``), and
read what a train job recorded of its progress (written by ``meshctl.workload.train.progress``).

Local paths are read and written directly; object stores through pyarrow's filesystems (the
ones Ray Train writes checkpoints with; ``meshctl.workload.storage``), each request bounded by
``TIMEOUT_S`` so a storage that does not answer slows the controller's cycle by seconds, not
minutes.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from meshctl.workload import request_uri

TIMEOUT_S = 5.0


def request_checkpoint(
    checkpoint_uri: str, request: Mapping[str, Any], endpoint_url: str | None = None
) -> str:
    """Write ``request`` for the job whose checkpoints are at ``checkpoint_uri``; returns
    where. Raises ``OSError`` or the storage's error."""
    where = request_uri(checkpoint_uri)
    if _remote(where):
        from meshctl.workload import storage

        fs, base = storage.filesystem(checkpoint_uri, endpoint_url, TIMEOUT_S)
        name = where.rsplit("/", 1)[1]
        storage.write(fs, base, name, dict(request))
        return where
    path = Path(where.removeprefix("file://"))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(dict(request), sort_keys=True), encoding="utf-8")
    tmp.replace(path)  # the job never reads half of it
    return where


def read_progress(
    checkpoint_uri: str, attempt: int, endpoint_url: str | None = None
) -> dict[str, Any] | None:
    """The progress a train job's attempt recorded (``meshctl.workload.train.progress``), or None;
    ``loop_ended_s`` in it once rank 0's loop has returned."""
    names = [f"progress-{attempt}.json", f"end-{attempt}.json"]
    found = _documents(checkpoint_uri, endpoint_url, names)
    doc, end = found.get(names[0]), found.get(names[1])
    if not isinstance(doc, dict):
        return None
    if isinstance(end, dict) and end.get("at_s") is not None:
        return {**doc, "loop_ended_s": end["at_s"]}
    return doc


def read_history(checkpoint_uri: str, endpoint_url: str | None = None) -> dict[str, Any]:
    """Every attempt's progress, every worker-group start and every export a train job
    recorded: ``{"progress": {attempt: doc}, "starts": [doc, ...], "exports": {attempt:
    doc}}`` (starts in time order)."""
    progress: dict[int, dict[str, Any]] = {}
    exports: dict[int, dict[str, Any]] = {}
    starts: list[dict[str, Any]] = []
    for name, doc in _documents(checkpoint_uri, endpoint_url, None).items():
        if not isinstance(doc, dict):
            continue
        if name.startswith("progress-"):
            progress[int(doc.get("attempt", 0))] = doc
        elif name.startswith("export-"):
            exports[int(doc.get("attempt", 0))] = doc
        elif name.startswith("start-"):
            starts.append(doc)
    starts.sort(key=lambda d: float(d.get("at_s") or 0))
    return {"progress": progress, "starts": starts, "exports": exports}


def _remote(uri: str) -> bool:
    return "://" in uri and not uri.startswith("file://")


def _documents(
    checkpoint_uri: str, endpoint_url: str | None, names: list[str] | None
) -> dict[str, Any]:
    """The JSON documents under ``<checkpoint uri>/.meshctl/`` (these names, or all), by
    name; what is missing or unreadable is left out."""
    if not _remote(checkpoint_uri):
        folder = Path(checkpoint_uri.removeprefix("file://")) / ".meshctl"
        try:
            listed = names or sorted(p.name for p in folder.iterdir() if p.suffix == ".json")
        except OSError:
            return {}
        found = {}
        for name in listed:
            try:
                found[name] = json.loads((folder / name).read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
        return found
    from pyarrow.fs import FileSelector

    from meshctl.workload import storage

    try:
        fs, base = storage.filesystem(checkpoint_uri, endpoint_url, TIMEOUT_S)
        remote = f"{base.rstrip('/')}/{storage.FOLDER}"
        if names is None:
            infos = fs.get_file_info(FileSelector(remote, allow_not_found=True))
            names = sorted(i.base_name for i in infos if i.base_name.endswith(".json"))
    except Exception:  # unreachable: nothing known this time
        return {}
    read = {name: storage.read(fs, f"{remote}/{name}") for name in names}
    return {name: doc for name, doc in read.items() if doc is not None}
