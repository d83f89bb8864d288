"""The controller's own Prometheus metrics: what only its process knows.

Served at ``/metrics`` on ``meshctl controller run --metrics-address HOST:PORT``: the cycle's
duration and errors, whether this controller leads, and, as of its last cycle, each budget's
spend and limit, each team's quota, usage and borrowing (the policies' quotas against the
GPUs its jobs hold), and the nodes' agents by verdict. What the state store holds (the queue,
admissions, evictions, nodes, spend per pool) the API server serves
(``meshctl.server.metrics``). Imported only when metrics are asked for, so that the CLI's
start does not import ``prometheus_client``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Protocol
from wsgiref.simple_server import WSGIServer

from prometheus_client import Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import CollectorRegistry, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from meshctl.agent.watch import AgentReport
from meshctl.controller.deciding.world import JobView, World
from meshctl.model.policy import TeamQuota
from meshctl.policy.tenancy import BudgetStanding
from meshctl.state.records import ACTIVE_ATTEMPT

if TYPE_CHECKING:
    from meshctl.controller.loop import Controller

CYCLE_BUCKETS_S: Final = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
GPU: Final = "gpu"  # the one resource quotas hold today
NO_COHORT: Final = "none"


class Observed(Protocol):
    """What the metrics read of the controller (``loop.Controller``) at a scrape."""

    @property
    def standings(self) -> tuple[BudgetStanding, ...]: ...

    @property
    def agent_report(self) -> AgentReport: ...

    def quotas(self) -> Mapping[str, TeamQuota]: ...

    def last_world(self) -> World | None: ...


class Reading:
    """``Observed`` over the running controller: what its last cycle left."""

    def __init__(self, controller: Controller) -> None:
        self.controller = controller

    @property
    def standings(self) -> tuple[BudgetStanding, ...]:
        return self.controller.standings

    @property
    def agent_report(self) -> AgentReport:
        return self.controller.agent_report

    def quotas(self) -> Mapping[str, TeamQuota]:
        policies = self.controller.rules.policies
        return policies.quotas if policies is not None else {}

    def last_world(self) -> World | None:
        seen = self.controller.seen
        return seen[0] if seen is not None else None


@dataclass(frozen=True, slots=True)
class Address:
    host: str
    port: int

    @classmethod
    def parse(cls, text: str) -> Address:
        """``HOST:PORT`` (``[::1]:9100`` for IPv6); ``ValueError`` saying what was expected."""
        host, sep, port = text.rpartition(":")
        if not sep or not host or not port.isdigit() or int(port) > 65535:
            raise ValueError(f"expected HOST:PORT, e.g. 127.0.0.1:9101, got {text!r}")
        return cls(host.removeprefix("[").removesuffix("]"), int(port))


class ControllerMetrics:
    """The controller's registry: ``observe`` each cycle's report; ``lead`` says whether this
    controller leads (a single controller always does)."""

    def __init__(self, controller: Observed) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._server: WSGIServer | None = None
        self.cycle = Histogram(
            "meshctl_controller_cycle_duration_seconds",
            "How long one controller cycle took (observe, decide, apply, record).",
            buckets=CYCLE_BUCKETS_S,
            registry=self.registry,
        )
        self.errors = Counter(
            "meshctl_controller_cycle_errors",
            "Errors the controller's cycles reported (each retried the next cycle).",
            registry=self.registry,
        )
        self.last = Gauge(
            "meshctl_controller_last_cycle_timestamp_seconds",
            "When the last cycle ran (UNIX seconds, the controller's clock).",
            registry=self.registry,
        )
        self.leading = Gauge(
            "meshctl_controller_leading",
            "1 while this controller leads (applies decisions), else 0.",
            registry=self.registry,
        )
        self.leading.set(1)
        self.registry.register(StateCollector(controller))

    def observe(self, at_s: float, duration_s: float, errors: Sequence[str]) -> None:
        self.cycle.observe(duration_s)
        self.errors.inc(len(errors))
        self.last.set(at_s)

    def lead(self, leading: bool) -> None:
        self.leading.set(1 if leading else 0)

    def serve(self, address: Address) -> int:
        """Serve ``/metrics`` on ``address`` from a daemon thread; the port it listens on (the
        one given, or the one chosen for port 0)."""
        self._server, _ = start_http_server(address.port, address.host, registry=self.registry)
        return int(self._server.server_port)

    def close(self) -> None:
        """Stop serving (a controller that stops exits; a test ends the server)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


