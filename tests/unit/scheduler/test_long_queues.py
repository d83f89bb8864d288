"""What keeps a cycle cheap with thousands of jobs waiting: the queue depth, explanations
that can be turned off, and preemption's branch and bound, which must find the same victim
set as trying every node."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sched_helpers import node, pending, req, running, snapshot

from meshctl.scheduler import Permissive, SchedulerConfig, preempt, schedule
from meshctl.scheduler.snapshot import Running
from meshctl.scheduler.working import NodeState

pytestmark = pytest.mark.unit


def test_the_queue_depth_decides_only_the_first_jobs_in_queue_order() -> None:
    nodes = [node("n1", gpus=2)]
    jobs = [pending(f"j{i}", at=float(i)) for i in range(5)]
    plan = schedule(snapshot(nodes, jobs), Permissive(), SchedulerConfig(queue_depth=3))
    assert sorted(plan.decisions) == ["j0", "j1", "j2"]
    assert [p.job_id for p in plan.placed()] == ["j0", "j1"]
    every = schedule(snapshot(nodes, jobs), Permissive())
    assert sorted(every.decisions) == ["j0", "j1", "j2", "j3", "j4"]


def test_without_explanations_a_waiting_job_has_no_filter_counts_but_the_same_outcome() -> None:
    nodes = [node("n1", gpus=1)]
    jobs = [pending("a", at=0.0), pending("b", at=1.0)]
    explained = schedule(snapshot(nodes, jobs), Permissive())
    quiet = schedule(snapshot(nodes, jobs), Permissive(), SchedulerConfig(explain=False))
    assert explained.decisions["b"].filtered
    assert not quiet.decisions["b"].filtered
    assert [p.job_id for p in quiet.placed()] == [p.job_id for p in explained.placed()] == ["a"]
    assert quiet.decisions["b"].status == explained.decisions["b"].status == "pending"


def exhaustive(req_, nodes, running_on, now, allowed, priority):
    """The reference: every node tried, the cheapest set per gang node."""
    taken: set[str] = set()
    lent: dict[str, int] = {}
    picked: list[preempt.VictimSet] = []
    for _ in range(req_.nodes):
        options = [
            found
            for n in nodes
            if n.name not in {p.node for p in picked}
            if (
                found := preempt._on_node(
                    n, req_, running_on.get(n.name, []), now, allowed, taken, priority, lent
                )
            )
        ]
        if not options:
            return None
        best = min(options, key=lambda o: (o.cost, o.node))
        picked.append(best)
        for victim, lends in zip(best.victims, best.lends, strict=True):
            if lends:
                lent[victim.job_id] = lent.get(victim.job_id, 0) + 1
            else:
                taken.add(victim.job_id)
    return picked


victims_st = st.lists(
    st.tuples(
        st.integers(0, 5),  # node
        st.integers(1, 4),  # GPUs
        st.sampled_from([0, 100, 200, 500]),  # priority
        st.floats(0, 900),  # started
        st.booleans(),  # allowed by policy
        st.booleans(),  # elastic: lends its node rather than being preempted
    ),
    max_size=20,
)


@settings(max_examples=150, deadline=None)
@given(victims_st, st.integers(1, 8), st.integers(1, 2), st.sampled_from([150, 300, 600]))
def test_branch_and_bound_finds_the_same_victims_as_trying_every_node(
    drawn, gpus, nodes_wanted, priority
) -> None:
    nodes = [node(f"n{i}", gpus=8) for i in range(6)]
    free = {n.name: list(range(8)) for n in nodes}
    jobs: list[Running] = []
    refused: set[str] = set()
    for i, (where, g, prio, started, ok, lends) in enumerate(drawn):
        name = f"n{where}"
        if len(free[name]) < g:
            continue
        held, free[name] = free[name][:g], free[name][g:]
        job = running(f"v{i}", name, held, priority=prio, started=started)
        jobs.append(dataclasses.replace(job, elastic_min=0) if lends else job)
        if not ok:
            refused.add(f"v{i}")
    snap = snapshot(nodes, [], jobs)
    states = [NodeState(n) for n in snap.nodes]
    running_on: dict[str, list[Running]] = {}
    for job in jobs:
        running_on.setdefault(job.allocations[0].node, []).append(job)

    def allowed(victim: Running) -> tuple[bool, float, str | None]:
        return victim.job_id not in refused, 30.0, "rule"

    want = req(gpus, nodes_wanted)
    got = preempt.plan_preemption(want, states, running_on, 1000.0, allowed, priority)
    assert got == exhaustive(want, states, running_on, 1000.0, allowed, priority)


class _Forgetful(set):  # type: ignore[type-arg]
    """A memo that never remembers: the cycle then tries every job in full."""

    def add(self, item: object) -> None:
        pass


jobs_st = st.lists(
    st.tuples(st.sampled_from([1, 2, 4, 8]), st.integers(0, 3), st.booleans()),
    min_size=1,
    max_size=14,
)


@settings(max_examples=150, deadline=None)
@given(jobs_st, st.lists(st.integers(0, 8), min_size=3, max_size=3))
def test_the_memo_of_requests_that_found_no_place_changes_no_decision(drawn, busy) -> None:
    import meshctl.scheduler.cycle as cycle

    nodes = [node(f"n{i}", gpus=8) for i in range(3)]
    run = [running(f"r{i}", f"n{i}", list(range(b))) for i, b in enumerate(busy) if b]
    jobs = []
    for i, (gpus, at, nominee) in enumerate(drawn):
        p = pending(f"j{i:02d}", gpus, at=float(at))
        if nominee and i % 3 == 0:
            p = type(p)(
                p.job_id, p.team, p.priority, p.request, p.submitted_at_s, None, False, ("n0",)
            )
        jobs.append(p)
    snap = snapshot(nodes, jobs, run)
    remembered = schedule(snap, Permissive())
    original = cycle._Cycle.__init__

    def forgetful(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        original(self, *args, **kwargs)
        self.unplaceable = _Forgetful()

    cycle._Cycle.__init__ = forgetful  # type: ignore[method-assign]
    try:
        full = schedule(snap, Permissive())
    finally:
        cycle._Cycle.__init__ = original  # type: ignore[method-assign]
    assert remembered.actions == full.actions


def test_a_node_no_longer_held_after_its_nominee_is_placed_takes_the_next_job() -> None:
    # n0 is being freed for x; a (first in the queue) may not use it and finds no place; x is
    # placed on half of n0, which is held for nobody after that; b, asking what a asked, fits.
    nodes = [node(f"n{i}", gpus=8) for i in range(3)]
    run = [running("r1", "n1", list(range(8))), running("r2", "n2", list(range(8)))]
    x = pending("x", 4, at=1.0)
    x = type(x)("x", x.team, x.priority, x.request, 1.0, None, False, ("n0",))
    jobs = [pending("a", 4, at=0.0), x, pending("b", 4, at=2.0)]
    for backfill in (False, True):  # a's backfill reservation must not take x's node either
        config = SchedulerConfig(backfill=backfill)
        plan = schedule(snapshot(nodes, jobs, run), Permissive(), config)
        assert [p.job_id for p in plan.placed()] == ["x", "b"]
