"""The controller's own metrics (cycle, leading, budgets, quotas, agents), and the store's
metrics over what a real loop recorded."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from prometheus_client import generate_latest
from prometheus_client.core import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from meshctl.agent.watch import AgentReport, AgentStatus
from meshctl.controller.metrics import Address, ControllerMetrics, Reading, quotas
from meshctl.model.policy import TeamQuota
from meshctl.policy.tenancy import BudgetStanding
from meshctl.server.metrics import registry
from meshctl.state import MemoryStore

from .test_loop import Clock, FakePool, controller, queue

pytestmark = pytest.mark.unit

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples(reg: CollectorRegistry) -> Samples:
    text = generate_latest(reg).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(found: Samples, name: str, **labels: str) -> float | None:
    return found.get((name, tuple(sorted(labels.items()))))


def test_each_cycle_is_observed_and_the_store_metrics_count_what_the_loop_recorded() -> None:
    store, pool, clock = MemoryStore(), FakePool(), Clock()
    queue(store, "a", gpus=2)
    loop = controller(store, pool, clock)
    metrics = ControllerMetrics(Reading(loop))
    loop.on_cycle = lambda r: metrics.observe(r.at_s, r.duration_s, r.errors)
    loop.cycle()  # a is admitted and dispatched
    report = loop.cycle()
    found = samples(metrics.registry)
    assert value(found, "meshctl_controller_cycle_duration_seconds_count") == 2
    assert value(found, "meshctl_controller_last_cycle_timestamp_seconds") == report.at_s
    assert value(found, "meshctl_controller_leading") == 1
    used = {"cohort": "none", "team": "default", "resource": "gpu"}
    assert value(found, "meshctl_team_resource_usage", **used) == 2
    metrics.lead(False)
    assert value(samples(metrics.registry), "meshctl_controller_leading") == 0
    served = samples(registry(store, clock=clock))
    admitted = {"class": "none", "pool": "onprem"}
    assert value(served, "meshctl_admitted_workloads_total", **admitted) == 1
    assert value(served, "meshctl_admitted_active_workloads", **admitted) == 1


@dataclass(frozen=True)
class QuotaCase:
    name: str
    quota: TeamQuota | None
    used_gpus: float
    borrowed: float | None  # None: no series (no quota)
    limit: float | None


QUOTA_CASES = [
    QuotaCase("within its quota", TeamQuota(team="ml", cohort="research", gpus=8), 6, 0, None),
    # 12 held against 8 nominal: 4 borrowed from the cohort
    QuotaCase(
        "borrowing",
        TeamQuota(team="ml", cohort="research", gpus=8, borrowing_limit_gpus=4),
        12,
        4,
        4,
    ),
    QuotaCase("no quota: usage only", None, 3, None, None),
]


@pytest.mark.parametrize("case", QUOTA_CASES, ids=lambda c: c.name)
def test_quota_usage_and_borrowing_per_team(case: QuotaCase) -> None:
    families = quotas({"ml": case.quota} if case.quota else {}, {"ml": case.used_gpus})
    found = {
        (s.name, tuple(sorted(s.labels.items()))): s.value for f in families for s in f.samples
    }
    key = {"cohort": "research" if case.quota else "none", "team": "ml", "resource": "gpu"}
    assert value(found, "meshctl_team_resource_usage", **key) == case.used_gpus
    assert value(found, "meshctl_team_resource_borrowed", **key) == case.borrowed
    assert value(found, "meshctl_team_borrowing_limit", **key) == case.limit


def test_budgets_and_agents_as_of_the_last_cycle() -> None:
    class Seen:
        standings = (BudgetStanding("cloud", "provider:aws", 900.0, 1000.0, "warn"),)
        agent_report = AgentReport(
            agents={
                "onprem/n1": AgentStatus("http://n1", "healthy"),
                "onprem/n2": AgentStatus("http://n2", "unhealthy", ("XID 79",)),
                "onprem/n3": AgentStatus("http://n3", "dead"),
            }
        )

        def quotas(self) -> dict[str, TeamQuota]:
            return {}

        def last_world(self) -> None:
            return None

    found = samples(ControllerMetrics(Seen()).registry)
    budget = {"budget": "cloud", "scope": "provider:aws"}
    assert value(found, "meshctl_budget_spend_usd", **budget) == 900
    assert value(found, "meshctl_budget_limit_usd", **budget) == 1000
    for verdict in ("healthy", "unhealthy", "dead"):
        assert value(found, "meshctl_agent_nodes", pool="onprem", verdict=verdict) == 1


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:9101", Address("127.0.0.1", 9101)),
        ("0.0.0.0:0", Address("0.0.0.0", 0)),
        ("[::1]:9101", Address("::1", 9101)),
    ],
)
def test_an_address_is_host_and_port(text: str, expected: Address) -> None:
    assert Address.parse(text) == expected


@pytest.mark.parametrize("text", ["9101", ":9101", "host:", "host:http", "host:70000"])
def test_an_address_without_host_and_port_says_what_was_expected(text: str) -> None:
    with pytest.raises(ValueError, match="expected HOST:PORT"):
        Address.parse(text)
