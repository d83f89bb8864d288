"""The controller's side of a job's checkpoint storage (a local or shared directory, or S3):
write a checkpoint request (the format and the job's side are in ``meshctl.workload``), and
read what a train job recorded of its progress (written by ``meshctl.train.progress``)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from meshctl.workload import request_uri


def request_checkpoint(
    checkpoint_uri: str,
    request: Mapping[str, Any],
    endpoint_url: str | None = None,
) -> str:
    """Write ``request`` for the job whose checkpoints are at ``checkpoint_uri``; returns
    where. Raises ``OSError`` (a directory) or the SDK's error (S3)."""
    where = request_uri(checkpoint_uri)
    body = json.dumps(dict(request), sort_keys=True)
    if where.startswith("s3://"):
        bucket, key = _bucket_key(where)
        _s3(endpoint_url).put_object(Bucket=bucket, Key=key, Body=body.encode("utf-8"))
        return where
    path = Path(where.removeprefix("file://"))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(body, encoding="utf-8")
    tmp.replace(path)  # the job never reads half of it
    return where


def read_progress(
    checkpoint_uri: str, attempt: int, endpoint_url: str | None = None
) -> dict[str, Any] | None:
    """The progress a train job's attempt recorded (``meshctl.train.progress``), or None."""
    found = _read_json(
        f"{checkpoint_uri.rstrip('/')}/.meshctl/progress-{attempt}.json", endpoint_url
    )
    return found if isinstance(found, dict) else None


def read_history(checkpoint_uri: str, endpoint_url: str | None = None) -> dict[str, Any]:
    """Every attempt's progress and every worker-group start a train job recorded:
    ``{"progress": {attempt: doc}, "starts": [doc, ...]}`` (starts in time order)."""
    folder = f"{checkpoint_uri.rstrip('/')}/.meshctl"
    progress: dict[int, dict[str, Any]] = {}
    starts: list[dict[str, Any]] = []
    for name in _list(folder, endpoint_url):
        doc = _read_json(f"{folder}/{name}", endpoint_url)
        if not isinstance(doc, dict):
            continue
        if name.startswith("progress-"):
            progress[int(doc.get("attempt", 0))] = doc
        elif name.startswith("start-"):
            starts.append(doc)
    starts.sort(key=lambda d: float(d.get("at_s") or 0))
    return {"progress": progress, "starts": starts}


def _read_json(uri: str, endpoint_url: str | None) -> Any:
    try:
        if uri.startswith("s3://"):
            bucket, key = _bucket_key(uri)
            body = _s3(endpoint_url).get_object(Bucket=bucket, Key=key)["Body"].read()
            return json.loads(body)
        return json.loads(Path(uri.removeprefix("file://")).read_text(encoding="utf-8"))
    except Exception:  # missing, half-written, unreachable: nothing known
        return None


def _list(folder: str, endpoint_url: str | None) -> list[str]:
    try:
        if folder.startswith("s3://"):
            bucket, prefix = _bucket_key(folder + "/")
            pages = (
                _s3(endpoint_url)
                .get_paginator("list_objects_v2")
                .paginate(Bucket=bucket, Prefix=prefix)
            )
            return [o["Key"][len(prefix) :] for page in pages for o in page.get("Contents", [])]
        return sorted(p.name for p in Path(folder.removeprefix("file://")).iterdir())
    except Exception:
        return []


def _bucket_key(uri: str) -> tuple[str, str]:
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    return bucket, key


def _s3(endpoint_url: str | None) -> Any:
    import boto3  # only where checkpoints live in S3

    return boto3.client("s3", endpoint_url=endpoint_url)
