"""A ``Layout`` kept between cycles is exactly a fresh one: after any run of snapshots (nodes
taking and giving back GPUs, changing health or price, coming and going), the nodes by name
and by pool, the buckets of free GPUs (names in snapshot order) and the totals are those a new
layout builds; and a cycle plans the same with a kept layout as without one."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sched_helpers import node, pending

from meshctl.scheduler import Layout, Permissive, Snapshot, schedule
from meshctl.scheduler.snapshot import Node

pytestmark = pytest.mark.unit

POOLS = ("onprem", "lab")


def _fields(layout: Layout) -> tuple[object, ...]:
    return (
        list(layout.by_name.items()),
        {pool: list(nodes) for pool, nodes in layout.by_pool.items()},
        {pool: [list(b) for b in buckets] for pool, buckets in layout.buckets.items()},
        layout.totals,
        layout.max_usd,
        layout.any_unhealthy,
    )


def _base(count: int) -> tuple[Node, ...]:
    return tuple(
        node(f"n{i}", POOLS[i % 3 == 0], gpus=(8, 4)[i % 2], usd=1.0 + i % 3) for i in range(count)
    )


@st.composite
def changes(draw: st.DrawFn, count: int) -> list[tuple[int, str, int]]:
    """(node, what, how much): take GPUs, change health or price, or drop the node."""
    return draw(
        st.lists(
            st.tuples(
                st.integers(0, count - 1),
                st.sampled_from(["take", "take", "take", "health", "price", "drop"]),
                st.integers(0, 8),
            ),
            max_size=6,
        )
    )


def _changed(nodes: tuple[Node, ...], step: list[tuple[int, str, int]]) -> tuple[Node, ...]:
    out = list(nodes)
    for i, what, amount in step:
        if i >= len(out):
            continue
        n = out[i]
        if what == "take":
            taken = min(amount, n.gpus)
            out[i] = replace(n, gpu_free=(0.0,) * taken + (1.0,) * (n.gpus - taken))
        elif what == "health":
            out[i] = replace(n, health="unhealthy" if n.health == "ready" else "ready")
        elif what == "price":
            out[i] = replace(n, usd_per_gpu_hour=float(amount))
        else:
            del out[i]
    return tuple(out)


@settings(max_examples=150, deadline=None)
@given(
    st.integers(1, 12).flatmap(lambda n: st.tuples(st.just(n), st.lists(changes(n), max_size=8)))
)
def test_a_kept_layout_is_a_fresh_one(case: tuple[int, list[list[tuple[int, str, int]]]]) -> None:
    count, steps = case
    nodes, kept = _base(count), Layout()
    kept.update(nodes)
    for step in steps:
        nodes = _changed(nodes, step)
        kept.update(nodes)
        assert _fields(kept) == _fields(Layout().update(nodes))


def test_an_unchanged_snapshot_changes_nothing() -> None:
    nodes = _base(6)
    layout = Layout().update(nodes)
    before = _fields(layout)
    assert layout.update(tuple(nodes)) is layout
    assert _fields(layout) == before


@settings(max_examples=60, deadline=None)
@given(st.lists(changes(10), min_size=1, max_size=5))
def test_a_cycle_plans_the_same_with_a_kept_layout(steps: list[list[tuple[int, str, int]]]) -> None:
    nodes, kept = _base(10), Layout()
    jobs = [pending(f"j{k}", (1, 2, 4, 8)[k % 4], at=float(k)) for k in range(12)]
    for step in steps:
        nodes = _changed(nodes, step)
        snap = Snapshot(1000.0, nodes, pending=tuple(jobs))  # unchanged nodes: the same objects
        fresh, reused = schedule(snap, Permissive()), schedule(snap, Permissive(), layout=kept)
        assert reused.actions == fresh.actions
        assert {k: d.summary() for k, d in reused.decisions.items()} == {
            k: d.summary() for k, d in fresh.decisions.items()
        }
