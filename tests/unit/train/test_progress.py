"""What a train job records of its progress, and how the controller reads it back."""

from __future__ import annotations

from pathlib import Path

import pytest

from meshctl.pools.checkpoints import read_history, read_progress
from meshctl.workload.train.progress import Recorder, record_end, record_start

pytestmark = pytest.mark.unit


def test_reports_checkpoints_failures_and_starts_round_trip(tmp_path: Path) -> None:
    uri = f"file://{tmp_path}/job"
    record_start(uri, None, 1, None)
    recorder = Recorder(uri, None, 1)
    recorder.reported({"step": 0, "loss": 1.0}, None)
    recorder.reported({"step": 9, "loss": 0.5}, "/ck/9")
    recorder.failed("worker 1: died")
    record_start(uri, None, 1, "/ck/9")
    recorder.reported({"loss": 0.4}, None)  # no step metric: the report count stands in
    recorder.reported({"step": 10, "loss": 0.4}, "/ck/10")
    seen = read_progress(uri, 1)
    assert seen is not None
    assert (seen["reports"], seen["step"]) == (4, 10)
    assert [c["step"] for c in seen["checkpoints"]] == [9, 10]
    [failure] = seen["failures"]
    assert (failure["step"], failure["error"]) == (9, "worker 1: died")
    assert (failure["checkpoint"]["path"], failure["checkpoint"]["step"]) == ("/ck/9", 9)
    assert failure["resumed_s"] >= failure["at_s"]  # the next report: the workers are back
    history = read_history(uri)
    assert [s["checkpoint"] for s in history["starts"]] == [None, "/ck/9"]
    assert list(history["progress"]) == [1]
    assert read_progress(uri, 2) is None
    assert "loop_ended_s" not in seen


def test_the_loop_s_end_is_read_with_its_attempt_s_progress(tmp_path: Path) -> None:
    uri = f"file://{tmp_path}/job"
    record_end(uri, None, 1)  # an end alone is no progress
    assert read_progress(uri, 1) is None
    Recorder(uri, None, 1).reported({"step": 0}, "/ck/0")
    seen = read_progress(uri, 1)
    assert seen is not None
    assert isinstance(seen["loop_ended_s"], float)
    record_start(uri, None, 2, "/ck/0")
    Recorder(uri, None, 2).reported({"step": 1}, None)
    assert "loop_ended_s" not in (read_progress(uri, 2) or {})  # attempt 1's end is its own


def test_the_first_report_after_a_failure_is_written_at_once(tmp_path: Path) -> None:
    """A recovery's record is the failure and the report that ends it: both written as they
    happen, whether or not the run goes on for another second (a run that ends right after
    its recovery kept a failure that never resumed)."""
    uri = f"file://{tmp_path}/job"
    recorder = Recorder(uri, None, 1)
    recorder.reported({"step": 9}, "/ck/9")
    recorder.failed("worker 0: died")
    recorder.reported({"step": 10}, None)  # within a second of the failure's write
    seen = read_progress(uri, 1)
    assert seen is not None
    [failure] = seen["failures"]
    assert failure["resumed_s"] is not None
    assert seen["step"] == 10


def test_what_the_last_reports_changed_is_written_when_the_run_ends(tmp_path: Path) -> None:
    uri = f"file://{tmp_path}/job"
    recorder = Recorder(uri, None, 1)
    recorder.reported({"step": 0}, "/ck/0")
    recorder.reported({"step": 1}, None)  # within a second: not written yet
    recorder.reported({"step": 2}, None)
    recorder.flush()  # the run finished, or was aborted
    seen = read_progress(uri, 1)
    assert seen is not None
    assert (seen["step"], seen["reports"]) == (2, 3)
    written = (tmp_path / "job" / ".meshctl" / "progress-1.json").stat().st_mtime_ns
    recorder.flush()  # nothing new: not written again
    assert (tmp_path / "job" / ".meshctl" / "progress-1.json").stat().st_mtime_ns == written
