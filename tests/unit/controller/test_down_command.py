"""``meshctl down`` and the jobs that run, against the store and a cluster run file.

The cluster here is a run file whose processes are already gone (as after a crash), so
``down`` has nothing to signal; what is tested is what it decides and records. With live
stand-in processes: tests/integration/controller/test_down.py; with the embedded Ray mesh:
test_local_mesh.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from meshctl.cli.app import app
from meshctl.controller import daemon
from meshctl.controller.shutdown import FORCED, stopped
from meshctl.pools import local
from meshctl.state import AttemptRecord, JobRecord, JobState, MemoryStore, open_store

from .test_decide import NOW, attempt, job

pytestmark = pytest.mark.unit


def a_cluster(home: Path, head: local.Process | None = None) -> Path:
    """The run file of an embedded cluster named onprem: its head process ``head``, or none
    left (as after a crash)."""
    run = home / "run"
    run.mkdir(parents=True, exist_ok=True)
    token = run / "pool-onprem.token"
    token.write_text("t")
    cluster = local.LocalCluster(
        "onprem", "http://127.0.0.1:9", "127.0.0.1:9", str(token), str(home / "ray"), str(run),
        [head] if head else [],
    )  # fmt: skip
    path = local.run_file(run, "onprem")
    cluster.save(path)
    return path


def with_jobs(home: Path, *states: tuple[str, JobState, str]) -> None:
    """Jobs (id, state, attempt state) with one attempt each, on pool onprem."""
    with open_store(home) as store:
        for job_id, state, tried in states:
            view = job(job_id, state=state)
            store.create(view.record)
            store.create(attempt(job_id, state=tried))


def state_of(home: Path, job_id: str) -> tuple[str, str]:
    with open_store(home) as store:
        record = store.get(JobRecord, job_id)
        [tried] = store.list(AttemptRecord, job_id=job_id)
    assert record is not None
    return record.state.value, tried.state


def test_a_cluster_whose_processes_are_gone_does_not_hold_down_back(
    cli: CliRunner, tmp_path: Path
) -> None:
    """After a crash the store may still say running; nothing runs on a dead cluster, so
    down goes on and records what stopped (its jobs run again at the next up)."""
    home = tmp_path / "home"
    path = a_cluster(home)
    with_jobs(
        home, ("train", JobState.RUNNING, "running"), ("done", JobState.SUCCEEDED, "succeeded")
    )
    result = cli.invoke(app, ["down"])
    assert result.exit_code == 0, result.output
    assert "requeued (they run again at the next meshctl up): train" in result.stdout
    assert not path.exists()
    assert state_of(home, "train") == ("requeued", "stopped")
    assert state_of(home, "done") == ("succeeded", "succeeded")
    with open_store(home) as store:
        [tried] = store.list(AttemptRecord, job_id="train")
        event = store.events(job_id="train")[-1]
    assert tried.reason == "stopped by meshctl down"
    assert (event.kind, event.message) == (
        "job.requeued",
        "stopped by meshctl down; it runs again at the next meshctl up",
    )
    assert "nothing was up" in cli.invoke(app, ["down"]).stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["down", "--drain", "--deadline", "soon"], "--deadline:"),
        (["down", "--drain", "--deadline", "-5m"], "--deadline:"),
        (["down", "--deadline", "5m"], "--deadline: goes with --drain"),
    ],
    ids=["not a duration", "negative", "without --drain"],
)
def test_bad_deadlines_are_one_line_errors(cli: CliRunner, args: list[str], message: str) -> None:
    result = cli.invoke(app, args)
    assert result.exit_code == 2
    assert result.stderr.startswith(f"error: {message}")
    assert len(result.stderr.strip().splitlines()) == 1


# --- what is recorded, job by job -----------------------------------------------------------

RECORDED = [
    # (job state, attempt state, pool, job state after, attempt state after, requeued)
    pytest.param(JobState.RUNNING, "running", "onprem", "requeued", "stopped", True, id="running"),
    pytest.param(
        JobState.ADMITTED, "submitting", "onprem", "requeued", "stopped", True, id="admitted"
    ),
    pytest.param(
        JobState.DISPATCHED, "pending", "onprem", "requeued", "stopped", True, id="dispatched"
    ),
    pytest.param(
        JobState.EVICTED, "running", "onprem", "requeued", "stopped", True,
        id="leaving: requeued now",
    ),
    pytest.param(
        JobState.CANCELLED, "running", "onprem", "cancelled", "stopped", False,
        id="cancelled stays so",
    ),
    pytest.param(
        JobState.SUCCEEDED, "succeeded", "onprem", "succeeded", "succeeded", False, id="done"
    ),
    pytest.param(
        JobState.REQUEUED, "lost", "onprem", "requeued", "lost", False, id="queued: untouched"
    ),
    pytest.param(
        JobState.RUNNING, "running", "lab", "running", "running", False,
        id="another pool: untouched",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("state", "tried", "pool", "after", "tried_after", "requeued"), RECORDED)
def test_what_down_records_for_each_job(
    state: JobState, tried: str, pool: str, after: str, tried_after: str, requeued: bool
) -> None:
    from dataclasses import replace

    store = MemoryStore()
    store.create(job("j", state=state).record)
    store.create(replace(attempt("j", state=tried), pool=pool))
    told = stopped(store, {"onprem"}, FORCED, NOW)
    record, [ended] = store.get(JobRecord, "j"), store.list(AttemptRecord)
    assert record is not None
    assert (record.state.value, ended.state) == (after, tried_after)
    assert told == (["j"] if requeued else [])
    if tried_after == "stopped":
        assert (ended.reason, ended.ended_at_s) == (FORCED, NOW)


def test_the_hold_file_is_private_and_says_why(tmp_path: Path) -> None:
    daemon.hold(tmp_path, "draining", NOW)
    assert daemon.held(tmp_path) == "draining"
    assert json.loads(daemon.hold_file(tmp_path).read_text())["at_s"] == NOW
    assert daemon.hold_file(tmp_path).stat().st_mode & 0o777 == 0o600
    daemon.lift_hold(tmp_path)
    assert daemon.held(tmp_path) is None
