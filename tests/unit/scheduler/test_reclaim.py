"""Reclaim within a cohort (scheduler/reclaim.py): a team below its nominal quota takes back
what the other teams of its cohort borrowed, whatever their priority unless its policy says
otherwise, the least work lost first, never more than a borrower borrowed but for its last
job; with no policy that allows preemption at all (``Permissive``)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from meshctl.model.policy import Reclaim, TeamQuota
from meshctl.scheduler import Permissive, schedule
from meshctl.scheduler.plan import Preempt
from tests.unit.scheduler.sched_helpers import node, pending, running, snapshot

pytestmark = pytest.mark.unit

NOW = 1000.0


def quotas(mode: str = "any", **limits: float) -> dict[str, TeamQuota]:
    """Two teams of 4 GPUs in one cohort: ``lender`` reclaims as ``mode`` says."""
    return {
        "lender": TeamQuota(team="lender", cohort="c", gpus=4, reclaim=mode),  # type: ignore[arg-type]
        "borrower": TeamQuota(team="borrower", cohort="c", gpus=4, **limits),
    }


def borrowed_node(*, priority: int = 0, started: float = 0.0, checkpoint: float | None = None):
    """One 8-GPU node the borrower fills: 8 one-GPU jobs, 4 of them beyond its quota."""
    return [
        running(f"b{i}", "n1", [i], team="borrower", priority=priority, started=started,
                checkpoint=checkpoint)
        for i in range(8)
    ]  # fmt: skip


def plan_for(jobs, run, mode: str = "any", settings: Reclaim | None = None, **limits: float):
    view = Permissive(quotas=quotas(mode, **limits), reclaim=settings or Reclaim())
    return schedule(snapshot([node("n1")], jobs, run, now=NOW), view)


def victims(plan) -> list[str]:
    return sorted(a.victim_job_id for a in plan.actions if isinstance(a, Preempt))


def test_a_lender_takes_back_what_it_needs_and_no_more():
    plan = plan_for([pending("l", 2, team="lender", priority=0)], borrowed_node())
    assert len(victims(plan)) == 2
    decision = plan.decisions["l"]
    assert decision.status == "preempting"
    assert decision.reason.startswith("reclaimed for team lender, below its quota: 0 of 4 GPUs")
    (first, _) = [a for a in plan.actions if isinstance(a, Preempt)]
    assert (first.for_job_id, first.grace_s) == ("l", 120.0)
    assert first.rule == "reclaimed for team lender, below its quota: 0 of 4 GPUs"


def test_the_least_work_lost_goes_first_and_a_job_with_no_checkpoint_last():
    run = borrowed_node(checkpoint=900.0)  # each has lost 100 GPU-seconds
    run[3] = running("b3", "n1", [3], team="borrower", checkpoint=990.0)  # 10 lost
    run[5] = running("b5", "n1", [5], team="borrower")  # no checkpoint: least "lost" is moot
    run[6] = running("b6", "n1", [6], team="borrower", checkpoint=995.0)  # 5 lost
    plan = plan_for([pending("l", 2, team="lender")], run)
    assert victims(plan) == ["b3", "b6"]


def test_a_borrower_loses_no_more_than_it_borrowed():
    # a 6-GPU node the borrower fills: 2 beyond its 4; the lender needs 3, one more than that
    full = borrowed_node()[:6]
    view = Permissive(quotas=quotas())
    plan = schedule(snapshot([node("n1", gpus=6)], [pending("l", 3, team="lender")], full,
                             now=NOW), view)  # fmt: skip
    assert victims(plan) == []  # nothing taken for nothing: it waits
    assert plan.decisions["l"].status == "pending"
    plan = schedule(snapshot([node("n1", gpus=6)], [pending("l", 2, team="lender")], full,
                             now=NOW), view)  # fmt: skip
    assert len(victims(plan)) == 2


def test_beyond_its_own_quota_a_team_reclaims_nothing():
    mine = [running("l0", "n1", [0], team="lender"), running("l1", "n1", [1], team="lender")]
    theirs = [running(f"b{i}", "n1", [i], team="borrower") for i in range(2, 8)]
    plan = plan_for([pending("l", 3, team="lender")], mine + theirs)  # 2 + 3 > 4
    assert victims(plan) == []


MODES = [
    # id, the lender's reclaim, the borrower's priority against the lender's 0, whether taken
    pytest.param("any", 100, True, id="any: even a job of higher priority"),
    pytest.param("lower-priority", 100, False, id="lower-priority: not a higher one"),
    pytest.param("lower-priority", -1, True, id="lower-priority: a lower one"),
    pytest.param("never", -1, False, id="never"),
]  # fmt: skip


@pytest.mark.parametrize(("mode", "priority", "taken"), MODES)
def test_the_lenders_policy_says_whom_it_may_take_from(mode: str, priority: int, taken: bool):
    plan = plan_for([pending("l", 1, team="lender")], borrowed_node(priority=priority), mode)
    assert bool(victims(plan)) is taken


def test_a_job_is_reclaimed_only_once_it_ran_its_minimum():
    settings = Reclaim(min_runtime_s=600.0, grace_s=30.0)
    young = borrowed_node(started=NOW - 599.0)
    assert victims(plan_for([pending("l", 1, team="lender")], young, settings=settings)) == []
    old = borrowed_node(started=NOW - 600.0)
    plan = plan_for([pending("l", 1, team="lender")], old, settings=settings)
    assert [a.grace_s for a in plan.actions if isinstance(a, Preempt)] == [30.0]


def test_a_team_outside_any_cohort_reclaims_nothing():
    view = Permissive(quotas={"lender": TeamQuota(team="lender", gpus=4)})
    plan = schedule(snapshot([node("n1")], [pending("l", 1, team="lender")], borrowed_node(),
                             now=NOW), view)  # fmt: skip
    assert victims(plan) == []


def test_jobs_leaving_already_are_counted_out_of_what_a_borrower_holds():
    # 2 of the borrower's 8 are on their way out: it keeps 6, 2 beyond its quota
    run = [r if i >= 2 else _leaving(r) for i, r in enumerate(borrowed_node())]
    plan = plan_for([pending("l", 4, team="lender")], run)
    assert victims(plan) == []  # the 2 leaving free 2, 2 more may be taken: 4, but the node
    # is full until the leaving ones stop; the lender may take 2 only, which is not enough
    plan = plan_for([pending("l", 2, team="lender")], run)
    assert len(victims(plan)) == 2


def test_a_job_whose_nodes_are_being_freed_waits_for_them():
    from dataclasses import replace

    run = [r if i >= 2 else _leaving(r) for i, r in enumerate(borrowed_node())]
    job = replace(pending("l", 2, team="lender"), nominated=("n1",))
    plan = plan_for([job], run)
    assert plan.decisions["l"].reason == "waiting for n1 to be freed for it"
    assert victims(plan) == []


def _leaving(job):
    from dataclasses import replace

    return replace(job, leaving=True)


def test_what_a_lender_waits_for_is_not_lent_again():
    """The GPUs reclaimed are free at last; the borrower's job asks again (of a higher
    priority, so first in the queue). The lender's waiting job is owed them: they are not
    lendable, and the borrower waits."""
    run = borrowed_node()[2:]  # two of the borrower's were reclaimed and stopped
    again = pending("b0", 1, team="borrower", priority=100)
    plan = plan_for([again, pending("l", 2, team="lender", at=1.0)], run)
    assert [a.job_id for a in plan.placed()] == ["l"]
    assert plan.decisions["b0"].blocked_by == "quota"
    assert victims(plan) == []


# --- what holds of every reclaim ---------------------------------------------------------------

TEAMS = ("lender", "b", "c", "alone")  # alone: in no cohort


@st.composite
def meshes(draw: st.DrawFn):
    """Two 8-GPU nodes full or part full of one-, two- and four-GPU jobs of four teams, each
    job of some priority, start and checkpoint; quotas for the three of the cohort."""
    run, n = [], 0
    for name in ("n1", "n2"):
        free = list(range(8))
        while len(free) > draw(st.sampled_from([0, 0, 0, 1, 2])):  # mostly full
            size = draw(st.sampled_from([g for g in (1, 2, 4) if g <= len(free)]))
            held, free = free[:size], free[size:]
            run.append(running(
                f"r{n}", name, held, team=draw(st.sampled_from(TEAMS)),
                priority=draw(st.integers(-1, 1)), started=draw(st.sampled_from([0.0, 900.0])),
                checkpoint=draw(st.sampled_from([None, 500.0, 990.0])),
            ))  # fmt: skip
            n += 1
    quota = {t: TeamQuota(team=t, cohort="c", gpus=draw(st.sampled_from([2, 4, 6])),
                          reclaim=draw(st.sampled_from(["any", "lower-priority"])))
             for t in TEAMS[:3]}  # fmt: skip
    job = pending("j", draw(st.sampled_from([1, 2, 4])), team="lender", priority=0)
    return run, quota, job


@settings(max_examples=200, deadline=None)
@given(meshes())
def test_a_reclaim_takes_only_what_is_owed_from_borrowers_and_frees_enough(drawn):
    run, quota, job = drawn
    view = Permissive(quotas=quota, reclaim=Reclaim(min_runtime_s=300.0))
    plan = schedule(snapshot([node("n1"), node("n2")], [job], run, now=NOW), view)
    taken = [next(r for r in run if r.job_id == v) for v in victims(plan)]
    if not taken:
        return
    holds = {t: sum(r.gpus for r in run if r.team == t) for t in TEAMS}
    assert holds["lender"] + job.request.total_gpus <= quota["lender"].gpus  # its own only
    for team in {v.team for v in taken}:
        assert team in ("b", "c")  # of its cohort, not itself, not a team in none
        lost = sorted(v.gpus for v in taken if v.team == team)
        borrowed = holds[team] - quota[team].gpus
        assert sum(lost[:-1]) < borrowed  # never more than it borrowed but for its last job
    for victim in taken:
        assert NOW - victim.started_at_s >= 300.0
        if quota["lender"].reclaim == "lower-priority":
            assert victim.priority < job.priority
    [decision] = [plan.decisions["j"]]
    assert decision.status == "preempting"
    (node_name,) = {a.node for v in taken for a in v.allocations}  # one node freed for it
    on_it = [r for r in run if any(a.node == node_name for a in r.allocations)]
    free_after = 8 - sum(r.gpus for r in on_it) + sum(v.gpus for v in taken)
    assert free_after >= job.request.total_gpus
