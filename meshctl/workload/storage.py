"""Small JSON documents beside a job's checkpoints, through pyarrow's filesystems (the ones
Ray Train writes checkpoints with): a local or shared directory, S3 (with an endpoint
override), GCS.

Used by what runs inside jobs (``meshctl.workload.train``, ``meshctl.workload``) and by the
controller's side of the storage (``meshctl.pools.checkpoints``); it knows nothing of either.
pyarrow is imported when a filesystem is first made, not with this module: the controller's
watch reads a local folder's listing (``local_folder``) every tenth of a second without it.
"""

from __future__ import annotations

import json
import time
import urllib.parse
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow.fs as pafs

FOLDER = ".meshctl"  # under a job's checkpoint URI: what meshctl writes there


def filesystem(
    uri: str, endpoint_url: str | None = None, timeout_s: float | None = None
) -> tuple[pafs.FileSystem, str]:
    """The pyarrow filesystem and path for a checkpoint URI: ``file://`` or a path, ``s3://``
    (with an optional endpoint override), ``gs://``. ``timeout_s`` bounds each S3 request (the
    controller's reads and writes; never Ray Train's checkpoint uploads)."""
    import pyarrow.fs as pafs

    if "://" not in uri:
        return pafs.LocalFileSystem(), uri
    if uri.startswith("s3://"):
        options: dict[str, Any] = {}
        if endpoint_url:
            parsed = urllib.parse.urlsplit(endpoint_url)
            options.update(
                endpoint_override=parsed.netloc or parsed.path, scheme=parsed.scheme or "https"
            )
        if timeout_s is not None:
            options.update(connect_timeout=timeout_s, request_timeout=timeout_s)
        return pafs.S3FileSystem(**options), uri.removeprefix("s3://")
    fs, path = pafs.FileSystem.from_uri(uri)
    return fs, path


def prepare() -> None:
    """Import pyarrow's filesystems now (about 0.1 s here), off the path of the first read or
    write that needs them: the controller's watch does, once a train job runs, so that its first
    nomination does not wait for the import while the run waits for it."""
    import pyarrow.fs  # noqa: F401


def local_folder(uri: str) -> str | None:
    """The folder of this machine a checkpoint URI names (``file://`` or a plain path), or None
    for remote storage (S3, GCS)."""
    if "://" not in uri:
        return uri
    if uri.startswith("file://"):
        return urllib.parse.unquote(urllib.parse.urlsplit(uri).path)
    return None


def write(fs: pafs.FileSystem, base: str, name: str, document: dict[str, Any]) -> None:
    """Write a JSON document under ``base/.meshctl/``; a reader never sees half of it (an
    object store's put is whole; a local file is written aside and moved into place)."""
    import pyarrow.fs as pafs

    folder = f"{base.rstrip('/')}/{FOLDER}"
    fs.create_dir(folder, recursive=True)
    final = f"{folder}/{name}"
    target = f"{folder}/.{name}.{time.time_ns()}" if isinstance(fs, pafs.LocalFileSystem) else final
    with fs.open_output_stream(target) as out:
        out.write(json.dumps(document, sort_keys=True).encode("utf-8"))
    if target != final:
        fs.move(target, final)


def read(fs: pafs.FileSystem, path: str) -> Any:
    """A JSON document, or None when it is missing or unreadable."""
    try:
        with fs.open_input_stream(path) as stream:
            return json.loads(stream.read())
    except Exception:  # missing, half-written, unreachable: nothing known
        return None
