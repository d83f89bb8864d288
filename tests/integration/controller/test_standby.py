"""Two controllers on one Postgres store, for real: the embedded mesh (a local Ray cluster), the
controller ``meshctl up`` starts, and a standby. The leader is killed (SIGKILL) at the failpoint
just before it submits a job to Ray; the standby takes the lease, finishes the dispatch, and the
job runs exactly once. A leader that pauses past its lease and wakes up writes nothing more."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pgserver import PgServer

from meshctl.controller import daemon
from meshctl.state import AttemptRecord, JobRecord, JobState, LeaseRecord, open_store_at
from meshctl.state.lease import CONTROLLER
from meshctl.state.store import Store
from tests.conftest import wait_until
from tests.integration.meshes import WAIT_S, Mesh

pytestmark = pytest.mark.integration

TAKEOVER_S = 15.0  # what a standby must take over within, after the leader is killed


class SharedMesh(Mesh):
    """The embedded mesh whose store is a Postgres database (``MESHCTL_STORE``)."""

    def __init__(self, home: Path, cwd: Path, store: str) -> None:
        super().__init__(home, cwd)
        self.store_url = store
        self.started: list[subprocess.Popen[bytes]] = []

    def run(self, *args: str, check: bool = True, env: dict[str, str] | None = None) -> Any:
        return super().run(*args, check=check, env={"MESHCTL_STORE": self.store_url, **(env or {})})

    def store(self) -> Store:
        return open_store_at(self.store_url, self.home)

    def lease(self) -> LeaseRecord | None:
        with self.store() as store:
            return store.get(LeaseRecord, CONTROLLER)

    def controller(self, *flags: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        """A ``controller run`` of this home and store, not the daemon ``up`` records."""
        log = (self.cwd / f"controller-{len(self.started)}.log").open("wb")
        process = subprocess.Popen(
            [sys.executable, "-m", "meshctl", "--home", str(self.home), "controller", "run",
             "--interval", "0.5", *flags],
            env={**os.environ, "MESHCTL_STORE": self.store_url, **(env or {})},
            stdout=log, stderr=subprocess.STDOUT, cwd=self.cwd,
        )  # fmt: skip
        self.started.append(process)
        return process

    def log(self, process: subprocess.Popen[bytes]) -> str:
        return (self.cwd / f"controller-{self.started.index(process)}.log").read_text()


def holder_pid(lease: LeaseRecord | None) -> int | None:
    return None if lease is None else int(lease.holder.split("/")[1])


@pytest.fixture(scope="module")
def mesh(postgres: PgServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedMesh]:
    base = tmp_path_factory.mktemp("standby")
    m = SharedMesh(base / "home", base, postgres.database())
    m.run("up")
    daemon.stop(m.home)  # each test starts the controllers it needs
    try:
        yield m
    finally:
        for process in m.started:
            if process.poll() is None:
                process.kill()
                process.wait()
        m.run("down", "--force", check=False)


def test_a_standby_takes_over_a_killed_leader_and_the_job_runs_once(mesh: SharedMesh) -> None:
    leader = mesh.controller(env={"MESHCTL_FAILPOINT": "before-submit"})
    wait_until(lambda: f"the leader never led:\n{mesh.log(leader)}",
               lambda: holder_pid(mesh.lease()) == leader.pid, WAIT_S)  # fmt: skip
    standby = mesh.controller()
    wait_until(lambda: f"the standby never started:\n{mesh.log(standby)}",
               lambda: "controller up" in mesh.log(standby), WAIT_S)  # fmt: skip
    epoch = mesh.lease().epoch  # type: ignore[union-attr]
    job_id = mesh.submit("--gpus", "1", "--", "python", "-c", "print('ran once')")
    leader.wait(timeout=WAIT_S)  # killed at the failpoint, the attempt recorded, Ray not asked
    killed_at = time.monotonic()
    assert leader.returncode == -signal.SIGKILL, mesh.log(leader)
    with mesh.store() as store:
        [attempt] = store.list(AttemptRecord, job_id=job_id)
    assert (attempt.state, attempt.epoch) == ("submitting", epoch)
    assert mesh.ray().job(attempt.submission_id) is None
    wait_until(
        lambda: f"the standby never took over:\n{mesh.log(standby)}",
        lambda: holder_pid(mesh.lease()) == standby.pid,
        TAKEOVER_S,
        every_s=0.1,
    )
    assert time.monotonic() - killed_at < TAKEOVER_S
    assert mesh.lease().epoch == epoch + 1  # type: ignore[union-attr]
    assert mesh.run("jobs", "wait", job_id, "--timeout", str(WAIT_S)).returncode == 0
    submissions = [s for s in mesh.ray().jobs() if s.startswith(f"meshctl-{job_id}-")]
    assert submissions == [attempt.submission_id]
    assert mesh.run("jobs", "logs", job_id).stdout.splitlines().count("ran once") == 1
    with mesh.store() as store:
        [done] = store.list(AttemptRecord, job_id=job_id)
        decisions = store.decisions(job_id=job_id)
        assert store.get(JobRecord, job_id).state is JobState.SUCCEEDED  # type: ignore[union-attr]
    assert done.epoch == epoch + 1  # the new leader finished the dispatch
    assert {d.epoch for d in decisions} <= {epoch, epoch + 1}
    standby.send_signal(signal.SIGTERM)
    assert standby.wait(timeout=60) == 0


def test_a_leader_that_wakes_after_its_lease_was_taken_stops_and_writes_nothing(
    mesh: SharedMesh,
) -> None:
    first = mesh.controller("--lease-ttl", "3")
    wait_until(lambda: f"it never led:\n{mesh.log(first)}",
               lambda: holder_pid(mesh.lease()) == first.pid, WAIT_S)  # fmt: skip
    second = mesh.controller("--lease-ttl", "3")
    wait_until(lambda: f"the standby never started:\n{mesh.log(second)}",
               lambda: "controller up" in mesh.log(second), WAIT_S)  # fmt: skip
    first.send_signal(signal.SIGSTOP)  # paused: it neither renews nor writes
    try:
        wait_until(lambda: f"the standby never took over:\n{mesh.log(second)}",
                   lambda: holder_pid(mesh.lease()) == second.pid, WAIT_S, every_s=0.1)  # fmt: skip
        taken = mesh.lease()
        assert taken is not None
        job_id = mesh.submit("--gpus", "1", "--", "python", "-c", "print('after the takeover')")
    finally:
        first.send_signal(signal.SIGCONT)
    assert first.wait(timeout=60) == 1  # deposed: it stops
    assert "deposed" in mesh.log(first)
    assert mesh.run("jobs", "wait", job_id, "--timeout", str(WAIT_S)).returncode == 0
    with mesh.store() as store:
        taking = [e for e in store.events() if e.kind == "controller.leading"][-1]
        after = [d for d in store.decisions() if d.seq > 0 and d.at_s >= taking.at_s]
    assert taking.data["epoch"] == taken.epoch
    assert {d.epoch for d in after} == {taken.epoch}  # nothing of the old leader after it
    second.send_signal(signal.SIGTERM)
    assert second.wait(timeout=60) == 0
