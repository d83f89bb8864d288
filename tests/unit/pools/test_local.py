"""The embedded pool's pure helpers (its processes are tested for real in the integration tier)."""

from __future__ import annotations

import pytest

from meshctl.pools.local import LocalPoolError, exited_starting

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("message", "retried"),
    [
        ("the head of pool p exited while starting; see /x/pool-head.log", True),
        ("node n-1 exited while starting; see /x/pool-n-1.log", True),
        ("node n-1 did not come up within 120 s; see /x/pool-n-1.log", False),
    ],
    ids=["the head exited: fresh ports, once more", "a node exited", "slow, not gone: no"],
)
def test_a_node_that_exited_while_starting_is_tried_again(message: str, retried: bool) -> None:
    assert exited_starting(LocalPoolError(message)) is retried
