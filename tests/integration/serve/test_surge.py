"""The surge end to end, on the embedded mesh with real Ray Serve and Ray Train: a service's
traffic rises eightfold, its second replica borrows a node of an elastic training job (which
resumes from its checkpoint on one worker), the traffic falls, the replica goes, the loan
closes and the training job grows back; no request fails throughout.

The story is ``benchmarks/surge.py``'s (``Surge``: one mesh, the same jobs and policy), played
stage by stage in module-scoped fixtures, each stage ending on the event it waits for rather
than on the benchmark's fixed schedule: the surge lasts until the training job has resumed on
one node and recorded its recovery, the base traffic after it until the job is back on two.
The pool's grow grace is 5 s and the service scales in after 5 s below target. The figures
belong to the benchmark; these tests hold the story to what it must show.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from meshctl.loadgen import LoadResult
from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import surge as bench  # benchmarks/: the story's stages

pytestmark = pytest.mark.integration

DOWNSCALE_S, GROW_GRACE_S = 5.0, 5.0
FOREVER_S = 600.0  # a load's length when an event, not the clock, ends it


@pytest.fixture(scope="module")
def story(tmp_path_factory: pytest.TempPathFactory) -> Iterator[bench.Surge]:
    surge = bench.Surge(tmp_path_factory.mktemp("surge"), DOWNSCALE_S, GROW_GRACE_S)
    surge.up()
    try:
        yield surge
    finally:
        surge.down()


@pytest.fixture(scope="module")
def training(story: bench.Surge) -> bench.Surge:
    story.start_training()
    return story


@pytest.fixture(scope="module")
def serving(training: bench.Surge) -> bench.Surge:
    training.start_service()
    return training


@dataclass
class Borrowed:
    """What the surge stage saw."""

    started_s: float
    replicas: int
    resized: dict[str, float | None]
    surge: LoadResult
    after: bench.Load  # the base traffic after the surge, still running


@pytest.fixture(scope="module")
def borrowed(serving: bench.Surge) -> Borrowed:
    """Eight times the base traffic until the second replica serves and the training job has
    resumed on one node and recorded the recovery; then the base traffic again, left running."""
    started = time.time()
    surge = serving.load([(FOREVER_S, bench.BASE_RPS * bench.SURGE)])
    try:
        bench.wait("a second replica serving", lambda: serving.replicas() >= 2)
        bench.wait("the training job resumed on one node", lambda: serving.running_on(1))
        bench.wait("the training job's recovery recorded", serving.steps_lost)
        replicas, resized = serving.replicas(), serving.resized(started)
    finally:
        surge.stop()
    after = serving.load([(FOREVER_S, bench.BASE_RPS)])
    return Borrowed(started, replicas, resized, surge.result(), after)


@dataclass
class GivenBack:
    """What the stage after the surge saw."""

    resized: dict[str, float | None]
    lost: list[int]
    after: LoadResult


@pytest.fixture(scope="module")
def given_back(serving: bench.Surge, borrowed: Borrowed) -> GivenBack:
    """The base traffic until the loan has closed and the training job runs on two again."""
    try:
        bench.wait(
            "the loan closed and the training job running again",
            lambda: serving.resized(borrowed.started_s)["grown"],
        )
        bench.wait("the training job on two nodes again", lambda: serving.running_on(2))
        resized, lost = serving.resized(borrowed.started_s), serving.steps_lost()
    finally:
        borrowed.after.stop()
    return GivenBack(resized, lost, borrowed.after.result())


def test_the_elastic_training_job_runs_on_two_nodes(training: bench.Surge) -> None:
    shown = training.mesh.show(training.train)
    assert shown["attempt"] == 1  # placed on two at once, not grown after a first attempt
    assert len(set(shown["nodes"])) == 2


def test_the_service_runs_one_replica_beside_it(serving: bench.Surge) -> None:
    assert serving.replicas() == 1
    assert serving.running_on(2)


def test_a_surge_gets_a_second_replica_on_a_node_lent_by_training(borrowed: Borrowed) -> None:
    assert borrowed.replicas == 2
    opened, shrunk = borrowed.resized["opened"], borrowed.resized["shrunk"]
    assert opened is not None  # the loan
    assert shrunk is not None
    assert shrunk >= opened
    assert borrowed.surge.total > 0
    assert borrowed.surge.failed == 0, borrowed.surge.failures  # queued, never dropped


def test_after_the_surge_the_loan_closes_and_training_grows_back(given_back: GivenBack) -> None:
    closed, grown = given_back.resized["closed"], given_back.resized["grown"]
    assert closed is not None
    assert grown is not None
    assert grown >= closed
    assert given_back.after.total > 0
    assert given_back.after.failed == 0, given_back.after.failures


def test_the_resizes_redo_at_most_a_checkpoint_interval_each(given_back: GivenBack) -> None:
    assert given_back.lost  # the shrink at least
    assert sum(given_back.lost) <= bench.CHECKPOINT_EVERY * len(given_back.lost), given_back.lost
