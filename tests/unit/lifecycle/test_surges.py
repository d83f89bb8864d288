"""The lifecycle's surge rules: a plan's loans and growths as leaves, the lending ledger, and
the replica count a service's traffic asks for."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from meshctl.lifecycle import Left, effects, lending, serving
from meshctl.scheduler import Allocation, Grow, Plan, Running, Shrink
from meshctl.scheduler.request import Request

pytestmark = pytest.mark.unit


def lender(nodes: list[str], least: int = 1) -> Running:
    allocs = tuple(Allocation(n, (0,), 1.0, 1.0, 4.0, 0.0) for n in nodes)
    request = Request(1, 0, frozenset(), None, 1, 4, 0, len(nodes))
    return Running("tr", "t", 10, "onprem", allocs, request, 0.0, elastic_min=least)


def test_every_node_a_job_lends_in_one_plan_is_one_leave_after_the_shortest_grace():
    plan = Plan(100.0)
    plan.actions = [
        Shrink("tr", "s1", "n1", 30.0, "surge"),
        Shrink("tr", "s2", "n2", 10.0, "surge"),
    ]
    (leave,) = effects.of_plan(plan)
    assert leave.left is Left.RESIZED
    assert (leave.stop_at_s, leave.checkpoint) == (110.0, True)
    assert leave.lent == (("n1", "s1"), ("n2", "s2"))
    assert leave.reason == "lending 2 node(s) to s1, s2 (surge)"


def test_a_growth_checkpoints_and_holds_its_nodes():
    plan = Plan(100.0)
    plan.actions = [Grow("tr", "onprem", (Allocation("n3", (0,), 1.0, 1.0, 4.0, 0.0),))]
    (leave,) = effects.of_plan(plan)
    assert (leave.left, leave.grows_onto, leave.checkpoint) == (Left.RESIZED, ("n3",), True)
    assert leave.stop_at_s == 100.0 + effects.GROW_GRACE_S


def test_a_growth_checkpoints_for_its_pool_s_grow_grace():
    """mesh.yaml's ``graces.grow_s``, per pool; the default for a pool not named."""
    plan = Plan(100.0)
    grown = (Allocation("n3", (0,), 1.0, 1.0, 4.0, 0.0),)
    plan.actions = [Grow("tr", "onprem", grown), Grow("tq", "lab", grown)]
    here, there = effects.of_plan(plan, grow_grace_s={"onprem": 4.0})
    assert (here.job_id, here.stop_at_s) == ("tr", 104.0)
    assert (there.job_id, there.stop_at_s) == ("tq", 100.0 + effects.GROW_GRACE_S)


def test_loans_open_per_node_and_close_when_the_borrower_ends():
    plan = Plan(50.0)
    plan.actions = [Shrink("tr", "s1", "n1", 0.0, None), Shrink("tr", "s2", "n2", 0.0, None)]
    (leave,) = effects.of_plan(plan)
    job = lender(["n0", "n1", "n2"])
    loans = lending.opened(leave, job, 50.0, lost_gpu_s=120.0)
    assert [(x.lender, x.borrower, x.node, x.gpus) for x in loans] == [
        ("tr", "s1", "n1", 1.0),
        ("tr", "s2", "n2", 1.0),
    ]
    assert lending.lent_nodes(loans)["tr"] == 2
    assert lending.size(3, 1, 2) == 1
    closed = lending.closing(loans, {"tr", "s2"}, 650.0)  # s1 ended
    assert [(x.borrower, x.closed_at_s) for x in closed] == [("s1", 650.0)]
    loans = [closed[0], loans[1]]
    assert lending.lent_nodes(loans)["tr"] == 1
    hours, lost = lending.totals(loans, 950.0)  # 600 s + 900 s of one GPU
    assert hours == pytest.approx(1500 / 3600)
    assert lost == pytest.approx(120 / 3600)
    assert lending.closing(loans, {"s2"}, 960.0)[0].borrower == "s2"  # the lender ended


