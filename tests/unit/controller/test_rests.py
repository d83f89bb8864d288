"""Launch rests (``controller/rests.py``): a refusal rests its (pool, node type) for its
time; a transient one (the API away, or throttling) is lifted once the pool's API answers a
listing after failing one, so a launch goes out the cycle after the API is back."""

from __future__ import annotations

import pytest

from meshctl.controller.rests import Rests

pytestmark = pytest.mark.unit

EAST, WEST = ("east", "g6.xlarge"), ("west", "g6.xlarge")


def test_a_rest_blocks_its_node_type_until_it_ends() -> None:
    rests = Rests()
    rests.rest(EAST, 0.0, {"capacity"})  # rests 300 s
    assert rests.blocked(299.0) == {EAST}
    assert rests.blocked(300.0) == frozenset()
    assert rests.waiting_for_api(0.0) == frozenset()  # a stock-out: nothing to watch for


LIFTS = [
    # (the listings seen after the transient rest began, lifted?)
    pytest.param([True], False, id="answered without having failed: the rest stands"),
    pytest.param([False], False, id="failing: the rest stands"),
    pytest.param([False, True], True, id="failed, then answered: lifted"),
    pytest.param([False, False, True], True, id="failed a while, then answered: lifted"),
]


@pytest.mark.parametrize(("listings", "lifted"), LIFTS)
def test_a_transient_rest_is_lifted_when_the_api_answers_again(
    listings: list[bool], lifted: bool
) -> None:
    rests = Rests()
    rests.rest(EAST, 0.0, {"unavailable"})  # rests 15 s, unless lifted
    rests.rest(WEST, 0.0, {"throttled"})
    assert rests.waiting_for_api(0.0) == {"east", "west"}
    for answered in listings:
        rests.listed("east", answered)
    assert rests.blocked(1.0) == ({WEST} if lifted else {EAST, WEST})  # west still rests


def test_only_transient_rests_are_lifted() -> None:
    rests = Rests()
    rests.rest(EAST, 0.0, {"throttled"})
    rests.rest(EAST, 0.0, {"capacity"})  # the next launch found a stock-out: 300 s
    rests.listed("east", answered=False)
    rests.listed("east", answered=True)
    assert rests.blocked(1.0) == {EAST}
