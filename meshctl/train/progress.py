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
import time
from typing import Any

import pyarrow.fs as pafs

FOLDER = ".meshctl"
KEEP_CHECKPOINTS = 20


def filesystem(uri: str, endpoint_url: str | None = None) -> tuple[pafs.FileSystem, str]:
    """The pyarrow filesystem and path for a checkpoint URI (``file://``, a path, ``s3://``
    with an optional endpoint override)."""
    if uri.startswith("s3://") and endpoint_url:
        scheme, _, host = endpoint_url.rpartition("://")
        s3 = pafs.S3FileSystem(endpoint_override=host, scheme=scheme or "https")
        return s3, uri.removeprefix("s3://")
    if "://" not in uri:
        return pafs.LocalFileSystem(), uri
    fs, path = pafs.FileSystem.from_uri(uri)
    return fs, path


def write(fs: pafs.FileSystem, base: str, name: str, document: dict[str, Any]) -> None:
    folder = f"{base.rstrip('/')}/{FOLDER}"
    fs.create_dir(folder, recursive=True)
    with fs.open_output_stream(f"{folder}/{name}") as out:
        out.write(json.dumps(document, sort_keys=True).encode("utf-8"))


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
        fs, base = filesystem(self.uri, self.endpoint_url)
        write(fs, base, f"progress-{self.attempt}.json", self.document)
        self._written_s = time.monotonic()


def record_start(uri: str, endpoint_url: str | None, attempt: int, checkpoint: str | None) -> None:
    fs, base = filesystem(uri, endpoint_url)
    now = time.time()
    document = {"attempt": attempt, "at_s": now, "checkpoint": checkpoint}
    write(fs, base, f"start-{attempt}-{time.time_ns()}.json", document)
