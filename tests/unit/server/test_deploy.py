"""What ``deploy/`` ships reads only metrics meshctl exposes, and every alert is complete."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from meshctl.agent.watch import AgentReport
from meshctl.controller.metrics import ControllerMetrics
from meshctl.model.policy import TeamQuota
from meshctl.policy.tenancy import BudgetStanding
from meshctl.server.metrics import registry
from meshctl.state import MemoryStore

pytestmark = pytest.mark.unit

DEPLOY = Path(__file__).resolve().parents[3] / "deploy"
SUFFIXES = ("", "_total", "_bucket", "_count", "_sum")
NAME = re.compile(r"\bmeshctl_[a-z_]+\b")


class Idle:
    """A controller before its first cycle."""

    standings: tuple[BudgetStanding, ...] = ()
    agent_report = AgentReport()

    def quotas(self) -> dict[str, TeamQuota]:
        return {}

    def last_world(self) -> None:
        return None


def exposed() -> set[str]:
    families = [*registry(MemoryStore()).collect(), *ControllerMetrics(Idle()).registry.collect()]
    return {f.name + suffix for f in families for suffix in SUFFIXES}


def expressions(node: Any) -> list[str]:
    if isinstance(node, dict):
        return [e for k, v in node.items() for e in ([v] if k == "expr" else expressions(v))]
    if isinstance(node, list):
        return [e for v in node for e in expressions(v)]
    return []


def rules() -> list[dict[str, Any]]:
    found = yaml.safe_load((DEPLOY / "prometheus" / "alerts.yml").read_text())
    return [rule for group in found["groups"] for rule in group["rules"]]


@pytest.mark.parametrize(
    "document",
    [
        json.loads((DEPLOY / "grafana" / "meshctl.json").read_text()),
        {"groups": rules()},
    ],
    ids=["dashboard", "alerts"],
)
def test_every_metric_named_is_one_meshctl_exposes(document: Any) -> None:
    named = {name for expr in expressions(document) for name in NAME.findall(expr)}
    assert named, "no expressions found"
    assert named <= exposed(), f"unknown: {sorted(named - exposed())}"


@pytest.mark.parametrize("rule", rules(), ids=lambda r: str(r["alert"]))
def test_every_alert_waits_has_a_severity_and_says_what_happened(rule: dict[str, Any]) -> None:
    assert rule["for"]
    assert rule["labels"]["severity"] in {"warning", "critical"}
    assert rule["annotations"]["summary"]


def test_the_alerts_cover_the_queue_budgets_nodes_and_the_controller() -> None:
    names = {r["alert"] for r in rules()}
    wanted = {"MeshctlQueueGrowing", "MeshctlBudgetNearLimit", "MeshctlNodesUnhealthy",
              "MeshctlControllerNotLeading"}  # fmt: skip
    assert wanted <= names
