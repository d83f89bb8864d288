"""The job and node commands against the store alone (no cluster): bad input, the lifecycle
that needs no Ray (queue, cancel, wait), and what they print."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from meshctl.app.jobs import find
from meshctl.cli.app import app
from meshctl.errors import InvalidRequestError
from meshctl.state import JobRecord, JobState, MemoryStore, Store
from meshctl.state.sqlite_dialect import SqliteStore
from tests.conftest import EXAMPLES

pytestmark = pytest.mark.unit

JOB = str(EXAMPLES / "jobs" / "serve-pii.yaml")


def run(cli: CliRunner, *args: str) -> tuple[int, str, str]:
    result = cli.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


BAD = [
    (
        "a file and flags",
        ["submit", JOB, "--gpus", "2"],
        "--gpus: describe a job given as a command",
    ),
    (
        "never fits",
        ["submit", "--gpus", "64", "--", "python", "x.py"],
        "error: job x can never run on this mesh: needs 64 GPUs per node; the largest node or "
        "node type has 8",
    ),
    (
        "gang too big",
        ["submit", "--gpus", "4", "--nodes", "5", "--", "python", "x.py"],
        "error: job x can never run on this mesh: needs 5 nodes with 4 GPUs each; the pool "
        "onprem has 3 such nodes; aws-burst may launch at most 2 g6e.12xlarge",
    ),
    (
        "over the team's quota, whatever it borrows",
        ["submit", "--team", "search", "--gpus", "2", "--", "python", "x.py"],
        "error: job x is inadmissible under the current policies: team search's quota is 1 GPU, "
        "the job needs 2",
    ),
    (
        "an undefined priority class",
        ["submit", "--priority", "nope", "--", "python", "x.py"],
        "error: job x is inadmissible under the current policies: priority class 'nope' is not "
        "defined (defined: batch, production, research, scavenger)",
    ),
    (
        "a misspelt team (reported: accepted, and around team search's quota of 1 GPU)",
        ["submit", "--dry-run", "--team", "serch", "--gpus", "3", "--", "python", "x.py"],
        "error: job x is inadmissible under the current policies: team 'serch' is not declared "
        "by the policies (teams: default, llm, search, support, vision); did you mean 'search'?",
    ),
    (
        "a misspelt priority class",
        ["submit", "--priority", "reserach", "--", "python", "x.py"],
        "priority class 'reserach' is not defined (defined: batch, production, research, "
        "scavenger); did you mean 'research'?",
    ),
    ("unknown kind", ["submit", "--kind", "nap", "--", "python", "x.py"], "--kind:"),
    (
        "a fraction for a gang",
        ["submit", "--gpus", "0.5", "--nodes", "2", "--", "x"],
        "--gpus/--nodes:",
    ),
    ("bad memory", ["submit", "--memory", "lots", "--", "python", "x.py"], "--memory:"),
    ("nothing to run", ["submit"], "expected JOB.yaml, or -- and a command"),
    ("missing working dir", ["submit", "--working-dir", "/no/such/dir", "--", "x"], "working_dir"),
    ("a mistyped job file", ["submit", "jobs/trian.yaml"], "jobs/trian.yaml: no such job file"),
    ("unknown job", ["jobs", "show", "nope"], "job: no job with id or name 'nope'"),
    ("unknown job to cancel", ["jobs", "cancel", "nope"], "job: no job with id or name 'nope'"),
    ("bad wait timeout", ["jobs", "wait", "x", "--timeout", "soon"], "--timeout: expected"),
    ("unknown state", ["jobs", "list", "--state", "sleeping"], "--state: expected one of"),
    ("unknown node", ["nodes", "cordon", "gpu-rack9"], "node: expected one of"),
    ("bad drain deadline", ["nodes", "drain", "gpu-rack1", "--deadline", "soon"], "--deadline:"),
]


@pytest.mark.parametrize(("args", "message"), [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_bad_requests_are_one_line_errors_with_exit_2(
    cli: CliRunner, args: list[str], message: str
) -> None:
    code, out, err = run(cli, *args)
    assert code == 2, (out, err)
    assert message in err
    assert len(err.strip().splitlines()) == 1
    assert "Traceback" not in err
    listed = json.loads(run(cli, "jobs", "list", "-o", "json")[1])
    assert listed == []  # nothing was queued


def test_dry_run_plans_and_queues_nothing(cli: CliRunner) -> None:
    code, out, _ = run(cli, "submit", JOB, "--dry-run")
    assert code == 0
    assert "would be placed on" in out
    assert json.loads(run(cli, "jobs", "list", "-o", "json")[1]) == []


def test_a_queued_job_can_be_shown_explained_cancelled_and_waited_for(cli: CliRunner) -> None:
    code, out, err = run(cli, "submit", JOB)
    assert code == 0
    job_id = out.strip()
    assert job_id.startswith("serve-pii-")
    assert "no controller is running" in err
    [row] = json.loads(run(cli, "jobs", "list", "-o", "json")[1])
    assert (row["id"], row["state"], row["priority"]) == (job_id, "pending", 1000)
    shown = json.loads(run(cli, "jobs", "show", job_id[:12], "-o", "json")[1])
    assert [e["kind"] for e in shown["events"]] == ["job.pending"]
    assert "no scheduling decision recorded yet" in run(cli, "explain", job_id)[1]
    assert run(cli, "jobs", "cancel", job_id) == (0, f"{job_id} cancelled (was pending)\n", "")
    again = (0, f"{job_id} already cancelled; nothing to cancel\n", "")
    assert run(cli, "jobs", "cancel", job_id) == again  # finished: said, not an error
    code, out, err = run(cli, "jobs", "wait", job_id)
    assert (code, out.strip()) == (1, f"{job_id} cancelled")
    assert err.endswith(f"\nerror: 1 of 1 did not succeed: {job_id} cancelled\n")


def test_a_command_job_carries_its_flags(cli: CliRunner) -> None:
    code, out, _ = run(
        cli,
        "submit",
        "--gpus",
        "1",
        "--team",
        "search",
        "--kind",
        "inference",
        "--priority",
        "batch",
        "--",
        "python",
        "serve.py",
        "--port",
        "8000",
    )
    assert code == 0
    shown = json.loads(run(cli, "jobs", "show", out.strip(), "-o", "json")[1])
    assert shown["entrypoint"] == "python serve.py --port 8000"
    assert shown["team"] == "search"
    assert shown["resources"]["gpus"] == 1.0
    assert shown["name"] == "serve"


def test_the_controller_runs_one_cycle_with_no_pool_up(cli: CliRunner) -> None:
    run(cli, "submit", JOB)
    code, out, err = run(cli, "controller", "run", "--once")
    assert code == 0, (out, err)
    assert out.startswith("cycle: 1 jobs, 0 dispatched")


def test_a_decision_carries_its_policy_hash_and_says_which_pool_cannot_be_used(
    cli: CliRunner,
) -> None:
    """serve-pii may only use on-prem (residency), which is not up: it waits, and says so;
    explain and jobs show name the hash of the policies that decided."""
    job_id = run(cli, "submit", JOB)[1].strip()
    assert run(cli, "controller", "run", "--once")[0] == 0
    shipped = str(Path("policies").resolve())  # as the controller names them
    policies = run(cli, "policy", "validate", shipped)[1].split("policy hash ")[1].split(";")[0]
    explained = json.loads(run(cli, "explain", job_id, "-o", "json")[1])
    assert explained["policy_hash"] == policies
    assert explained["decision"]["summary"].startswith("pending: onprem: not up")
    assert (
        f"scheduler (policies {policies}): pending: onprem: not up"
        in run(cli, "explain", job_id)[1]
    )
    assert json.loads(run(cli, "jobs", "show", job_id, "-o", "json")[1])["policy_hash"] == policies


def test_status_as_data_names_every_pool_and_the_queue(cli: CliRunner) -> None:
    run(cli, "submit", JOB)
    data = json.loads(run(cli, "status", "-o", "json")[1])
    assert data["controller"]["pid"] is None
    assert [p["pool"] for p in data["pools"]] == ["onprem", "aws-burst", "gcp-burst"]
    assert (data["pools"][0]["state"], data["pools"][0]["reason"]) == ("unavailable", "not up")
    assert data["jobs"] == {"pending": 1}
    assert data["queue"][0]["queued"] == 1


def test_down_with_nothing_up_says_so(cli: CliRunner) -> None:
    assert run(cli, "down") == (0, "nothing was up\n", "")


def test_a_home_that_cannot_be_created_is_a_one_line_failure(
    cli: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MESHCTL_HOME", "/proc/meshctl-cannot-live-here")
    code, _, err = run(cli, "jobs", "list")
    assert code == 1
    assert err.startswith("error: cannot create meshctl home")
    assert len(err.strip().splitlines()) == 1


def submitted(cli: CliRunner, *names: str) -> list[str]:
    ids = []
    for name in names:
        code, out, err = run(cli, "submit", "--name", name, "--", "python", "x.py")
        assert code == 0, err
        ids.append(out.strip())
    return ids


def test_cancel_takes_several_jobs_and_an_unknown_one_cancels_none(cli: CliRunner) -> None:
    first, second = submitted(cli, "one", "two")
    code, _, err = run(cli, "jobs", "cancel", first, "nope", second)
    assert (code, err.strip()) == (
        2,
        "error: job: no job with id or name 'nope' (meshctl jobs list)",
    )
    states = {r["id"]: r["state"] for r in json.loads(run(cli, "jobs", "list", "-o", "json")[1])}
    assert states == {first: "pending", second: "pending"}  # exit 2: nothing changed
    run(cli, "jobs", "cancel", first)
    code, out, err = run(cli, "jobs", "cancel", first, second, "-o", "json")
    assert (code, err) == (0, "")
    assert json.loads(out) == [
        {"id": first, "state": "cancelled", "previous_state": "cancelled", "cancelled": False},
        {"id": second, "state": "cancelled", "previous_state": "pending", "cancelled": True},
    ]


def test_wait_exits_124_when_the_time_runs_out(cli: CliRunner) -> None:
    [job_id] = submitted(cli, "sleepy")
    code, out, err = run(cli, "jobs", "wait", job_id, "--timeout", "0s", "-o", "json")
    assert code == 124
    assert json.loads(out) == [{"id": job_id, "state": "pending"}]
    document = json.loads(err.strip().splitlines()[-1])
    assert document["error"]["exit_code"] == 124
    assert document["error"]["message"] == f"timed out after 0 s: {job_id} pending"


def store_with(*jobs: tuple[str, str]) -> MemoryStore:
    store = MemoryStore()
    for job_id, name in jobs:
        record = JobRecord(job_id, name, "t", JobState.PENDING, 0, {}, None, 1.0, 1.0)
        store.create(record)
    return store


# ids abc, abcdef and zzz-1 (named abcd): every way of naming a job, and which one wins
FOUND = [
    pytest.param("abc", "abc", id="an exact id wins over a prefix of another id"),
    pytest.param("abcd", "zzz-1", id="an exact name wins over a prefix of another id"),
    pytest.param("abcde", "abcdef", id="a unique prefix of an id"),
    pytest.param("zzz", "zzz-1", id="a prefix of one id only"),
]


@pytest.mark.parametrize(("ref", "expected"), FOUND)
def test_an_exact_id_or_name_wins_over_a_prefix(ref: str, expected: str) -> None:
    store = store_with(("abc", "first"), ("abcdef", "second"), ("zzz-1", "abcd"))
    assert find(store, ref).id == expected


def test_a_prefix_of_several_ids_is_refused() -> None:
    store = store_with(("abc", "first"), ("abcdef", "second"))
    with pytest.raises(InvalidRequestError, match=r"'ab' names 2 jobs \(abc, abcdef\)"):
        find(store, "ab")


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_a_prefix_of_many_ids_names_the_first_few(kind: str, tmp_path: Path) -> None:
    """Found by reading the keys just after the prefix, and a name by its index: never by
    listing every job. SQLite orders keys as Python does, so the ids of a prefix come first."""
    jobs = [(f"job-{i:02d}", f"n{i}") for i in range(9)] + [("job", "x"), ("jobz", "n3b")]
    store: Store = store_with(*jobs)
    if kind == "sqlite":
        store = SqliteStore(tmp_path / "state.db")  # closed with the test's folder
        for job_id, name in jobs:
            store.create(JobRecord(job_id, name, "t", JobState.PENDING, 0, {}, None, 1.0, 1.0))
    with pytest.raises(InvalidRequestError, match=r"'job-' names more than 5 jobs \(job-00, "):
        find(store, "job-")
    assert [find(store, ref).id for ref in ("job", "job-08", "n3b", "jobz", "job-07")] == [
        "job", "job-08", "jobz", "jobz", "job-07",
    ]  # fmt: skip


def test_a_name_two_jobs_share_asks_for_an_id(cli: CliRunner) -> None:
    first, second = submitted(cli, "twin", "twin")
    code, _, err = run(cli, "jobs", "show", "twin")
    assert code == 2
    assert err.startswith("error: job: 2 jobs are named 'twin' (")
    assert (first in err, second in err) == (True, True)


# What the controller records for a job waiting behind two whole nodes held by jobs that
# declared no runtime (test_decide builds it), and for one its team's quota holds back.
WAITING = {"runtime_s": None, "runtime": "unknown: no max_runtime_s",
           "expected_wait_s": {"onprem": 7200.0}, "assumed": {"onprem": 2},
           "unknown_runtime_s": 7200.0, "blocked_by": None}  # fmt: skip
BLOCKED = WAITING | {"expected_wait_s": {}, "assumed": {}, "blocked_by": "quota"}
FORECASTS = [
    pytest.param(
        WAITING,
        [
            "expected wait: onprem 2.0 h",
            "onprem: 2 running jobs with no runtime declared or estimated, each assumed to run"
            " at least 2.0 h more (forecast.unknown_runtime_s in the policies, 2 h unless they"
            " set it)",
        ],
        id="a wait with what it assumed of the jobs ahead",
    ),
    pytest.param(
        BLOCKED,
        ["expected wait: none forecast: it waits for its team's quota, not for GPUs"],
        id="a job its quota holds: why, and no wait figure",
    ),
]


@pytest.mark.parametrize(("forecast", "said"), FORECASTS)
def test_explain_says_the_forecast_with_its_inputs(
    cli: CliRunner, forecast: dict[str, object], said: list[str]
) -> None:
    """Issue 45: a full pool of jobs without runtimes forecast 11 s; a job its quota held
    showed 'expected wait 0 s'."""
    import os

    from meshctl.state import Decision, open_store_at

    [job_id] = submitted(cli, "w")
    with open_store_at(None, Path(os.environ["MESHCTL_HOME"])) as store:
        explanation = {"summary": "pending", "status": "pending", "forecast": forecast}
        store.record_decision(Decision(1.0, job_id, "pending", "", explanation))
    code, out, _ = run(cli, "explain", job_id)
    assert code == 0
    lines = [" ".join(line.split()) for line in out.splitlines()]
    assert [line for line in lines if "expected wait" in line or "assumed" in line] == said
    shown = json.loads(run(cli, "explain", job_id, "-o", "json")[1])
    assert shown["decision"]["forecast"] == forecast
