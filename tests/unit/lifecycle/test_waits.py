"""The wait forecast, against cases worked by hand: one on-prem pool of 8 GPUs."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from meshctl.lifecycle.waits import UNBOUNDED_WAIT_S, Backlog
from meshctl.model.policy import UNKNOWN_RUNTIME_S

pytestmark = pytest.mark.unit

NOW = 1_000.0


def backlog(running=(), queued=(), unknown_s: float = UNKNOWN_RUNTIME_S) -> Backlog:
    b = Backlog(unknown_s)
    for i, (end, gpus, *started) in enumerate(running):
        b.run(f"r{i}", "onprem", end, gpus, *started)
    for i, (priority, gpus, runtime) in enumerate(queued):
        b.queue(f"q{i}", priority, gpus, runtime)
    return b


CASES = [
    # (name, free GPUs, running (end, GPUs), queued (priority, GPUs, runtime), priority, wait)
    ("free GPUs and nothing ahead: no wait", 2, [(1500, 6)], [], 0, 0.0),
    ("full, nothing ahead: until the first end", 0, [(1300, 2), (1500, 6)], [], 0, 300.0),
    # 3 GPUs ahead (itself included): the first end frees 2, the second 6 more
    (
        "full, 3 GPUs ahead: until enough has ended",
        0,
        [(1300, 2), (1500, 6)],
        [(0, 3, 100)],
        0,
        500.0,
    ),
    # the high-priority job sees only the 1 GPU ahead of it, not the 8 of the low ones
    (
        "a higher priority sees less ahead",
        0,
        [(1300, 2), (1500, 6)],
        [(0, 8, 100), (10, 1, 100)],
        10,
        300.0,
    ),
    # 16 GPUs ahead, 8 freed by 1500: one more wave of the mean queued runtime (600 s)
    (
        "more ahead than will end: waves of the queue's runtime",
        0,
        [(1300, 2), (1500, 6)],
        [(0, 8, 600), (0, 8, 600)],
        0,
        500.0 + 600.0,
    ),
    # started at 600, its runtime unknown: it is taken to run 2 h more, though it has run
    # only 400 s (as long again, the wait would be 400 s)
    (
        "a running job with no estimate runs at least the policies' unknown runtime more",
        0,
        [(None, 8, 600.0)],
        [],
        0,
        UNKNOWN_RUNTIME_S,
    ),
    # started 3 h before: it is taken to run as long again, 3 h more
    (
        "one that has run longer than that runs as long again as it has",
        0,
        [(None, 8, NOW - 3 * 3600.0)],
        [],
        0,
        3 * 3600.0,
    ),
    # 16 GPUs ahead, no runtime known for them: waves as long as the running jobs have left
    (
        "more ahead than will end, no runtime known: the running jobs' time left",
        0,
        [(1300, 2), (1500, 6)],
        [(0, 8, None), (0, 8, None)],
        0,
        500.0 + 400.0,
    ),
    # as above, one of the running jobs with no runtime known: it has at least 2 h left
    (
        "the time left of a running job with no runtime known is the unknown runtime",
        0,
        [(1300, 2), (None, 6, 900.0)],
        [(0, 8, None), (0, 8, None)],
        0,
        UNKNOWN_RUNTIME_S + (300.0 + UNKNOWN_RUNTIME_S) / 2,
    ),
    ("an end in the past reads as now", 0, [(900, 8)], [], 0, 0.0),
]


@pytest.mark.parametrize(
    ("free", "running", "queued", "priority", "wait"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_the_forecast_wait(free, running, queued, priority, wait) -> None:
    waits = backlog(running, queued).waits({"onprem": (8.0, float(free))}, (), NOW)
    assert waits.of(priority)["onprem"] == pytest.approx(wait)


def test_a_pool_with_no_node_up_has_no_bound_and_a_cloud_pool_none_at_all() -> None:
    waits = backlog([(1500, 8)]).waits({"onprem": (0.0, 0.0), "aws": (0.0, 0.0)}, ["aws"], NOW)
    assert waits.lowest() == {"onprem": UNBOUNDED_WAIT_S, "aws": 0.0}


def test_one_stuck_gang_does_not_open_the_gate_for_a_job_ahead_of_it() -> None:
    # a 16-GPU gang of low priority waits behind a job ending at 1100; a high-priority 1-GPU
    # job sees only its own GPU ahead: 100 s. Behind the gang (17 GPUs ahead, 8 freed by
    # 1100): two more waves as long as the running job had left (100 s each).
    waits = backlog([(1100, 8)], [(0, 16, None), (100, 1, None)]).waits(
        {"onprem": (8.0, 0.0)}, (), NOW
    )
    assert waits.of(100)["onprem"] == pytest.approx(100.0)
    assert waits.of(0)["onprem"] == pytest.approx(100.0 + 2 * 100.0)


def test_a_pool_full_of_jobs_without_runtimes_is_not_about_to_free_up() -> None:
    """Issue 45's case: 16 of 16 GPUs held by four jobs that declared no runtime, started
    11 s before; a best-effort job's wait was 11 s ("as long again"), so a burst gate of
    600 s stayed shut for ten minutes. Each is now assumed to run at least 2 h more, or what
    the policies set; the forecast says how many it assumed so."""
    fillers = [(None, 4, NOW - 11.0)] * 4
    capacity = {"onprem": (16.0, 0.0), "aws": (0.0, 0.0)}
    waits = backlog(fillers, [(0, 1, None)]).waits(capacity, ["aws"], NOW)
    assert waits.lowest() == {"onprem": UNKNOWN_RUNTIME_S, "aws": 0.0}
    assert (waits.assumed, waits.unknown_runtime_s) == ({"onprem": 4}, UNKNOWN_RUNTIME_S)
    set_by_policy = backlog(fillers, [(0, 1, None)], unknown_s=900.0)
    assert set_by_policy.waits(capacity, ["aws"], NOW).lowest()["onprem"] == 900.0


@given(
    st.lists(
        st.tuples(
            st.one_of(st.none(), st.floats(0, 5000)),
            st.sampled_from([1.0, 2.0, 4.0]),
            st.floats(0, 1000),
        ),
        max_size=12,
    ),
    st.lists(st.tuples(st.sampled_from([0, 10]), st.sampled_from([1.0, 4.0])), max_size=12),
    st.sampled_from([30.0, 300.0, UNKNOWN_RUNTIME_S]),
)
def test_kept_or_built_afresh_the_forecast_is_the_same(running, queued, unknown_s) -> None:
    """The simulator keeps the backlog as jobs come and go; the controller builds it each
    cycle: both must say the same, whatever the policies assume of a job with no runtime
    (with 30 s, jobs started up to 1,000 s before run as long again)."""
    kept = Backlog(unknown_s)
    for i, (end, gpus, started) in enumerate(running):
        kept.run(f"r{i}", "onprem", end, gpus, started)
        kept.run(f"gone{i}", "onprem", None if end is None else end + 1, gpus, started + 1)
    for i, (priority, gpus) in enumerate(queued):
        kept.queue(f"q{i}", priority, gpus, 300.0)
        kept.queue(f"x{i}", priority, gpus, None)
    for i in range(len(running)):
        kept.stop(f"gone{i}")
    for i in range(len(queued)):
        kept.dequeue(f"x{i}")
    fresh = backlog(running, [(p, g, 300.0) for p, g in queued], unknown_s)
    capacity = {"onprem": (16.0, 0.0)}
    assert kept.waits(capacity, (), NOW) == fresh.waits(capacity, (), NOW)
