"""A job's exit, recorded in its driver log (``meshctl/workload/exits.py``): a job that ended
just before its head restarted (and forgot it) keeps its outcome; it is not run again. The wrapper
runs under the same shell Ray runs entrypoints with (``/bin/sh -c``)."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest

from meshctl.controller.deciding.decide import decide
from meshctl.controller.deciding.step import Rules
from meshctl.controller.logs import read_copy
from meshctl.pools import driverlogs
from meshctl.state.records import AttemptRecord, JobRecord, JobState
from meshctl.workload.exits import exit_status, without_exit_line, wrapped

from .test_decide import MESH, attempt, job, moves, world
from .test_loop import running_with_log

pytestmark = pytest.mark.unit

# (name, entrypoint, exit status Ray sees, what the log ends with, status the line records)
WRAPPED = [
    ("success", "echo hi", 0, b"hi\n[meshctl: the job exited 0]\n", 0),
    ("its own failure", "echo boom >&2; false", 1, b"boom\n[meshctl: the job exited 1]\n", 1),
    ("a trailing comment", "echo hi # no exit?", 0, b"hi\n[meshctl: the job exited 0]\n", 0),
    ("a here-document", "cat <<EOF\nin\nEOF", 0, b"in\n[meshctl: the job exited 0]\n", 0),
    ("no newline at the end", "printf hi", 0, b"hi[meshctl: the job exited 0]\n", 0),
    ("killed", "sh -c 'kill -9 $$'", 137, b"[meshctl: the job exited 137]\n", 137),
    ("an exit of its own", "echo hi; exit 3", 3, b"hi\n[meshctl: the job exited 3]\n", 3),
    ("quotes", "echo \"it's\" 'a' \"$((1+1))\"", 0, b"it's a 2\n[meshctl: the job exited 0]\n", 0),
]  # fmt: skip


@pytest.mark.parametrize(
    ("entrypoint", "code", "ends", "recorded"),
    [row[1:] for row in WRAPPED],
    ids=[row[0] for row in WRAPPED],
)
def test_the_wrapped_entrypoint_keeps_its_status_and_records_it_last(
    entrypoint: str, code: int, ends: bytes, recorded: int | None
) -> None:
    ran = subprocess.run(  # as Ray runs it: its output and errors into one log
        ["/bin/sh", "-c", wrapped(entrypoint)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        timeout=30,
        check=False,
    )
    log = ran.stdout
    assert ran.returncode == code
    assert log.endswith(ends)
    assert exit_status(log) == recorded


def test_ray_s_message_loses_the_line_so_a_failure_ends_with_the_job_s_words() -> None:
    said = "Job entrypoint command failed with exit code 1, last available logs:\nboom\n"
    assert without_exit_line(said + "[meshctl: the job exited 1]\n") == said
    ray_s_line = "Running entrypoint for job meshctl-a-1: sh -c 'boom'; meshctl_exit=$?\n"
    assert without_exit_line(said + "[meshctl: the job exited 1]\n" + ray_s_line) == said
    assert exit_status(b"the job exited 0 said the job\n") is None  # only meshctl's line
    shutdown = b"[meshctl: the job exited 0]\nPlacementGroupCleaner: ConnectionError\n"
    assert exit_status(shutdown) == 0  # what a driver's shutdown printed after it


# (name, the status its log records, the job's moves)
FORGOTTEN = [
    ("exited 0: succeeded, not run again", 0, [("a", "succeeded")]),
    ("exited 1: its own failure", 1, [("a", "failed")]),
    ("killed: evicted and requeued", 137, [("a", "evicted"), ("a", "requeued")]),
    ("no record: lost, requeued", None, [("a", "evicted"), ("a", "requeued")]),
]


@pytest.mark.parametrize(
    ("status", "moved"), [row[1:] for row in FORGOTTEN], ids=[row[0] for row in FORGOTTEN]
)
def test_a_job_its_pool_forgot_keeps_the_outcome_its_log_records(
    status: int | None, moved: list[tuple[str, str]]
) -> None:
    view = job("a", state=JobState.RUNNING, attempt=attempt("a", state="running"))
    exits = {} if status is None else {"a-1": status}
    step = decide(world(view, exits=exits), Rules(MESH, {}, None))
    assert moves(step) == moved


def test_a_job_that_ended_before_its_head_restarted_is_done_not_run_again(
    tmp_path: Path,
) -> None:
    """The cycle that sees the job gone reads its log to the end first (the copier had not
    read its last line yet)."""
    store, pool, loop, record, sid = running_with_log(tmp_path, b"working\n")
    pool.logs[sid] += b"done\n[meshctl: the job exited 0]\n"
    pool.jobs.clear()  # its head restarted: Ray knows no job
    loop.cycle()
    assert store.get(JobRecord, record.id).state is JobState.SUCCEEDED  # type: ignore[union-attr]
    assert [a.state for a in store.list(AttemptRecord)] == ["succeeded"]
    assert pool.submitted == [sid]
    assert read_copy(tmp_path, record.id, 1) == pool.logs[sid]


def test_a_driver_log_is_found_in_an_earlier_session_or_kept_from_a_stopped_cluster(
    tmp_path: Path,
) -> None:
    """A head that restarted began a new session; a cluster stopped (its temp folder gone)
    left its driver logs in the kept folder."""
    temp, kept = tmp_path / "temp", tmp_path / "run" / "logs" / "onprem-drivers"
    old = temp / "session_2026-12-07_09-00-00_1" / "logs"
    new = temp / "session_2026-12-07_09-05-00_2" / "logs"
    for folder in (old, new):
        folder.mkdir(parents=True)
    (temp / "session_latest").symlink_to(new.parent)
    (old / "job-driver-meshctl-a-1.log").write_bytes(b"[meshctl: the job exited 0]\n")
    (new / "job-driver-meshctl-b-1.log").write_bytes(b"running\n")
    assert (
        driverlogs.find(str(temp), str(kept), "meshctl-a-1") == old / "job-driver-meshctl-a-1.log"
    )
    assert driverlogs.find(str(temp), str(kept), "meshctl-c-1") is None

    assert driverlogs.keep(str(temp), kept) == 2  # the cluster stops: its temp folder goes
    shutil.rmtree(temp)
    found = driverlogs.find(str(temp), str(kept), "meshctl-a-1")
    assert found is not None
    assert exit_status(found.read_bytes()) == 0
    assert oct(found.stat().st_mode & 0o777) == "0o600"


def test_kept_driver_logs_go_after_a_day(tmp_path: Path) -> None:
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "job-driver-meshctl-a-1.log").write_bytes(b"old\n")
    later = time.time() + driverlogs.KEPT_S + 60
    assert driverlogs.keep(str(tmp_path / "gone"), kept, now=later) == 0
    assert list(kept.iterdir()) == []
