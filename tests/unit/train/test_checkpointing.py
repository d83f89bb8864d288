"""When a train loop checkpoints (meshctl.workload.train): fixed intervals, Young/Daly, on
request."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from meshctl.workload.train import MAX_INTERVAL_S, MIN_INTERVAL_S, Checkpointing, young_daly

pytestmark = pytest.mark.unit


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    ("cost_s", "mtbf_s", "expected_s"),
    [
        (10.0, 3600.0 * 5, math.sqrt(2 * 10 * 18000)),  # 600 s
        (0.0, 3600.0, MIN_INTERVAL_S),
        (600.0, 1e9, MAX_INTERVAL_S),
    ],
    ids=["the textbook case", "free checkpoints: the floor", "rare failures: the ceiling"],
)
def test_young_daly_interval(cost_s: float, mtbf_s: float, expected_s: float) -> None:
    assert young_daly(cost_s, mtbf_s) == pytest.approx(expected_s)


def test_a_fixed_interval_checkpoints_when_it_has_passed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MESHCTL_CHECKPOINT_URI", raising=False)
    clock = Clock()
    ck = Checkpointing(interval_s=30, clock=clock)
    clock.now = 29
    assert not ck.due(1)
    clock.now = 31
    assert ck.due(2)
    with ck.saving():
        clock.now = 33
    assert not ck.due(3)  # the interval counts from the last checkpoint
    clock.now = 64
    assert ck.due(4)


def test_auto_measures_a_first_checkpoint_then_uses_young_daly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("MESHCTL_CHECKPOINT_URI", raising=False)
    monkeypatch.setenv("MESHCTL_TRAIN", json.dumps({"interval": "auto"}))
    monkeypatch.setenv("MESHCTL_POOL_MTBF_S", "800")
    clock = Clock()
    ck = Checkpointing(clock=clock)
    assert ck.due(0)  # nothing measured yet
    with ck.saving():
        clock.now += 4.0  # a checkpoint costs 4 s
    assert ck.interval_s == pytest.approx(math.sqrt(2 * 4 * 800))  # 80 s
    clock.now += 79
    assert not ck.due(1)
    clock.now += 2
    assert ck.due(2)


def test_a_request_from_meshctl_is_honoured_once_per_attempt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from meshctl.pools.checkpoints import request_checkpoint

    uri = f"file://{tmp_path}/job"
    monkeypatch.setenv("MESHCTL_CHECKPOINT_URI", uri)
    monkeypatch.setenv("MESHCTL_ATTEMPT", "1")
    clock = Clock()
    ck = Checkpointing(interval_s=3600, clock=clock)
    assert not ck.due(1)
    request_checkpoint(uri, {"attempt": 1, "reason": "spot notice", "deadline_s": 0})
    import meshctl.workload

    meshctl.workload._cache.clear()
    assert ck.due(2)
    assert not ck.due(3)  # once


def test_a_loop_that_never_times_its_checkpoints_gets_an_interval_all_the_same(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("MESHCTL_CHECKPOINT_URI", raising=False)
    clock = Clock()
    ck = Checkpointing(interval_s="auto", mtbf_s=3600, clock=clock)
    assert ck.due(0)  # the first, to measure
    clock.now += 1
    assert not ck.due(1)  # not every step from now on: the default cost stands in
    assert ck.interval_s == pytest.approx(young_daly(10.0, 3600))