class StateCollector(Collector):
    """Budgets, quotas and agents as of the controller's last cycle, read at each scrape."""

    def __init__(self, controller: Observed) -> None:
        self.controller = controller

    def collect(self) -> Iterator[Metric]:
        yield from budgets(self.controller.standings)
        world = self.controller.last_world()
        yield from quotas(self.controller.quotas(), team_gpus(world.jobs if world else ()))
        yield agents(self.controller.agent_report)


def budgets(standings: Sequence[BudgetStanding]) -> Iterator[Metric]:
    labels = ["budget", "scope"]
    spend = GaugeMetricFamily(
        "meshctl_budget_spend_usd", "A budget's spend this month.", labels=labels
    )
    limit = GaugeMetricFamily(
        "meshctl_budget_limit_usd", "A budget's limit this month.", labels=labels
    )
    for b in standings:
        spend.add_metric([b.name, b.scope], b.spent_usd)
        limit.add_metric([b.name, b.scope], b.limit_usd)
    return iter((spend, limit))


def team_gpus(views: Sequence[JobView]) -> dict[str, float]:
    """The GPUs each team's jobs hold: their active attempts' allocations (a shared GPU
    counts its share)."""
    held: dict[str, float] = defaultdict(float)
    for view in views:
        attempt = view.attempt
        if attempt is not None and attempt.state in ACTIVE_ATTEMPT:
            held[view.record.team] += sum(h.gpus() for h in attempt.detail.allocations)
    return held


def quotas(quota: Mapping[str, TeamQuota], used: Mapping[str, float]) -> Iterator[Metric]:
    """Kueue's cluster-queue quota metrics, a team standing for a cluster queue."""
    labels = ["cohort", "team", "resource"]
    nominal = GaugeMetricFamily(
        "meshctl_team_nominal_quota", "A team's nominal quota.", labels=labels
    )
    limit = GaugeMetricFamily(
        "meshctl_team_borrowing_limit",
        "The most a team may borrow from its cohort (teams with a limit).",
        labels=labels,
    )
    usage = GaugeMetricFamily(
        "meshctl_team_resource_usage", "What a team's jobs hold.", labels=labels
    )
    borrowed = GaugeMetricFamily(
        "meshctl_team_resource_borrowed",
        "What a team holds beyond its nominal quota (borrowed from its cohort).",
        labels=labels,
    )
    for team in sorted(set(quota) | set(used)):
        q, gpus = quota.get(team), used.get(team, 0.0)
        key = [(q.cohort if q else None) or NO_COHORT, team, GPU]
        usage.add_metric(key, gpus)
        if q is None:
            continue
        nominal.add_metric(key, q.gpus)
        borrowed.add_metric(key, max(0.0, gpus - q.gpus))
        if q.borrowing_limit_gpus is not None:
            limit.add_metric(key, q.borrowing_limit_gpus)
    return iter((nominal, limit, usage, borrowed))


def agents(report: AgentReport) -> GaugeMetricFamily:
    """The nodes' agents by what they last said (healthy, degraded, unhealthy) or by their
    silence (suspect, dead), per pool."""
    counts: dict[tuple[str, str], int] = defaultdict(int)
    for key, status in report.agents.items():
        counts[(key.partition("/")[0], status.verdict)] += 1
    family = GaugeMetricFamily(
        "meshctl_agent_nodes", "Nodes by their agent's verdict.", labels=["pool", "verdict"]
    )
    for (pool, verdict), count in sorted(counts.items()):
        family.add_metric([pool, verdict], count)
    return family
