"""GPUs taken on a node, as the dashboard's node summary words them: what tasks and actors
use, plus what placement groups hold and do not use (Ray leaves that out of the first
figure). A placement group made outside meshctl takes GPUs from meshctl's jobs like any
other work."""

from __future__ import annotations

import pytest

from meshctl.pools.ray import gpus_taken

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("summary", "taken"),
    [
        ("1.0/4.0 GPU", 1.0),
        ("0.0/2.0 CPU\n 0B/1.00GiB memory\n 2.5/8.0 GPU\n", 2.5),
        # a group holds 2, nothing runs in it yet: 0 used + 2 held - 0 used of them
        ("0.0/2.0 GPU (0.0 used of 2.0 reserved in placement groups)", 2.0),
        # a group holds 2 and runs a task on 1, and a task outside it uses 1: 2 + 2 - 1
        ("2.0/4.0 GPU (1.0 used of 2.0 reserved in placement groups)", 3.0),
        ("0.5/2.0 CPU\n 0B/1.00GiB memory", None),  # no GPU line: unknown, not zero
    ],
    ids=["plain", "among other lines", "held by a group", "held and used", "no GPUs"],
)
def test_gpus_taken_counts_what_placement_groups_hold(summary: str, taken: float | None) -> None:
    assert gpus_taken(summary) == taken


def test_a_summary_read_that_fails_keeps_what_the_dashboard_said_last(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A busy dashboard that times out must not make GPUs taken by other work look free; an
    older dashboard that has no summary (404) never says anything."""
    from meshctl.pools import ray

    client = ray.RayPoolClient("lab", "http://dashboard.invalid", None)
    answers: list[object] = [
        {"data": {"nodeLogicalResources": {"n1": "0.0/1.0 CPU\n 2.0/2.0 GPU"}}},
        ray.PoolError("timed out"),
        ray._NotFound(),
    ]

    def request(self: object, method: str, path: str) -> object:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(ray.RayPoolClient, "_request", request)
    assert client.gpus_in_use() == {"n1": 2.0}
    assert client.gpus_in_use() == {"n1": 2.0}  # the timeout: what it said last
    assert client.gpus_in_use() == {}  # no summary at all
