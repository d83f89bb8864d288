"""The controller's side of checkpoint requests: write one where the job keeps its
checkpoints (a local or shared directory, or S3). The format and the job's side are in
``meshctl.workload``."""

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
    region: str | None = None,
) -> str:
    """Write ``request`` for the job whose checkpoints are at ``checkpoint_uri``; returns
    where. Raises ``OSError`` (a directory) or the SDK's error (S3)."""
    where = request_uri(checkpoint_uri)
    body = json.dumps(dict(request), sort_keys=True)
    if where.startswith("s3://"):
        import boto3  # only where checkpoints live in S3

        bucket, _, key = where.removeprefix("s3://").partition("/")
        client = boto3.client("s3", endpoint_url=endpoint_url, region_name=region)
        client.put_object(Bucket=bucket, Key=key, Body=body.encode("utf-8"))
        return where
    path = Path(where.removeprefix("file://"))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(body, encoding="utf-8")
    tmp.replace(path)  # the job never reads half of it
    return where
