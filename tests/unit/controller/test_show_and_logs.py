"""``jobs show`` reads as words and as data; ``jobs logs`` comes from meshctl's copy when the
pool no longer has the job, and ``--follow`` says what a job that has not started waits for.

No cluster: the pool is not up (no run file), so every log here is the controller's copy,
written where the controller writes it. The pool path runs in tests/integration/controller.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from meshctl.app.context import AppContext
from meshctl.app.explain import stored as explain_stored
from meshctl.cli import jobview
from meshctl.cli.app import app
from meshctl.cli.joblogs import Follower
from meshctl.controller.deciding.world import JobView
from meshctl.controller.logs import copy_path
from meshctl.scheduler.plan import Decision as SchedulerDecision
from meshctl.state import Decision, Event, JobState, open_store
from meshctl.state.private import private_dir, write_private

from .test_decide import NOW, attempt, job

pytestmark = pytest.mark.unit

RAY_FAILURE = "\n".join(
    [
        "Job entrypoint command failed with exit code 1, last available logs:",
        "Traceback (most recent call last):",
        '  File "x.py", line 3, in <module>',
        "    main()",
        "ValueError: the learning rate is negative",
    ]
)


def stored(home: Path, *views: JobView, events: tuple[Event, ...] = ()) -> None:
    """The jobs as submit stores them (the validated file, defaults filled in)."""
    with open_store(home) as store:
        for view in views:
            spec = view.job.model_dump(mode="json", exclude_none=True)
            store.create(replace(view.record, spec=spec))
            if view.attempt is not None:
                store.create(view.attempt)
        for event in events:
            store.append_event(event)


def copied(home: Path, job_id: str, number: int, text: bytes) -> None:
    path = copy_path(home, job_id, number)
    private_dir(path.parent)
    write_private(path, text)


RESOURCES = [
    pytest.param(
        {"gpus": 1.0, "cpus": 0.25, "memory_gib": 0.5, "nic_gbps": 0.0, "nodes": 1},
        "1 GPU, 0.25 CPU, 512 MiB memory",
        id="one GPU, a quarter CPU, half a GiB",
    ),
    pytest.param(
        {"gpus": 0.25, "cpus": 1.0, "memory_gib": 4.0, "nodes": 1},
        "0.25 GPU, 1 CPU, 4 GiB memory",
        id="a fraction of a GPU",
    ),
    pytest.param({"cpus": 2.0, "memory_gib": 8.0, "nodes": 1}, "2 CPUs, 8 GiB memory", id="no GPU"),
    pytest.param(
        {
            "gpus": 8.0,
            "gpu_memory_gib": 80.0,
            "accelerator": {"vendor": "nvidia", "any_of": ["H100", "H200"]},
            "cpus": 32.0,
            "memory_gib": 256.0,
            "nic_gbps": 400.0,
            "nodes": 4,
            "topology": {"domain": "switch", "mode": "required"},
        },
        "8 GPUs (nvidia H100 or H200) with 80 GiB or more each, 32 CPUs, 256 GiB memory, "
        "400 Gbps NIC on each of 4 nodes (required: one switch)",
        id="a gang with every dimension",
    ),
]


@pytest.mark.parametrize(("resources", "text"), RESOURCES)
def test_resources_read_as_people_write_them(resources: dict[str, object], text: str) -> None:
    assert jobview.resources_text(resources) == text


@pytest.mark.parametrize(
    ("train", "nodes", "text"),
    [
        pytest.param(
            {"loop": "model:train_loop", "workers_per_node": 1, "max_failures": 3},
            1,
            "loop model:train_loop, 1 worker, up to 3 failures recovered inside an attempt",
            id="one worker",
        ),
        pytest.param(
            {
                "loop": "m:f",
                "workers_per_node": 2,
                "min_workers": 2,
                "max_failures": 0,
                "hang_timeout_s": 600.0,  # a job document's train (app.shapes)
            },
            2,
            "loop m:f, 4 workers (2 on each of 2 nodes), elastic down to 2, no failure "
            "recovered inside an attempt, restarted after 600 s without progress",
            id="elastic, on two nodes, with a hang timeout",
        ),
    ],
)
def test_a_train_job_says_its_loop_and_workers(
    train: dict[str, object], nodes: int, text: str
) -> None:
    assert jobview.train_text(train, nodes) == text


def test_show_says_what_a_job_asks_for_in_words(cli: CliRunner, tmp_path: Path) -> None:
    home = tmp_path / "home"
    view = job(
        "hello", gpus=1, state=JobState.SUCCEEDED, attempt=attempt("hello", state="succeeded")
    )
    stored(home, view)
    out = cli.invoke(app, ["jobs", "show", "hello"]).stdout
    assert "  resources: 1 GPU, 0.5 CPU, 1 GiB memory\n" in out
    assert "  entrypoint: python x.py\n" in out
    assert "  attempt 1: succeeded on onprem (n1) as meshctl-hello-1\n" in out
    assert not re.search(r"[{}]|None|\[", out), out  # no Python reprs


def test_show_gives_a_few_lines_of_a_failure_and_where_the_rest_is(
    cli: CliRunner, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    failed = replace(attempt("boom", state="failed"), reason=RAY_FAILURE)
    stored(home, job("boom", state=JobState.FAILED, attempt=failed))
    out = cli.invoke(app, ["jobs", "show", "boom"]).stdout
    assert (
        "  attempt 1: failed on onprem (n1) as meshctl-boom-1\n"
        "    Job entrypoint command failed with exit code 1, last available logs:\n"
        "    Traceback (most recent call last):\n"
        '      File "x.py", line 3, in <module>\n'
        "    ... 2 more lines: meshctl jobs logs boom\n"
    ) in out


def test_show_names_the_nodes_a_job_is_on_after_one_was_replaced_inside_its_attempt(
    cli: CliRunner, tmp_path: Path
) -> None:
    """Reported: after a node was replaced inside an attempt, jobs show kept naming the old
    one (the scheduler's decision, placed on the node since lost)."""
    home = tmp_path / "home"
    moved = attempt("t", nodes=("n2",), replaced=1)  # as the replacement recorded it
    view = job("t", state=JobState.RUNNING, attempt=moved)
    replaced = "node n1 is dead; n2 replaces it inside the attempt"
    stored(home, view, events=(Event(NOW, "job.node-replaced", "t", replaced, {}),))
    with open_store(home) as store:
        store.record_decision(Decision(NOW - 30, "t", "placed", "", {"summary": "placed on n1"}))
    out = cli.invoke(app, ["jobs", "show", "t"]).stdout
    assert "  nodes: n2\n" in out
    assert f"  decision: placed on n1; then {replaced}\n" in out
    assert "  attempt 1: running on onprem (n2) as meshctl-t-1\n" in out


def test_show_json_follows_the_conventions(cli: CliRunner, tmp_path: Path) -> None:
    home = tmp_path / "home"
    train = {"loop": "model:train_loop", "workers_per_node": 2}
    view = job("t", gpus=2, nodes=2, state=JobState.RUNNING, train=train, entrypoint=None,
               kind="train", attempt=attempt("t", nodes=("n1", "n2")))  # fmt: skip
    event = Event(NOW, "job.running", "t", "started", {})
    stored(home, view, events=(event,))
    data = json.loads(cli.invoke(app, ["jobs", "show", "t", "-o", "json"]).stdout)
    assert data["resources"] == {"gpus": 2.0, "nodes": 2, "cpus": 0.5, "memory_gib": 1.0,
                                 "nic_gbps": 0.0}  # fmt: skip
    assert data["train"]["workers"] == 4
    assert data["train"]["hang_timeout_s"] is None
    assert (data["kind"], data["entrypoint"]) == ("train", None)
    [tried] = data["attempts"]
    assert (tried["nodes"], tried["started_at"], tried["ended_at"]) == (
        ["n1", "n2"],
        "2027-01-15T07:59:55Z",
        None,
    )
    assert data["events"] == [
        {"occurred_at": "2027-01-15T08:00:00Z", "kind": "job.running", "message": "started"}
    ]
    flat = json.dumps(data)
    assert '"at_s"' not in flat
    assert "None" not in flat


def test_logs_of_a_finished_job_come_from_the_copy_with_the_pool_down(
    cli: CliRunner, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    stored(home, job("done", state=JobState.SUCCEEDED, attempt=attempt("done", state="succeeded")))
    copied(home, "done", 1, b"step 1\nstep 2 \xe2\x9c\x93\n")
    result = cli.invoke(app, ["jobs", "logs", "done"])
    assert result.exit_code == 0
    assert result.stdout == "step 1\nstep 2 \u2713\n"


def test_logs_with_neither_pool_nor_copy_is_one_line_and_exit_1(
    cli: CliRunner, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    stored(home, job("gone", state=JobState.FAILED, attempt=attempt("gone", state="failed")))
    result = cli.invoke(app, ["jobs", "logs", "gone"])
    assert result.exit_code == 1
    assert result.stderr == (
        "error: job gone, attempt 1: no log: pool onprem does not have it (is it up?) and "
        "meshctl kept no copy\n"
    )


def test_follow_says_what_a_job_waits_for_then_prints_each_attempt(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "home"
    pending = job("j")
    stored(home, pending)
    context = AppContext(home, None, None)
    with open_store(home) as store:
        follower = Follower(context, store, "j", None, mesh=context.mesh())
        record = pending.record
        first = attempt("j", state="submitting")
        steps = [
            (record, None),
            (record, None),  # the same wait is said once
            (replace(record, state=JobState.ADMITTED, pool="onprem"), first),
            (replace(record, state=JobState.DISPATCHED, pool="onprem"), first),
            (replace(record, state=JobState.RUNNING, pool="onprem"), first),
        ]
        copied(home, "j", 1, b"one\n")
        for rec, tried in steps:
            follower.step(rec, tried)
        copied(home, "j", 1, b"one\ntwo\n")
        follower.step(replace(record, state=JobState.REQUEUED), first)
        copied(home, "j", 2, b"again\n")
        follower.step(replace(record, state=JobState.RUNNING), attempt("j", number=2))
    out, err = capsys.readouterr()
    assert out == "one\ntwo\nagain\n"
    assert err.splitlines() == [
        "waiting for job j to start: it is queued (pending)",
        "waiting for job j to start: it is admitted to pool onprem, being submitted",
        "waiting for job j to start: it is dispatched to pool onprem as meshctl-j-1, "
        "waiting for Ray to start it",
        "waiting for job j to start: it is queued again (requeued)",
        "--- job j, attempt 2 ---",
    ]


def test_follow_of_a_finished_job_prints_it_and_returns(cli: CliRunner, tmp_path: Path) -> None:
    home = tmp_path / "home"
    stored(home, job("done", state=JobState.FAILED, attempt=attempt("done", state="failed")))
    copied(home, "done", 1, b"the end\n")
    result = cli.invoke(app, ["jobs", "logs", "done", "-f"])
    assert (result.exit_code, result.stdout) == (0, "the end\n")


def recorded(job_id: str, decided: SchedulerDecision, at_s: float) -> Decision:
    """A scheduler's decision as the controller records it (``controller/apply.py``)."""
    explanation = {"summary": decided.summary(), **decided.explanation()}
    return Decision(at_s, job_id, decided.status, "", explanation)


QUOTA = SchedulerDecision("j", "pending", "team search over quota: 9 GPUs > 8 + 0 borrowable")


def test_follow_says_what_a_queued_job_waits_for_as_explain_does(
    cli: CliRunner, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A job held by its team's quota: ``logs -f`` says the scheduler's latest decision, the
    words ``explain`` gives, again when it changes, and nothing stale once placed."""
    home = tmp_path / "home"
    pending = job("j")
    stored(home, pending)
    context = AppContext(home, None, None)
    with open_store(home) as store:
        store.record_decision(recorded("j", QUOTA, NOW))
        said = explain_stored(context, store, pending.record)["decision"]["summary"]
        shown = cli.invoke(app, ["jobs", "logs", "j"])
        follower = Follower(context, store, "j", None, mesh=context.mesh())
        follower.step(pending.record, None)
        follower.step(pending.record, None)  # the same wait is said once
        burst = SchedulerDecision("j", "provisioning", notes=["burst to aws-burst: g6.xlarge"])
        store.record_decision(recorded("j", burst, NOW + 5))
        follower.step(pending.record, None)
        store.record_decision(recorded("j", SchedulerDecision("j", "placed"), NOW + 9))
        follower.step(replace(pending.record, state=JobState.REQUEUED), None)
    _, err = capsys.readouterr()
    assert said == "pending: team search over quota: 9 GPUs > 8 + 0 borrowable"
    assert (shown.exit_code, shown.stderr) == (
        0,
        (
            "job j has not started: it is queued (pending): team search over quota: 9 GPUs > 8 + "
            "0 borrowable\n"
        ),
    )
    assert err.splitlines() == [
        "waiting for job j to start: it is queued (pending): team search over quota: 9 GPUs > "
        "8 + 0 borrowable",
        "waiting for job j to start: it is queued (pending): provisioning; burst to aws-burst: "
        "g6.xlarge",
        "waiting for job j to start: it is queued again (requeued)",
    ]
