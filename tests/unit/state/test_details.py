"""The typed details of attempts and nodes: the JSON objects the controller has always stored
read into them and written back the same, unknown keys kept, a runtime recorded as null told
apart from none recorded; and an existing SQLite file read and rewritten unchanged."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import pytest

from meshctl.scheduler import Allocation
from meshctl.state import (
    UNRECORDED,
    AttemptDetail,
    AttemptRecord,
    Held,
    NodeDetail,
    NodeRecord,
    SqliteStore,
)

pytestmark = pytest.mark.unit

HELD = {"cpus": 4.0, "gpu_indices": [0, 1], "gpu_share": 1.0, "memory_gib": 32.0,
        "nic_gbps": 0.0, "node": "n1"}  # fmt: skip
DISPATCHED = {  # what dispatch writes: runtime_s always (null: no estimate), the endpoint too
    "allocations": [HELD],
    "failures_before": 0,
    "runtime_s": None,
    "checkpoint_uri": "s3://b/j1",
    "checkpoint_endpoint": None,
}

ATTEMPT_CASES = [
    # (the stored object, what it reads as)
    pytest.param({}, AttemptDetail(), id="none: an attempt recorded by hand"),
    pytest.param(
        DISPATCHED,
        AttemptDetail(
            allocations=(Held("n1", (0, 1), 1.0, 4.0, 32.0, 0.0),),
            failures_before=0,
            runtime_s=None,
            checkpoint_uri="s3://b/j1",
        ),
        id="dispatched",
    ),
    pytest.param(
        {"allocations": [HELD], "runtime_s": 3600, "pool_mtbf_s": 7200.0},
        AttemptDetail(
            allocations=(Held("n1", (0, 1), 1.0, 4.0, 32.0, 0.0),),
            runtime_s=3600,
            pool_mtbf_s=7200.0,
        ),
        id="an older record: no failures_before, an int runtime kept an int",
    ),
    pytest.param(
        {**DISPATCHED, "stop_at_s": 12.5, "for_job": "j9", "failures": 1, "submit_errors": 2},
        AttemptDetail(
            allocations=(Held("n1", (0, 1), 1.0, 4.0, 32.0, 0.0),),
            failures_before=0,
            failures=1,
            runtime_s=None,
            checkpoint_uri="s3://b/j1",
            stop_at_s=12.5,
            for_job="j9",
            submit_errors=2,
        ),
        id="preempted, after refusals",
    ),
    pytest.param(
        {"runtime_s": 60.0, "gpu_model": "H100", "extra": 1},
        AttemptDetail(runtime_s=60.0, extra={"gpu_model": "H100", "extra": 1}),
        id="unknown keys kept",
    ),
]


@pytest.mark.parametrize(("stored", "typed"), ATTEMPT_CASES)
def test_attempt_detail_reads_and_writes_the_stored_object(
    stored: dict[str, Any], typed: AttemptDetail
) -> None:
    assert AttemptDetail.of(stored) == typed
    assert typed.to_json() == stored
    assert json.loads(json.dumps(typed.to_json())) == stored


def test_a_runtime_recorded_as_null_is_not_a_runtime_never_recorded() -> None:
    assert AttemptDetail.of({"runtime_s": None}).runtime_s is None  # no estimate at dispatch
    assert AttemptDetail.of({}).runtime_s is UNRECORDED  # placed by an older controller
    assert AttemptDetail(runtime_s=None).to_json() == {"runtime_s": None}
    assert AttemptDetail().to_json() == {}


def test_a_held_allocation_missing_a_figure_takes_its_default() -> None:
    held = Held.of({"node": "n-0", "gpu_indices": [0, 1], "gpu_share": 0.5})
    assert (held, held.gpus()) == (Held("n-0", (0, 1), 0.5, 0.0, 0.0, 0.0), 1.0)


def test_held_has_the_fields_of_the_schedulers_allocation() -> None:
    def names(kind: type[Any]) -> list[str]:
        return [f.name for f in fields(kind)]

    assert names(Held) == names(Allocation)


NODE_CASES = [
    pytest.param({}, NodeDetail(), id="none"),
    pytest.param({"first_seen_s": 1.5}, NodeDetail(first_seen_s=1.5), id="seen"),
    pytest.param(
        {"first_seen_s": 1.5, "failures": 2, "reason": "GPU XID 79", "was": "cordoned"},
        NodeDetail(first_seen_s=1.5, failures=2, reason="GPU XID 79", was="cordoned"),
        id="unhealthy",
    ),
    pytest.param(
        {"deadline_s": 99.0, "reason": ""},
        NodeDetail(deadline_s=99.0, reason=""),
        id="draining; an empty reason kept",
    ),
    pytest.param(
        {"failures": 1, "rack": "r7"}, NodeDetail(failures=1, extra={"rack": "r7"}), id="unknown"
    ),
]


@pytest.mark.parametrize(("stored", "typed"), NODE_CASES)
def test_node_detail_reads_and_writes_the_stored_object(
    stored: dict[str, Any], typed: NodeDetail
) -> None:
    assert NodeDetail.of(stored) == typed
    assert typed.to_json() == stored


def test_an_existing_sqlite_store_reads_back_and_is_rewritten_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    attempt_json = json.dumps({**DISPATCHED, "gpu_model": "H100"}, sort_keys=True,
                              separators=(",", ":"))  # fmt: skip
    node_json = json.dumps({"failures": 1, "first_seen_s": 1.5}, separators=(",", ":"))
    with SqliteStore(path) as store:
        store.create(AttemptRecord("j1-1", "j1", 1, "onprem", "s", "running", 1.0, None))
        store.create(NodeRecord("onprem/n1", "onprem", "ready", {}, {}, 1.0))
    with sqlite3.connect(path) as conn:  # as an older meshctl wrote them
        conn.execute("UPDATE attempts SET detail = ?", (attempt_json,))
        conn.execute("UPDATE nodes SET detail = ?", (node_json,))
    conn.close()
    with SqliteStore(path) as store:
        attempt = store.get(AttemptRecord, "j1-1")
        node = store.get(NodeRecord, "onprem/n1")
        assert attempt is not None
        assert node is not None
        assert (attempt.detail.checkpoint_uri, attempt.detail.runtime_s) == ("s3://b/j1", None)
        assert attempt.detail.extra == {"gpu_model": "H100"}
        assert (node.detail.first_seen_s, node.detail.failures) == (1.5, 1)
        store.update(replace(attempt, reason="again"), expected_version=attempt.version)
        store.update(replace(node, state="cordoned"), expected_version=node.version)
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT detail FROM attempts").fetchone() == (attempt_json,)
        assert conn.execute("SELECT detail FROM nodes").fetchone() == (node_json,)
    conn.close()
