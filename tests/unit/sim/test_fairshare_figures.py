"""The figures of benchmarks/fairshare.py, on timelines small enough to work out by hand:
Jain's index, the owed episodes (time to fair share), the timeline read from recorded actions,
the quotas from virtual clusters' nodes, and reclaim losses shared among a job's stops."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from meshctl.lifecycle.actions import Leave, Left, Requeue, Start
from meshctl.sim.core.config import Result, Totals
from meshctl.sim.core.jobs import JobResult
from meshctl.sim.core.workload import SimJob

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[3]


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fairshare", ROOT / "benchmarks" / "fairshare.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["fairshare"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


fs = _load()


@pytest.mark.parametrize(
    ("shares", "expected"),
    [
        pytest.param([1.0, 1.0, 1.0], 1.0, id="equal"),
        pytest.param([1.0, 0.0], 0.5, id="one-has-all: 1/n"),
        pytest.param([2.0, 1.0], 0.9, id="(2+1)^2 / (2 * (4+1)) = 9/10"),
        pytest.param([0.0, 0.0], 1.0, id="nobody holds anything: equal"),
    ],
)
def test_jain(shares, expected) -> None:
    assert fs.jain(shares) == pytest.approx(expected)


def span(team: str, gpus: float, start: float, end: float, job: str = "") -> object:
    return fs.Span(job or f"{team}-{start}", team, gpus, start, end)


def test_an_owed_team_until_its_job_starts() -> None:
    # a (quota 8) holds 4 from 0 s; its 4-GPU job waits 100..400 s: owed for 300 s.
    # b (quota 8) waits 0..50 s for a 16-GPU job: more than its quota, never owed.
    line = fs.Timeline(
        held=[span("a", 4, 0, 1000), span("a", 4, 400, 1000, "a2"), span("b", 16, 50, 1000)],
        waiting=[span("a", 4, 100, 400, "a2"), span("b", 16, 0, 50)],
    )
    fair = fs.fairness(line, {"a": 8.0, "b": 8.0}, 1000.0, 100.0, 60.0)
    assert fair.episodes == [300.0]
    assert fair.episodes_open == 0
    # never two teams backlogged at one sample (b's job waited 50 s only): no index
    assert (fair.jain_index, fair.jain_samples) == (None, [])


def test_an_episode_open_at_the_window_end_counts_up_to_it() -> None:
    line = fs.Timeline(held=[], waiting=[span("a", 2, 700, 1000)])
    fair = fs.fairness(line, {"a": 8.0}, 1000.0, 100.0, 60.0)
    assert (fair.episodes, fair.episodes_open) == ([300.0], 1)


def test_jain_over_the_backlogged_teams_only() -> None:
    # from 0 s: a holds 8 of quota 8 (share 1), b 2 of quota 4 (0.5), c 0 of 4 (0, but never
    # waits: left out). Both a and b wait from 0 s; samples at 0, 100, 200: at 0 neither has
    # waited 60 s; at 100 and 200, J(1, 0.5) = 2.25 / (2 * 1.25) = 0.9.
    line = fs.Timeline(
        held=[span("a", 8, 0, 300), span("b", 2, 0, 300)],
        waiting=[span("a", 8, 0, 300, "aw"), span("b", 8, 0, 300, "bw")],
    )
    fair = fs.fairness(line, {"a": 8.0, "b": 4.0, "c": 4.0}, 250.0, 100.0, 60.0)
    assert fair.jain_samples == pytest.approx([0.9, 0.9])
    assert fair.jain_index == pytest.approx(0.9)


def job(name: str, team: str, gpus: float, arrival: float) -> SimJob:
    return SimJob(name, arrival, 100.0, gpus, 1, "train", "standard", team)


def result(jobs: list[JobResult], actions: list[tuple[float, object]]) -> Result:
    return Result(1000.0, jobs, [], Totals(), 8, actions)  # type: ignore[arg-type]


def test_the_timeline_from_starts_and_requeues() -> None:
    # x arrives at 10, starts at 20, is reclaimed (requeued at 200), starts again at 300 and
    # ends at 450; y is rejected; z never starts.
    x = JobResult(job("x", "a", 4, 10), first_start_s=20, end_s=450)
    y = JobResult(job("y", "b", 64, 0), rejected="too big")
    z = JobResult(job("z", "b", 2, 900))
    leave = Leave("x", Left.PREEMPTED, "for w (reclaimed for team b, ...)", 200, True, "w")
    acts = [(20.0, Start("x", "p", ())), (80.0, leave), (200.0, Requeue("x", "r", 0)),
            (300.0, Start("x", "p", ()))]  # fmt: skip
    line = fs.timeline(result([x, y, z], acts), 1000.0)
    assert [(s.job, s.start_s, s.end_s) for s in line.held] == [("x", 20, 200), ("x", 300, 450)]
    assert [(s.job, s.start_s, s.end_s) for s in line.waiting] == [
        ("x", 10, 20),
        ("x", 200, 300),
        ("z", 900, 1000),
    ]


def test_reclaim_losses_are_shared_among_a_jobs_stops() -> None:
    reclaimed = Leave("x", Left.PREEMPTED, "for w (reclaimed for team b, below ...)", 0, True, "w")
    by_rule = Leave("x", Left.PREEMPTED, "for v (anything-over-best-effort)", 0, True, "v")
    only = Leave("u", Left.PREEMPTED, "for w (reclaimed for team b, below ...)", 0, True, "w")
    x = JobResult(job("x", "a", 4, 0), lost_gpu_s=7200.0)  # 2 GPU-h: 1 reclaim of 2 stops
    u = JobResult(job("u", "a", 4, 0), lost_gpu_s=3600.0)  # 1 GPU-h: all of it
    v = JobResult(job("v", "a", 4, 0), lost_gpu_s=3600.0)  # never reclaimed
    acts = [(1.0, reclaimed), (2.0, by_rule), (3.0, only)]
    assert fs.reclaim_losses(result([x, u, v], acts)) == (2.0, 2, 1)


@pytest.mark.parametrize(
    ("teams", "gpus", "expected"),
    [
        # nodes 64, 32, 16, 8 (120 in all): 100 GPUs -> 53.3, 26.7, 13.3, 6.7 -> remainders
        pytest.param(["a", "b"], 100, {"a": 53, "b": 27, "other": 20}, id="other-gets-the-rest"),
        pytest.param(
            ["a", "b", "c", "d"], 120, {"a": 64, "b": 32, "c": 16, "d": 8, "other": 0}, id="exact"
        ),
        pytest.param(["a", "zz"], 10, {"a": 5, "zz": 0, "other": 5}, id="no-nodes-no-quota"),
    ],
)
def test_quotas_in_proportion_to_nodes(teams, gpus, expected) -> None:
    quotas = fs.quotas_of({"a": 64, "b": 32, "c": 16, "d": 8}, teams, gpus)
    assert quotas == expected
    assert sum(quotas.values()) == gpus


def test_the_busiest_groups_by_gpu_hours_in_the_window() -> None:
    from meshctl.sim.core.workload import TraceJob

    jobs = [
        TraceJob("1", 0.0, 10_000.0, 1.0, "long"),  # cut at the window's end: 100 GPU-s
        TraceJob("2", 0.0, 30.0, 4.0, "wide"),  # 120 GPU-s
        TraceJob("3", 50.0, 10.0, 1.0, "small"),
        TraceJob("4", 0.0, 500.0, 8.0, None),
    ]
    assert fs.busiest(jobs, 100.0, 2) == ["wide", "long"]
