"""``meshctl down`` with a live cluster and controller: it refuses while a job runs, --force
stops and requeues, --drain holds new work and waits for the running jobs.

No Ray here (the embedded mesh is tested in test_local_mesh.py): the cluster's head and the
controller are stand-in processes of this test's own (``sleep``, each in a session of its
own, recorded in the run file and the daemon's pid file, so ``down`` sees them alive and
stops exactly them), and the jobs end when the test writes their outcome, as the controller
would.
"""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from meshctl.cli.app import app
from meshctl.controller import daemon
from meshctl.pools import local
from meshctl.pools.local import start_ticks, zombie
from meshctl.state import AttemptRecord, JobRecord, JobState, open_store
from meshctl.state.private import write_private
from tests.conftest import wait_until
from tests.unit.controller.test_down_command import a_cluster, state_of, with_jobs

pytestmark = pytest.mark.integration
WAIT_S = 30.0


@dataclass
class Mesh:
    home: Path
    head: subprocess.Popen[bytes]
    controller: subprocess.Popen[bytes]

    @property
    def run_file(self) -> Path:
        return self.home / "run" / "pool-onprem.json"


def stand_in() -> subprocess.Popen[bytes]:
    return subprocess.Popen(["sleep", "300"], start_new_session=True)


@pytest.fixture
def mesh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Mesh]:
    """A home whose cluster and controller are alive, with a running job."""
    home = tmp_path / "home"
    monkeypatch.setenv("MESHCTL_HOME", str(home))
    head, controller = stand_in(), stand_in()
    a_cluster(home, local.Process("head", head.pid, start_ticks(head.pid) or 0))
    with_jobs(home, ("train", JobState.RUNNING, "running"))
    write_private(
        daemon.pid_file(home),
        json.dumps({"pid": controller.pid, "start_ticks": start_ticks(controller.pid)}),
    )
    try:
        yield Mesh(home, head, controller)
    finally:
        for process in (head, controller):
            process.kill()
            process.wait()


def test_down_with_a_running_job_refuses_and_stops_nothing(mesh: Mesh) -> None:
    result = CliRunner().invoke(app, ["down"])
    assert result.exit_code == 1
    assert result.stderr.strip() == (
        "error: 1 job (train) running on onprem; nothing was stopped. meshctl down --drain "
        "waits for them to end; --force stops them (they run again at the next meshctl up)"
    )
    assert mesh.run_file.is_file()
    assert mesh.head.poll() is None
    assert mesh.controller.poll() is None
    assert state_of(mesh.home, "train") == ("running", "running")


def test_down_force_stops_the_job_with_its_pool_and_requeues_it(mesh: Mesh) -> None:
    result = CliRunner().invoke(app, ["down", "--force"])
    assert result.exit_code == 0, result.output
    assert "requeued (they run again at the next meshctl up): train" in result.stdout
    assert mesh.head.wait(WAIT_S) is not None  # stopped by down, not by this test
    assert mesh.controller.wait(WAIT_S) is not None
    assert not mesh.run_file.exists()
    assert state_of(mesh.home, "train") == ("requeued", "stopped")


def test_drain_needs_a_controller_to_see_jobs_end(mesh: Mesh) -> None:
    mesh.controller.kill()
    mesh.controller.wait()
    result = CliRunner().invoke(app, ["down", "--drain"])
    assert result.exit_code == 1
    assert "--drain: the controller is not running" in result.stderr
    assert mesh.run_file.is_file()
    assert daemon.held(mesh.home) is None


def finish_when_held(home: Path, seen: list[str]) -> threading.Thread:
    """Once the hold is on, the job ends (as the controller would record it)."""

    def run() -> None:
        seen.append(wait_until("the hold", lambda: daemon.held(home), WAIT_S, every_s=0.05))
        with open_store(home) as store:
            job = store.get(JobRecord, "train")
            [tried] = store.list(AttemptRecord, job_id="train")
            assert job is not None
            store.update(replace(tried, state="succeeded"), expected_version=tried.version)
            store.update(replace(job, state=JobState.SUCCEEDED), expected_version=job.version)

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_drain_holds_new_work_waits_for_the_job_then_stops(mesh: Mesh) -> None:
    home = mesh.home
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


def test_a_drain_past_its_deadline_fails_and_leaves_the_mesh_as_it_was(mesh: Mesh) -> None:
    home = mesh.home
    result = CliRunner().invoke(app, ["down", "--drain", "--deadline", "2s"])
    assert result.exit_code == 1
    assert "1 job (train) still running; gives up at" in result.stderr  # the progress line
    assert result.stderr.strip().splitlines()[-1] == (
        "error: --drain: 1 job (train) still running after 2s; nothing was stopped and new "
        "work starts again (add --force to stop them at the deadline)"
    )
    assert daemon.held(home) is None  # new work may start again
    assert daemon.running(home) is not None
    assert mesh.head.poll() is None  # the cluster is still up
    assert mesh.run_file.is_file()
    assert state_of(home, "train") == ("running", "running")


def test_drain_with_force_stops_what_still_runs_at_the_deadline(mesh: Mesh) -> None:
    home = mesh.home
    result = CliRunner().invoke(app, ["down", "--drain", "--force", "--deadline", "2s"])
    assert result.exit_code == 0, result.output
    assert state_of(home, "train") == ("requeued", "stopped")
    assert daemon.running(home) is None
    assert not (home / "run" / "pool-onprem.json").exists()
