"""What a train job records of its progress, where it keeps its checkpoints, for the
controller (hang detection, ``meshctl jobs show``) to read.

Under ``<checkpoint uri>/.meshctl/``:

- ``progress-<attempt>.json``, written by the Ray Train controller (a ``UserCallback``) after
  reports: ``reports``, ``first_report_s``, and ``step`` and ``last_report_s`` of the latest
  report, ``checkpoints`` (``path``, ``step``, ``at_s``; the latest few), ``failures``
  (worker errors: ``at_s``, ``error``, the ``step`` and ``last_report_s`` before it, and
  ``resumed_s``, the first report after it, once Ray Train has restarted the workers).
- ``start-<attempt>-<ns>.json``, written by rank 0 each time the worker group (re)starts:
  ``at_s`` and the ``checkpoint`` path it resumed from (None: from scratch).

A step is the report's ``step`` metric when the loop reports one, else the report count.
Times are wall-clock seconds (``time.time()``), comparable across machines.
"""

from __future__ import annotations

import json
import sys
import time
import urllib.parse
from typing import Any

import pyarrow.fs as pafs

FOLDER = ".meshctl"
KEEP_CHECKPOINTS = 20


def filesystem(
    uri: str, endpoint_url: str | None = None, timeout_s: float | None = None
) -> tuple[pafs.FileSystem, str]:
    """The pyarrow filesystem and path for a checkpoint URI: ``file://`` or a path, ``s3://``
    (with an optional endpoint override), ``gs://``. ``timeout_s`` bounds each S3 request (the
    controller's reads and writes; never Ray Train's checkpoint uploads)."""
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


def write(fs: pafs.FileSystem, base: str, name: str, document: dict[str, Any]) -> None:
    """Write a JSON document under ``base/.meshctl/``; a reader never sees half of it (an
    object store's put is whole; a local file is written aside and moved into place)."""
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


class Recorder:
    """The progress of one attempt, as the Ray Train controller sees its reports."""

    def __init__(self, uri: str, endpoint_url: str | None, attempt: int) -> None:
        self.uri, self.endpoint_url, self.attempt = uri, endpoint_url, attempt
        self.document: dict[str, Any] = {
            "attempt": attempt,
            "reports": 0,
            "first_report_s": None,
            "step": None,
            "last_report_s": None,
            "checkpoints": [],
            "failures": [],
        }
        self._written_s = 0.0
        self._fs: tuple[pafs.FileSystem, str] | None = None

    def reported(self, metrics: dict[str, Any], checkpoint_path: str | None) -> None:
        doc = self.document
        doc["reports"] += 1
        step = metrics.get("step")
        doc["step"] = int(step) if isinstance(step, int | float) else doc["reports"]
        doc["last_report_s"] = time.time()
        doc["first_report_s"] = doc["first_report_s"] or doc["last_report_s"]
        for failure in doc["failures"]:
            if failure.get("resumed_s") is None:
                failure["resumed_s"] = doc["last_report_s"]  # the workers are back
        if checkpoint_path is not None:
            entry = {"path": checkpoint_path, "step": doc["step"], "at_s": doc["last_report_s"]}
            doc["checkpoints"] = [*doc["checkpoints"], entry][-KEEP_CHECKPOINTS:]
        if checkpoint_path is not None or time.monotonic() - self._written_s >= 1.0:
            self._write()

    def failed(self, error: str) -> None:
        doc = self.document
        doc["failures"].append(
            {
                "at_s": time.time(),
                "error": error[:500],
                "step": doc["step"],
                "last_report_s": doc["last_report_s"],
                "resumed_s": None,
            }
        )
        self._write()

    def _write(self) -> None:
        """Record; a storage error is reported, never allowed to fail the training run."""
        self._written_s = time.monotonic()
        try:
            if self._fs is None:
                self._fs = filesystem(self.uri, self.endpoint_url)
            fs, base = self._fs
            write(fs, base, f"progress-{self.attempt}.json", self.document)
        except Exception as err:
            print(f"meshctl train: could not record progress: {err}", file=sys.stderr)


def record_start(uri: str, endpoint_url: str | None, attempt: int, checkpoint: str | None) -> None:
    """Record a worker-group start; a storage error is reported, never fatal to the run."""
    document = {"attempt": attempt, "at_s": time.time(), "checkpoint": checkpoint}
    try:
        fs, base = filesystem(uri, endpoint_url)
        write(fs, base, f"start-{attempt}-{time.time_ns()}.json", document)
    except Exception as err:
        print(f"meshctl train: could not record the start: {err}", file=sys.stderr)