def test_a_job_below_its_size_asks_for_the_nodes_it_lacks():
    job = lender(["n0"])
    grow = lending.growth(job, 3, 7.0)
    assert grow is not None
    assert (grow.request.nodes, grow.grows_in, grow.holds) == (2, "onprem", ("n0",))
    assert lending.growth(job, 1, 7.0) is None


# --- the replica count ------------------------------------------------------------------------

SPEC = serving.ServeSpec(least=1, most=8, target=2.0, upscale_delay_s=30, downscale_delay_s=600)

# (name, ongoing requests seen at each time, the counts after each)
SCALING = [
    ("steady", [(0, 2), (10, 2), (40, 1.5)], [1, 1, 1]),
    ("scales out after the delay", [(0, 10), (10, 10), (30, 10)], [1, 1, 5]),
    ("a blip resets the delay", [(0, 10), (20, 1), (40, 10), (70, 10)], [1, 1, 1, 5]),
    ("never past max", [(0, 100), (30, 100)], [1, 8]),
    ("scales in after ten minutes", [(0, 16), (30, 16), (40, 2), (500, 2), (640, 2)],
     [1, 8, 8, 8, 1]),
    ("in to the most wanted over the window", [(0, 16), (30, 16), (40, 2), (300, 6), (640, 2)],
     [1, 8, 8, 8, 3]),
]  # fmt: skip


@pytest.mark.parametrize(("seen", "counts"), [c[1:] for c in SCALING], ids=[c[0] for c in SCALING])
def test_the_count_follows_the_traffic_after_its_delays(seen, counts):
    state, got = serving.start(SPEC), []
    for t, ongoing in seen:
        state = serving.scale(SPEC, state, ongoing, float(t))
        got.append(state.replicas)
    assert got == counts


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 5), st.floats(0, 200)), min_size=1, max_size=40))
def test_the_count_stays_in_range_and_only_moves_towards_what_traffic_asked(steps):
    state, t = serving.start(SPEC), 0.0
    for dt, ongoing in steps:
        t += dt * 60
        before = state.replicas
        state = serving.scale(SPEC, state, ongoing, t)
        assert SPEC.least <= state.replicas <= SPEC.most
        if state.replicas > before:
            assert state.replicas == serving.wanted(SPEC, ongoing)
        if state.replicas < before:
            assert state.replicas >= serving.wanted(SPEC, ongoing)


def test_a_waiting_replica_keeps_its_id_whichever_is_placed_first() -> None:
    # s wants 12 replicas, 9 placed (r0..r8): r9, r10 and r11 wait. The scheduler takes
    # them in id order ("s/r10" < "s/r9"): r10 is placed first; r9 (which a loan may name
    # as its borrower) and r11 still wait, under the same ids
    spec = serving.ServeSpec(1, 20, 1.0, 30.0, 600.0)
    replicas = serving.Replicas("onprem", {}, serving.Scaling(12), 0)
    request = Request(1, 0, frozenset(), None, 1, 4, 0)
    for n in range(9):
        replicas.add(f"s/r{n}", "onprem", Allocation(f"n{n}", (0,), 1.0, 1.0, 4.0, 0.0))
    _, pending = replicas.units("s", "t", 10, request, 0.0, 0.0)
    assert [p.job_id for p in pending] == ["s/r9", "s/r10", "s/r11"]
    replicas.add("s/r10", "onprem", Allocation("n10", (0,), 1.0, 1.0, 4.0, 0.0))
    _, pending = replicas.units("s", "t", 10, request, 0.0, 0.0)
    assert [p.job_id for p in pending] == ["s/r9", "s/r11"]
    assert all(p.onprem_only and p.only_pool == "onprem" for p in pending)
    replicas.rescale(spec, 13.0, 0.0)  # above its count: not yet (the upscale delay)
    assert replicas.scaling.replicas == 12
