"""``meshctl nodes list`` says what is true of each node: a node Ray lists dead reads dead,
whatever the operator had it at, and the node of a cloud instance that is gone for good
leaves the list (``nodes show`` keeps it). From a store, as the controller writes it."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from meshctl.cli.app import app
from meshctl.state import InstanceRecord, InstanceState, NodeRecord, NodeState, open_store

pytestmark = pytest.mark.unit

NOW = time.time()


def _resources(alive: bool) -> dict[str, object]:
    return {"gpus": 1, "cpus": 4.0, "memory_gib": 16.0, "accelerator": "L4", "alive": alive}


def _instance(instance_id: str, state: InstanceState) -> InstanceRecord:
    return InstanceRecord(
        instance_id, "aws-burst", "aws", "req-1", "g6.xlarge", state, NOW - 900, NOW - 720, True
    )


@pytest.fixture
def rows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, dict[str, object]]:
    """As reported: a local node whose raylet and agent were killed (Ray lists it dead), a
    cordoned one likewise, a cloud instance moto reported terminated 12 minutes ago whose
    node record still says alive, and one still running."""
    home = tmp_path / "home"
    monkeypatch.setenv("MESHCTL_HOME", str(home))
    with open_store(home) as store:
        for name, state, alive in (
            ("onprem/gpu-rack1", NodeState.READY, True),
            ("onprem/gpu-rack2", NodeState.READY, False),
            ("onprem/mi300x", NodeState.CORDONED, False),
        ):
            store.create(NodeRecord(name, "onprem", state, {}, _resources(alive), NOW))
        for instance_id, state in (
            ("i-0aaa", InstanceState.TERMINATED),
            ("i-0bbb", InstanceState.READY),
        ):
            store.create(_instance(instance_id, state))
            node = NodeRecord(
                f"aws-burst/{instance_id}", "aws-burst", NodeState.READY, {}, _resources(True), NOW
            )
            store.create(node)
    listed = CliRunner().invoke(app, ["nodes", "list", "-o", "json"])
    assert listed.exit_code == 0, listed.output
    return {r["node"]: r for r in json.loads(listed.stdout)}


def test_a_node_ray_lists_dead_reads_dead_with_why(rows: dict[str, dict[str, object]]) -> None:
    """Reported: shown ready, alive no."""
    shown = {n: (r["state"], r["alive"], r["reason"]) for n, r in rows.items()}
    assert shown["onprem/gpu-rack1"] == ("ready", True, None)
    assert shown["onprem/gpu-rack2"] == ("dead", False, "Ray lists its node dead")
    assert shown["onprem/mi300x"] == ("dead", False, "Ray lists its node dead")


def test_the_node_of_a_terminated_instance_leaves_the_list(
    rows: dict[str, dict[str, object]],
) -> None:
    """Reported: still shown ready, alive yes, 12 minutes after moto said terminated."""
    assert "aws-burst/i-0aaa" not in rows
    assert rows["aws-burst/i-0bbb"]["state"] == "ready"
    shown = CliRunner().invoke(app, ["nodes", "show", "aws-burst/i-0aaa", "-o", "json"])
    assert shown.exit_code == 0, shown.output  # its history stays
