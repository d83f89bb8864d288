"""A ``RunningUsage`` kept between cycles is exactly a fresh sum: after any run of snapshots
(jobs admitted, finished, preempted or resized, listed in any order, with any figures), each
team's use is what ``team_usage`` sums afresh, and both are the correctly rounded exact sums
(so neither depends on the order the running jobs are listed in); and a cycle plans the same
with a kept usage as without one."""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sched_helpers import node, pending, req

from meshctl.scheduler import Allocation, Permissive, Running, Snapshot, schedule
from meshctl.scheduler.usage import RunningUsage, figures, team_usage

pytestmark = pytest.mark.unit

TEAMS = ("vision", "search", "ads")
FIGURES = st.floats(0.0, 1e6, allow_nan=False, allow_infinity=False) | st.sampled_from(
    [0.1, 0.2, 0.3, 0.25, 1 / 3, 1e-300]  # sums a float total gets wrong
)


@st.composite
def jobs(draw: st.DrawFn, job_id: str) -> Running:
    request = req(draw(FIGURES), draw(st.integers(1, 4)), cpus=draw(FIGURES),
                  memory=draw(FIGURES), gpu_memory=draw(FIGURES))  # fmt: skip
    alloc = Allocation("n0", (0,), 1.0, 1.0, 1.0, 0.0)
    return Running(job_id, draw(st.sampled_from(TEAMS)), 0, "onprem", (alloc,), request, 0.0)


# admit a new job, finish one, preempt one (a new object, leaving), shuffle the listing, or
# list one job object twice
STEPS = st.sampled_from(["admit", "admit", "finish", "preempt", "shuffle", "twice"])


def _exact(running: list[Running]) -> dict[str, list[float]]:
    sums: dict[str, list[Fraction]] = {}
    for job in running:
        team = sums.setdefault(job.team, [Fraction(0)] * 4)
        for i, value in enumerate(figures(job.request)):
            team[i] += Fraction(value)
    return {team: [float(s) for s in figures_] for team, figures_ in sums.items()}


@settings(max_examples=200, deadline=None)
@given(st.data(), st.lists(STEPS, max_size=25))
def test_a_kept_usage_is_a_fresh_sum(data: st.DataObject, steps: list[str]) -> None:
    running: list[Running] = []
    kept = RunningUsage()
    for n, step in enumerate(steps):
        if step == "admit" or not running:
            running.append(data.draw(jobs(f"j{n}")))
        else:
            at = data.draw(st.integers(0, len(running) - 1))
            if step == "finish":
                del running[at]
            elif step == "preempt":
                running[at] = replace(running[at], leaving=True)
            elif step == "shuffle":
                running = data.draw(st.permutations(running))
            else:
                running.append(running[at])
        extra = {"vision": (2.0, 16.0)}
        snap = Snapshot(0.0, (), running=tuple(running), team_usage=extra)
        fresh = team_usage(snap)
        assert team_usage(snap, kept) == fresh
        expected = _exact(running)
        expected.setdefault("vision", [0.0] * 4)
        expected["vision"][0] += 2.0
        expected["vision"][3] += 16.0
        assert fresh == expected


def test_a_team_whose_jobs_all_ended_is_gone() -> None:
    kept = RunningUsage()
    job = Running("a", "vision", 0, "onprem", (), req(2), 0.0)
    kept.update((job,))
    assert kept.update(()).sums() == {}


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sets(st.integers(0, 7)), min_size=1, max_size=6))
def test_a_cycle_plans_the_same_with_a_kept_usage(steps: list[set[int]]) -> None:
    nodes = tuple(node(f"n{i}", "onprem", gpus=8) for i in range(4))
    pool = [Running(f"r{k}", TEAMS[k % 3], 0, "onprem", (), req(k % 3 + 1), 0.0) for k in range(8)]
    waiting = tuple(
        pending(f"j{k}", (1, 2, 4)[k % 3], team=TEAMS[k % 2], at=float(k)) for k in range(9)
    )
    kept = RunningUsage()
    for chosen in steps:
        snap = Snapshot(1000.0, nodes, running=tuple(pool[k] for k in sorted(chosen)),
                        pending=waiting)  # fmt: skip
        fresh, reused = schedule(snap, Permissive()), schedule(snap, Permissive(), usage=kept)
        assert reused.actions == fresh.actions
        assert {k: d.summary() for k, d in reused.decisions.items()} == {
            k: d.summary() for k, d in fresh.decisions.items()
        }
