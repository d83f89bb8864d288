"""The embedded pool's pure helpers (its processes are tested for real in the integration tier)."""

from __future__ import annotations

from pathlib import Path

import pytest

from meshctl.pools.local import LocalPoolError, _timed_out_starting

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("log", "retried"),
    [
        ("...\nException: The current node timed out during startup. This could happen", True),
        ("OSError: [Errno 98] Address already in use", False),
        (None, False),
    ],
    ids=["ray's start-up wait ran out: try again", "another failure", "no log"],
)
def test_only_a_start_up_timeout_is_tried_again(
    tmp_path: Path, log: str | None, retried: bool
) -> None:
    path = tmp_path / "pool-head.log"
    if log is not None:
        path.write_text(log)
    err = LocalPoolError(f"the head of pool p exited while starting; see {path}")
    assert _timed_out_starting(err) is retried
