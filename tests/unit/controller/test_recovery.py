"""A train job's recoveries, from what it recorded and the controller's events."""

from __future__ import annotations

import pytest

from meshctl.controller.recovery import history

pytestmark = pytest.mark.unit


def test_a_restart_inside_an_attempt_and_a_resubmission_across_attempts() -> None:
    recorded = {
        "progress": {
            1: {
                "attempt": 1, "step": 47, "first_report_s": 101.0, "last_report_s": 150.0,
                "checkpoints": [{"path": "/c/ck-19", "step": 19}, {"path": "/c/ck-39", "step": 39}],
                "failures": [{"at_s": 126.0, "error": "worker 1 died", "step": 25,
                              "last_report_s": 125.5, "resumed_s": 131.0}],
            },
            2: {"attempt": 2, "step": 59, "first_report_s": 160.0, "last_report_s": 172.0,
                "checkpoints": [{"path": "/c/ck-59", "step": 59}], "failures": []},
        },
        "starts": [
            {"attempt": 1, "at_s": 100.0, "checkpoint": None},
            {"attempt": 1, "at_s": 129.0, "checkpoint": "/c/ck-19"},
            {"attempt": 2, "at_s": 158.0, "checkpoint": "/c/ck-39"},
        ],
    }  # fmt: skip
    events = [
        {"at_s": 90.0, "kind": "job.running", "message": "started"},
        {"at_s": 153.0, "kind": "job.evicted", "message": "node n1 is dead"},
    ]
    attempts, recoveries = history(recorded, events)
    assert [(a.attempt, a.resumed_from_step, a.restarts, a.last_step) for a in attempts] == [
        (1, None, 1, 47),
        (2, 39, 0, 59),
    ]
    inside, across = sorted(recoveries, key=lambda r: r.cause.startswith("node"))
    assert (inside.attempt, inside.steps_lost, inside.resumed_from_step) == (1, 6, 19)
    assert inside.detect_s == pytest.approx(0.5)
    assert inside.resume_s == pytest.approx(5.0)
    assert (across.attempt, across.cause, across.steps_lost) == (2, "node n1 is dead", 8)
    assert across.detect_s == pytest.approx(3.0)  # last report 150, evicted at 153
    assert across.resume_s == pytest.approx(7.0)  # first report of attempt 2 at 160


def test_a_run_that_never_failed_has_no_recoveries() -> None:
    recorded = {
        "progress": {1: {"attempt": 1, "step": 9, "checkpoints": [], "failures": []}},
        "starts": [{"attempt": 1, "at_s": 1.0, "checkpoint": None}],
    }
    attempts, recoveries = history(recorded, [])
    assert recoveries == []
    assert attempts[0].resumed_from_step is None


def test_a_failure_ray_train_saw_but_did_not_resume_counts_for_the_next_attempt() -> None:
    recorded = {
        "progress": {
            1: {"attempt": 1, "step": 32, "last_report_s": 100.0,
                "checkpoints": [{"path": "/c/29", "step": 29}],
                "failures": [{"at_s": 101.0, "step": 32, "last_report_s": 100.0,
                              "resumed_s": None, "error": "worker health check failed"}]},
            2: {"attempt": 2, "step": 59, "first_report_s": 110.0, "checkpoints": [],
                "failures": []},
        },
        "starts": [{"attempt": 1, "at_s": 90.0, "checkpoint": None},
                   {"attempt": 2, "at_s": 108.0, "checkpoint": "/c/29"}],
    }  # fmt: skip
    events = [{"at_s": 104.0, "kind": "job.evicted", "message": "node n-1 is dead"}]
    _, recoveries = history(recorded, events)
    [recovery] = recoveries
    assert (recovery.attempt, recovery.steps_lost, recovery.cause) == (2, 3, "node n-1 is dead")
    assert recovery.detect_s == pytest.approx(1.0)  # Ray Train's health check, before the event
    assert recovery.resume_s == pytest.approx(9.0)


def test_an_eviction_with_a_grace_and_a_later_loss_are_each_told_by_their_own_cause() -> None:
    """Attempt 1 is evicted (its node unhealthy) at 120 and reports on through its grace to
    checkpoint until 150; attempt 2 then loses its node. Each recovery has its own cause."""
    recorded = {
        "progress": {
            1: {"attempt": 1, "step": 368, "first_report_s": 100.0, "last_report_s": 150.0,
                "checkpoints": [{"path": "/c/359", "step": 359}], "failures": []},
            2: {"attempt": 2, "step": 420, "first_report_s": 160.0, "last_report_s": 170.0,
                "checkpoints": [{"path": "/c/419", "step": 419}], "failures": []},
            3: {"attempt": 3, "step": 899, "first_report_s": 200.0, "checkpoints": [],
                "failures": []},
        },
        "starts": [{"attempt": 1, "at_s": 95.0, "checkpoint": None},
                   {"attempt": 2, "at_s": 155.0, "checkpoint": "/c/359"},
                   {"attempt": 3, "at_s": 195.0, "checkpoint": "/c/419"}],
    }  # fmt: skip
    events = [
        {"at_s": 120.0, "kind": "job.evicted", "message": "node n1 is unhealthy: agent: XID 79"},
        {"at_s": 180.0, "kind": "job.evicted", "message": "node n2 is dead"},
    ]
    _, recoveries = history(recorded, events)
    graceful, lost = recoveries
    assert (graceful.attempt, graceful.cause) == (2, "node n1 is unhealthy: agent: XID 79")
    assert (graceful.detect_s, graceful.resume_s) == (0.0, 10.0)  # stopped at 150, back at 160
    assert (graceful.steps_lost, lost.steps_lost) == (9, 1)
    assert (lost.attempt, lost.cause, lost.detect_s, lost.resume_s) == (
        3,
        "node n2 is dead",
        10.0,
        20.0,
    )


@pytest.mark.parametrize(
    ("pinned", "lost"),
    [({"path": "/c/ck-439", "step": 439}, 6), (None, None)],
    ids=["the failure names its checkpoint", "no step recorded for it: unknown, not all"],
)
def test_steps_lost_inside_an_attempt_after_its_checkpoint_rolled_off_the_list(
    pinned: dict[str, object] | None, lost: int | None
) -> None:
    """Reported: "steps lost 446" for a job that failed at step 445 and resumed from 439. It
    checkpointed every step, and by its end the latest checkpoints the attempt records no
    longer held 439: the resume was counted as one from scratch."""
    latest = [{"path": f"/c/ck-{s}", "step": s} for s in range(880, 900)]
    recorded = {
        "progress": {
            1: {"attempt": 1, "step": 899, "first_report_s": 1.0, "last_report_s": 900.0,
                "checkpoints": latest,
                "failures": [{"at_s": 446.0, "error": "worker 0 died", "step": 445,
                              "last_report_s": 445.5, "checkpoint": pinned,
                              "resumed_s": 452.0}]},
        },
        "starts": [{"attempt": 1, "at_s": 0.5, "checkpoint": None},
                   {"attempt": 1, "at_s": 450.0, "checkpoint": "/c/ck-439"}],
    }  # fmt: skip
    _, [recovery] = history(recorded, [])
    assert (recovery.last_step, recovery.steps_lost) == (445, lost)
