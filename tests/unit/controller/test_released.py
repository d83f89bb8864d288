"""GPUs meshctl's attempts gave back a moment ago (``controller/released.py``): an attempt
active last cycle and not this one gives its allocations' GPUs back, per node, for
``RELEASE_LAG_S``."""

from __future__ import annotations

import pytest

from meshctl.controller.released import RELEASE_LAG_S, Released
from meshctl.scheduler import Allocation
from meshctl.state import AttemptRecord
from meshctl.state.records import AttemptDetail

pytestmark = pytest.mark.unit


def attempt(job: str, state: str, *holds: tuple[str, int]) -> AttemptRecord:
    allocations = tuple(Allocation(node, tuple(range(gpus)), 1.0, 1.0, 1.0, 0.0)
                        for node, gpus in holds)  # fmt: skip
    return AttemptRecord(f"{job}-1", job, 1, "lab", f"meshctl-{job}-1", state, 1.0, None,
                         detail=AttemptDetail(allocations=allocations))  # fmt: skip


def test_an_attempt_that_ended_gives_its_gpus_back_for_a_while() -> None:
    released = Released()
    gang = attempt("gang", "running", ("n1", 1), ("n2", 1))
    single = attempt("single", "running", ("n1", 2))
    assert released.update([gang, single], 0.0) == {}
    assert released.update([single], 1.0) == {"lab/n1": 1.0, "lab/n2": 1.0}  # the gang ended
    ended = attempt("single", "succeeded", ("n1", 2))  # still listed, no longer active
    assert released.update([ended], 2.0) == {"lab/n1": 3.0, "lab/n2": 1.0}
    assert released.update([], 1.0 + RELEASE_LAG_S) == {"lab/n1": 2.0}  # the gang's: past
    assert released.update([], 2.0 + RELEASE_LAG_S) == {}


def test_a_controller_that_just_started_knows_of_nothing_given_back() -> None:
    assert Released().update([attempt("a", "succeeded", ("n1", 1))], 0.0) == {}
