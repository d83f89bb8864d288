"""What the scheduler promises, seen on both paths (the controller's loop and the simulator's
engine): backfill reserves nodes for a waiting gang and starts only what ends before them,
and a preemption takes the victim with the least work since its last checkpoint, not the
youngest job. Times from the scenarios in tests/differential/table.py."""

from __future__ import annotations

import pytest

from tests.differential import run
from tests.differential.table import TABLE

pytestmark = pytest.mark.unit

BY_NAME = {s.name: s for s in TABLE}


@pytest.fixture(scope="module")
def backfill():
    return run(BY_NAME["backfill-reserves-nodes-for-the-gang"])


@pytest.fixture(scope="module")
def victims():
    return run(BY_NAME["the-victim-with-least-work-since-its-checkpoint-goes"])


@pytest.mark.parametrize("side", ["controller", "simulator"])
def test_backfill_reserves_nodes_for_the_waiting_gang(backfill, side: str) -> None:
    # a (4 GPUs on n1) ends at 300, b (2 of n2's 4) at 600: the gang g (both nodes) is held
    # the nodes from 600. short (2 GPUs, at most 200 s) ends before then: it starts at 20
    # on n2's free half, around the reservation. long (at most 1000 s) would hold n2 past
    # 600: it waits, and starts after g.
    starts = {e[2]: e for e in getattr(backfill, side) if e[1] == "start"}
    assert starts["short"] == (20.0, "start", "short", "onprem", ("n2",), True)
    assert starts["g"][0] == 600.0
    assert starts["g"][4] == ("n1", "n2")
    assert starts["long"][0] >= 800.0  # after g, never before it
    assert not starts["long"][5]


@pytest.mark.parametrize("side", ["controller", "simulator"])
def test_the_victim_is_the_job_with_least_work_since_its_checkpoint(victims, side: str) -> None:
    # At 440: veteran (started 0, a checkpoint every 100 s) last checkpointed at 400, so 40
    # s x 4 GPUs would be lost; newcomer (started 250, the youngest) at 350: 90 s x 4.
    leaves = [e for e in getattr(victims, side) if e[1] == "leave"]
    assert leaves == [(440.0, "leave", "veteran", "preempted", "hi")]
