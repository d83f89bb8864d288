"""``meshctl down --drain``: hold new work, wait for the running jobs, then stop.

No Ray here (the embedded mesh is tested in test_local_mesh.py): the controller is a stand-in
process of this test's own (``sleep``, recorded in the daemon's pid file so ``down`` sees a
controller and stops exactly it), the cluster a run file whose processes are gone, and the
jobs end when the test writes their outcome, as the controller would.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from meshctl.cli.app import app
from meshctl.controller import daemon
from meshctl.pools.local import start_ticks, zombie
from meshctl.state import AttemptRecord, JobRecord, JobState, open_store
from meshctl.state.private import write_private
from tests.unit.controller.test_down_command import a_cluster, state_of, with_jobs

pytestmark = pytest.mark.integration
WAIT_S = 30.0


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A home with a cluster run file, a running job, and a stand-in controller process."""
    home = tmp_path / "home"
    monkeypatch.setenv("MESHCTL_HOME", str(home))
    a_cluster(home)
    with_jobs(home, ("train", JobState.RUNNING, "running"))
    stand_in = subprocess.Popen(["sleep", "300"], start_new_session=True)
    write_private(
        daemon.pid_file(home),
        json.dumps({"pid": stand_in.pid, "start_ticks": start_ticks(stand_in.pid)}),
    )
    try:
        yield home
    finally:
        stand_in.kill()
        stand_in.wait()


def finish_when_held(home: Path, seen: list[str]) -> threading.Thread:
    """Once the hold is on, the job ends (as the controller would record it)."""

    def run() -> None:
        deadline = time.monotonic() + WAIT_S
        while (why := daemon.held(home)) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        seen.append(why or "")
        with open_store(home) as store:
            job = store.get(JobRecord, "train")
            [tried] = store.list(AttemptRecord, job_id="train")
            assert job is not None
            store.update(replace(tried, state="succeeded"), expected_version=tried.version)
            store.update(replace(job, state=JobState.SUCCEEDED), expected_version=job.version)

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_drain_holds_new_work_waits_for_the_job_then_stops(home: Path) -> None:
    pid = daemon.running(home)
    assert pid is not None
    seen: list[str] = []
    thread = finish_when_held(home, seen)
    result = CliRunner().invoke(app, ["down", "--drain", "--deadline", f"{WAIT_S:g}s"])
    thread.join()
    assert result.exit_code == 0, result.output
    assert seen == ["not started: the mesh is draining (meshctl down --drain)"]
    assert "drained: no job is running" in result.stdout
    assert state_of(home, "train") == ("succeeded", "succeeded")  # not requeued: it ended
    assert daemon.held(home) is None
    assert daemon.running(home) is None
    assert zombie(pid)  # the stand-in controller was stopped


def test_a_drain_past_its_deadline_fails_and_leaves_the_mesh_as_it_was(home: Path) -> None:
    result = CliRunner().invoke(app, ["down", "--drain", "--deadline", "2s"])
    assert result.exit_code == 1
    assert "1 job (train) still running; gives up at" in result.stderr  # the progress line
    assert result.stderr.strip().splitlines()[-1] == (
        "error: --drain: 1 job (train) still running after 2s; nothing was stopped and new "
        "work starts again (add --force to stop them at the deadline)"
    )
    assert daemon.held(home) is None  # new work may start again
    assert daemon.running(home) is not None
    assert (home / "run" / "pool-onprem.json").is_file()
    assert state_of(home, "train") == ("running", "running")


def test_drain_with_force_stops_what_still_runs_at_the_deadline(home: Path) -> None:
    result = CliRunner().invoke(app, ["down", "--drain", "--force", "--deadline", "2s"])
    assert result.exit_code == 0, result.output
    assert state_of(home, "train") == ("requeued", "stopped")
    assert daemon.running(home) is None
    assert not (home / "run" / "pool-onprem.json").exists()
