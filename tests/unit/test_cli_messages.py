"""What commands say to people (issue 48, point 5): ``warning:`` only for warnings, plain
information as a plain line on stderr."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from meshctl.cli.app import app

pytestmark = pytest.mark.unit


def test_admin_users_add_prints_the_token_without_a_warning(cli: Any) -> None:
    result = cli.invoke(app, ["admin", "users", "add", "ana", "--team", "analytics"])
    assert result.exit_code == 0, result.output
    assert "warning" not in result.stderr
    assert result.stderr == "ana (user; analytics): their API token, shown this once:\n"
    token = result.stdout.strip()
    assert token
    assert "\n" not in token


def test_server_says_where_it_serves_without_a_warning(
    cli: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import meshctl.server.server as server

    def started(settings: Any, listen: Any, workers: int, on_ready: Any = None) -> None:
        on_ready()  # what serve does once its settings are in place, before uvicorn runs

    monkeypatch.setattr(server, "serve", started)
    result = cli.invoke(app, ["server", "--port", "8799"])
    assert result.exit_code == 0, result.output
    assert result.stderr == "serving http://127.0.0.1:8799 (1 process)\n"


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        pytest.param(1.9, "1s", id="under a minute: whole seconds"),
        pytest.param(17.0, "17s", id="no decimals, ever"),
        pytest.param(224.0, "3m44s", id="minutes and seconds"),
        pytest.param(366.4, "6m06s", id="seconds always two digits after minutes"),
        pytest.param(7260.0, "2h01m", id="hours and minutes"),
        pytest.param(538_844.0, "6d05h", id="days and hours, no thousands separator"),
        pytest.param(-3.0, "0s", id="a clock skew is no negative age"),
    ],
)
def test_an_age_has_one_format(seconds: float, shown: str) -> None:
    from meshctl.cli.render import ago

    assert ago(seconds) == shown


def _stored_jobs(home: Path, ages_s: list[float]) -> None:
    import time

    from meshctl.state import JobRecord, JobState, open_store

    now = time.time()
    with open_store(home) as store:
        store.create_all(
            [
                JobRecord(
                    f"j-{i:04d}",
                    f"j{i}",
                    "default",
                    JobState.PENDING,
                    200,
                    {},
                    None,
                    now - age,
                    now - age,
                )
                for i, age in enumerate(ages_s)
            ]
        )


def test_jobs_list_ages_share_one_format(cli: Any, tmp_path: Path) -> None:
    import re

    _stored_jobs(tmp_path / "home", [1.9, 17.0, 224.0, 366.4, 5000.0])
    result = cli.invoke(app, ["jobs", "list"])
    assert result.exit_code == 0, result.output
    ages = [line.split("│")[-2].strip() for line in result.stdout.splitlines() if "j-0" in line]
    assert len(ages) == 5
    assert all(re.fullmatch(r"\d+s|\d+m\d\ds|\d+h\d\dm|\d+d\d\dh", age) for age in ages), ages


def test_jobs_list_shows_the_newest_and_says_how_many_were_left_out(
    cli: Any, tmp_path: Path
) -> None:
    import json

    _stored_jobs(tmp_path / "home", [float(60 * i) for i in range(60)])
    table = cli.invoke(app, ["jobs", "list"])
    assert table.exit_code == 0, table.output
    assert sum("j-0" in line for line in table.stdout.splitlines()) == 50
    assert table.stderr == "the newest 50 of 60 jobs (--limit 0 shows every one)\n"
    three = cli.invoke(app, ["jobs", "list", "--limit", "3", "-o", "json"])
    assert [r["id"] for r in json.loads(three.stdout)] == ["j-0000", "j-0001", "j-0002"]
    every = cli.invoke(app, ["jobs", "list", "--limit", "0", "-o", "json"])
    assert len(json.loads(every.stdout)) == 60
    assert every.stderr == ""
    script = cli.invoke(app, ["jobs", "list", "-o", "json"])  # a script gets every job
    assert len(json.loads(script.stdout)) == 60
    assert script.stderr == ""
    negative = cli.invoke(app, ["jobs", "list", "--limit", "-1"])
    assert negative.exit_code == 2
    assert negative.stderr == "error: --limit: expected 0 (every job) or more, got -1\n"


def _status(events: int, reason: str) -> dict[str, Any]:
    """A status document (``controller.status.Status``) of a busy mesh: three pools, two
    unavailable with long reasons, a queue, ``events`` events."""
    pool = {"provider": "aws", "nodes": None, "gpus": None, "gpus_used": 0.0}
    return {
        "mesh": "local",
        "controller": {"pid": 4242, "last_cycle_at": None, "last_cycle_age_s": 0.4,
                       "cycle_s": 0.012, "errors": [], "policy_hash": "sha256:0123456789ab",
                       "policy_commit": None, "policies": "policies", "policy_error": None},
        "pools": [
            {**pool, "pool": "onprem", "provider": "local", "state": "up", "nodes": 3,
             "gpus": 16, "available": True, "reason": None},
            {**pool, "pool": "aws-burst", "state": "unavailable", "available": False,
             "reason": reason},
            {**pool, "pool": "gcp-burst", "provider": "gcp", "state": "unavailable",
             "available": False, "reason": reason},
        ],
        "jobs": {"pending": 3, "running": 2},
        "queue": [{"priority_class": "batch", "priority": 200, "queued": 3,
                   "oldest_wait_s": 61.0}],
        "budgets": [],
        "events": [
            {"occurred_at": "2026-12-06T10:00:00+00:00", "job_id": f"job-{i}",
             "kind": "job.running", "message": f"placed on onprem/gpu-rack1-{i} after a wait"}
            for i in range(events)
        ],
    }  # fmt: skip


@pytest.mark.parametrize("events", [0, 3, 10])
def test_status_watch_fits_80_by_24(events: int) -> None:
    import io

    from rich.console import Console

    from meshctl.cli.mesh_cmd import watched

    reason = "not set for a real account: image, subnets, security_groups (see pools check)"
    screen = watched(_status(events, reason), (80, 24))  # type: ignore[arg-type]
    out = io.StringIO()
    Console(file=out, width=80, height=24, soft_wrap=False).print(screen)
    lines = out.getvalue().splitlines()
    assert len(lines) <= 23, "\n".join(lines)
    assert all(len(line) <= 80 for line in lines)
    # 23 lines (one kept for the cursor): 3 of heading, 8 of pools, 6 of queue, and of the
    # events table 5 lines of frame and title: room for one event, the latest
    shown = [line for line in lines if "job-" in line]
    assert len(shown) == min(events, 1)
    assert all(f"job-{events - 1} " in line for line in shown)


@pytest.mark.parametrize(
    ("err", "most", "said"),
    [
        pytest.param(ConnectionError("peer closed\nTraceback ..."), 300,
                     "ConnectionError: peer closed", id="first line, with its type, no repr"),
        pytest.param(KeyError(), 300, "KeyError", id="a message that says nothing"),
        pytest.param(RuntimeError("the raylet on node gpu-rack1 stopped answering"), 40,
                     "RuntimeError: the raylet on node...", id="cut at a word, not mid-word"),
    ],
)  # fmt: skip
def test_an_error_in_words(err: Exception, most: int, said: str) -> None:
    from meshctl.errors import in_words

    assert in_words(err, most) == said
    assert len(said) <= most


def test_meshctl_errors_are_said_without_their_type() -> None:
    from meshctl.errors import CommandError, in_words

    assert in_words(CommandError("the pool onprem is not up")) == "the pool onprem is not up"
