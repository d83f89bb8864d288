"""What a train job records of its progress, where it keeps its checkpoints, for the
controller (hang detection, ``meshctl jobs show``) to read.

Under ``<checkpoint uri>/.meshctl/``, written through ``meshctl.workload.storage``:

- ``progress-<attempt>.json``, written by the Ray Train controller (a ``UserCallback``) after
  reports (a checkpoint, a failure and the first report after one at once, others at most
  once a second, and what is left when the run finishes or is aborted): ``reports``,
  ``first_report_s``, and ``step`` and ``last_report_s`` of the latest report,
  ``checkpoints`` (``path``, ``step``, ``at_s``; the latest few), ``failures`` (worker
  errors: ``at_s``, ``error``, the ``step`` and ``last_report_s`` before it, the latest
  ``checkpoint`` then (``path``, ``step``: what Ray Train restarts the workers from, kept
  here since the list above rolls on), and ``resumed_s``, the first report after it, once
  Ray Train has restarted the workers).
- ``start-<attempt>-<ns>.json``, written by rank 0 each time the worker group (re)starts:
  ``at_s`` and the ``checkpoint`` path it resumed from (None: from scratch).
- ``end-<attempt>.json``, written by rank 0 when the loop returns: ``at_s``. The reports stop
  there while Ray Train shuts the workers down and the run ends, which can take a while on
  a loaded node; the controller does not take that quiet for a hang.

A step is the report's ``step`` metric when the loop reports one, else the report count.
Times are wall-clock seconds (``time.time()``), comparable across machines.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any

from meshctl.workload.storage import filesystem, write

if TYPE_CHECKING:
    import pyarrow.fs as pafs

KEEP_CHECKPOINTS = 20


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
        self._unwritten = False  # reports since the last write
        self._fs: tuple[pafs.FileSystem, str] | None = None

    def reported(self, metrics: dict[str, Any], checkpoint_path: str | None) -> None:
        doc = self.document
        doc["reports"] += 1
        step = metrics.get("step")
        doc["step"] = int(step) if isinstance(step, int | float) else doc["reports"]
        doc["last_report_s"] = time.time()
        doc["first_report_s"] = doc["first_report_s"] or doc["last_report_s"]
        resumed = [f for f in doc["failures"] if f.get("resumed_s") is None]
        for failure in resumed:
            failure["resumed_s"] = doc["last_report_s"]  # the workers are back
        if checkpoint_path is not None:
            entry = {"path": checkpoint_path, "step": doc["step"], "at_s": doc["last_report_s"]}
            doc["checkpoints"] = [*doc["checkpoints"], entry][-KEEP_CHECKPOINTS:]
        self._unwritten = True
        # A checkpoint or a recovery is written at once (what a recovery's record is made
        # of); other reports at most once a second, and the rest at the run's end (``flush``).
        if checkpoint_path is not None or resumed or time.monotonic() - self._written_s >= 1.0:
            self._write()

    def flush(self) -> None:
        """Write what the last reports changed and is not written yet: the run ends (or is
        aborted), and a record must not depend on whether it ended within a second of them."""
        if self._unwritten:
            self._write()

    def failed(self, error: str) -> None:
        doc = self.document
        doc["failures"].append(
            {
                "at_s": time.time(),
                "error": error[:500],
                "step": doc["step"],
                "last_report_s": doc["last_report_s"],
                "checkpoint": doc["checkpoints"][-1] if doc["checkpoints"] else None,
                "resumed_s": None,
            }
        )
        self._write()

    def _write(self) -> None:
        """Record; a storage error is reported, never allowed to fail the training run."""
        self._written_s = time.monotonic()
        self._unwritten = False
        try:
            if self._fs is None:
                self._fs = filesystem(self.uri, self.endpoint_url)
            fs, base = self._fs
            write(fs, base, f"progress-{self.attempt}.json", self.document)
        except Exception as err:
            print(f"meshctl train: could not record progress: {err}", file=sys.stderr)


def record_start(uri: str, endpoint_url: str | None, attempt: int, checkpoint: str | None) -> None:
    """Record a worker-group start."""
    document = {"attempt": attempt, "at_s": time.time(), "checkpoint": checkpoint}
    _record(uri, endpoint_url, f"start-{attempt}-{time.time_ns()}.json", document, "start")


def record_end(uri: str, endpoint_url: str | None, attempt: int) -> None:
    """Record that rank 0's loop returned."""
    _record(uri, endpoint_url, f"end-{attempt}.json", {"attempt": attempt, "at_s": time.time()},
            "end")  # fmt: skip


def _record(uri: str, endpoint_url: str | None, name: str, document: dict[str, Any],
            what: str) -> None:  # fmt: skip
    """Write one document; a storage error is reported, never fatal to the run."""
    try:
        fs, base = filesystem(uri, endpoint_url)
        write(fs, base, name, document)
    except Exception as err:
        print(f"meshctl train: could not record the {what}: {err}", file=sys.stderr)
