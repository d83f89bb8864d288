"""``meshctl queues`` (meshctl/app/queues.py): teams by cohort, what each holds, borrows from
its cohort and lends to it, what waits; from a store with jobs running, queued and done."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from meshctl.app.queues import held_and_waiting, tree
from meshctl.cli.app import app
from meshctl.model.policy import TeamQuota
from meshctl.state import AttemptRecord, JobRecord, JobState, open_store
from meshctl.state.records import AttemptDetail, Held

pytestmark = pytest.mark.unit

QUOTAS = {
    "vision": TeamQuota(team="vision", cohort="research", gpus=4, lending_limit_gpus=1),
    "llm": TeamQuota(team="llm", cohort="research", gpus=4),
    "nlp": TeamQuota(team="nlp", cohort="research", gpus=4, reclaim="never"),
    "search": TeamQuota(team="search", gpus=1),
}

LENT = [
    # id, GPUs used per team, what each team lends (its share of the cohort's borrowing)
    pytest.param({"llm": 6}, {"vision": 0.4, "llm": 0.0, "nlp": 1.6}, id="vision lends at most 1"),
    pytest.param({"llm": 6, "nlp": 4}, {"vision": 2.0, "llm": 0.0, "nlp": 0.0}, id="one lender"),
    pytest.param({"llm": 4}, {"vision": 0.0, "llm": 0.0, "nlp": 0.0}, id="nobody borrows"),
]  # fmt: skip


@pytest.mark.parametrize(("used", "lent"), LENT)
def test_what_a_cohort_borrows_is_lent_in_proportion_to_idle_quota(used, lent):
    (cohort,) = tree(QUOTAS, used, {})["cohorts"]
    assert {t["team"]: t["lent_gpus"] for t in cohort["teams"]} == lent
    assert cohort["borrowed_gpus"] == sum(lent.values())
    assert cohort["nominal_gpus"] == 12


def test_teams_in_no_cohort_and_teams_without_a_quota_stand_alone():
    document = tree(QUOTAS, {"ads": 2.0}, {"ads": (1, 4.0), "vision": (2, 3.0)})
    alone = {t["team"]: t for t in document["teams"]}
    assert set(alone) == {"ads", "search"}
    assert (alone["ads"]["nominal_gpus"], alone["ads"]["reclaim"]) == (None, None)
    assert (alone["ads"]["waiting_jobs"], alone["ads"]["waiting_gpus"]) == (1, 4.0)
    (cohort,) = document["cohorts"]
    assert (cohort["waiting_jobs"], cohort["waiting_gpus"]) == (2, 3.0)
    assert [t["reclaim"] for t in cohort["teams"]] == ["any", "never", "any"]  # llm, nlp, vision


def _job(job_id: str, team: str, state: JobState, gpus: float, nodes: int = 1) -> JobRecord:
    spec = {"spec": {"kind": "batch", "resources": {"gpus": gpus, "nodes": nodes}}}
    return JobRecord(job_id, job_id, team, state, 100, spec, "onprem", 0.0, 0.0)


def _attempt(job_id: str, state: str, gpus: int) -> AttemptRecord:
    held = AttemptDetail(allocations=(Held("n1", tuple(range(gpus))),))
    return AttemptRecord(f"{job_id}-1", job_id, 1, "onprem", f"meshctl-{job_id}", state, 0.0,
                         None, "", held)  # fmt: skip


def test_the_store_says_what_each_team_holds_and_waits_for(tmp_path: Path):
    with open_store(tmp_path) as store:
        store.create_all([
            _job("run", "llm", JobState.RUNNING, 2), _attempt("run", "running", 2),
            _job("gone", "llm", JobState.SUCCEEDED, 4), _attempt("gone", "succeeded", 4),
            _job("wait", "vision", JobState.PENDING, 2, nodes=2),
            _job("again", "vision", JobState.REQUEUED, 1),
        ])  # fmt: skip
        used, waiting = held_and_waiting(store)
    assert dict(used) == {"llm": 2.0}
    assert waiting == {"vision": (2, 5.0)}


def test_the_table_shows_each_cohort_with_its_teams_under_it(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("MESHCTL_HOME", str(tmp_path / "home"))
    shown = CliRunner().invoke(app, ["queues"])
    assert shown.exit_code == 0, shown.output
    lines = shown.stdout.splitlines()
    research = next(i for i, line in enumerate(lines) if "│ research " in line)
    assert "├─ llm" in lines[research + 1]
    assert "└─ vision" in lines[research + 2]
