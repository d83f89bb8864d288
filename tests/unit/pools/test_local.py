"""The embedded pool's pure helpers (its processes are tested for real in the integration tier)."""

from __future__ import annotations

import pytest

from meshctl.pools.local import LocalPoolError, _port_taken, exited_starting

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("message", "retried"),
    [
        ("the head of pool p exited while starting; see /x/pool-head.log", True),
        ("node n-1 exited while starting; see /x/pool-n-1.log", True),
        ("node n-1 did not come up within 120 s; see /x/pool-n-1.log", False),
        ("instance i-1 lost a port it was given while starting; see /x/p-i-1.log", True),
    ],
    ids=[
        "the head exited: fresh ports, once more",
        "a node exited",
        "slow, not gone: no",
        "its dashboard's port was taken: fresh ports, once more",
    ],
)
def test_a_node_that_exited_while_starting_is_tried_again(message: str, retried: bool) -> None:
    assert exited_starting(LocalPoolError(message)) is retried


@pytest.mark.parametrize(
    ("log", "taken"),
    [
        ("Exception: Failed to find a valid port for dashboard after 0 retries: [Errno 98]", True),
        ("Ray runtime started.", False),
        (None, False),
    ],
    ids=["Ray could not bind its dashboard's port", "started", "no log yet"],
)
def test_a_port_taken_from_under_ray_is_read_from_its_log(tmp_path, log, taken) -> None:
    path = tmp_path / "pool-head.log"
    if log is not None:
        path.write_text("meshctl boot: ray start ...\n" + log + "\n")
    assert _port_taken(path) is taken


def test_what_an_earlier_try_wrote_to_the_log_is_not_read_again(tmp_path) -> None:
    path = tmp_path / "pool-head.log"
    path.write_text("Exception: Failed to find a valid port for dashboard\n")
    since = path.stat().st_size
    with path.open("a") as log:
        log.write("Ray runtime started.\n")
    assert _port_taken(path, since) is False
