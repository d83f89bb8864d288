"""The job and node commands against the store alone (no cluster): bad input, the lifecycle
that needs no Ray (queue, cancel, wait), and what they print."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from meshctl.cli.app import app
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
        "can never run on this mesh",
    ),
    (
        "gang too big",
        ["submit", "--gpus", "4", "--nodes", "3", "--", "python", "x.py"],
        "can never run",
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
    ("unknown job", ["jobs", "show", "nope"], "job: no job with id 'nope'"),
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
    code, _, err = run(cli, "jobs", "cancel", job_id)
    assert (code, err.strip()) == (1, f"error: job {job_id} already cancelled")
    code, out, _ = run(cli, "jobs", "wait", job_id)
    assert (code, out.strip()) == (1, f"{job_id} cancelled")


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
    code, out, _ = run(cli, "controller", "run", "--once")
    assert code == 0
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
    assert data["pools"][0]["state"] == "not up (meshctl up starts it)"
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
