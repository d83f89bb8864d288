"""The controller's side of the node agents: every cycle it pulls each live node's agent and
says which nodes are unhealthy (their agent says so), suspect (their agent has not answered
for ``suspect_after_s``: no new work goes there) or dead (silent for ``dead_after_s``: their
jobs are moved), whatever Ray says of the node. A hung or partitioned node keeps its raylet's
heartbeat for a while, or its raylet is fine and its GPUs are not; the agent tells.

Pulls run in threads: a cycle asks every agent not already being asked, then waits at most
``wait_s`` for the answers; an agent that does not answer in time is asked again only once its
request ends (``timeout_s``), so a hung agent never holds up a cycle. Silence counts from the
last fresh probe (the agent's answer less its age), or from when the node was first seen.

Only ``unhealthy`` (and the silence of ``dead``) takes a node out of service; ``degraded`` and
``unknown`` (an agent that cannot tell: no GPU probe on its node) are shown, nothing more.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from typing import Any

from meshctl.agent.server import PATH
from meshctl.model.mesh import NodeAgents
from meshctl.pools.observed import (
    AGENT_HOST_LABEL,
    AGENT_PORT_LABEL,
    ObservedNode,
    PoolObservation,
)

Fetch = Callable[[str, str, float], dict[str, Any]]


@dataclass(frozen=True, slots=True)
class AgentStatus:
    """One node's agent, as the controller last heard it."""

    url: str
    # healthy, unknown, degraded, unhealthy (its own word: probe.VERDICTS); suspect, dead (its
    # silence); unknown also before its first answer (then ``error`` says "no answer yet")
    verdict: str
    reasons: tuple[str, ...] = ()
    probed_at_s: float | None = None  # its last fresh probe, on the controller's clock
    error: str | None = None  # why the last pull failed
    cache: Mapping[str, Any] | None = None  # its data cache's report (None: it keeps none)

    def to_json(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "verdict": self.verdict,
            "reasons": list(self.reasons),
            "probed_at_s": self.probed_at_s,
            "error": self.error,
            "cache": dict(self.cache) if self.cache is not None else None,
        }


@dataclass(frozen=True, slots=True)
class AgentReport:
    unhealthy: dict[str, str] = field(default_factory=dict)  # "pool/node" -> why
    suspect: dict[str, str] = field(default_factory=dict)  # "pool/node" -> why
    agents: dict[str, AgentStatus] = field(default_factory=dict)  # "pool/node" -> its agent
    dead: set[str] = field(default_factory=set)  # "pool/node" silent for dead_after_s


def said(verdict: str, reasons: Sequence[str]) -> str:
    """A node's health signal in the agent's words: what the controller acts on, and what
    the operator overrules (``meshctl nodes health --healthy``)."""
    return "agent: " + ("; ".join(reasons) or verdict)


def agent_url(node: ObservedNode, settings: NodeAgents) -> str | None:
    """Where ``node``'s agent answers: its labels' port (and address), else the pool's port at
    the node's address; None when the node has no agent."""
    port = node.labels.get(AGENT_PORT_LABEL) or (settings.port and str(settings.port))
    host = node.labels.get(AGENT_HOST_LABEL) or node.address
    if not port or not host:
        return None
    return f"http://{host}:{port}{PATH}"


def fetch(url: str, token: str, timeout_s: float) -> dict[str, Any]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=timeout_s) as answer:
        found: dict[str, Any] = json.loads(answer.read())
        return found


class AgentWatch:
    """Pulls the agents of the pools' live nodes, with each pool's token and settings."""

    def __init__(
        self,
        settings: Callable[[str], NodeAgents | None],
        token: Callable[[str], str | None],
        timeout_s: float = 3.0,
        wait_s: float = 0.5,
        fetch: Fetch = fetch,
    ) -> None:
        """``settings``/``token``: a pool's agent settings and its cluster's token (None: the
        pool's nodes have no agents)."""
        self.settings, self.token, self.fetch = settings, token, fetch
        self.timeout_s, self.wait_s = timeout_s, wait_s
        self._pool = ThreadPoolExecutor(max_workers=16, thread_name_prefix="agent-pull")
        self._asking: dict[str, Future[dict[str, Any]]] = {}
        self._since: dict[str, float] = {}  # when silence counts from: first seen, last probe
        self._last: dict[str, AgentStatus] = {}

    def pull(self, observations: Mapping[str, PoolObservation], now: float) -> AgentReport:
        targets: dict[str, tuple[str, str, NodeAgents]] = {}
        for pool, seen in observations.items():
            settings, token = self.settings(pool), self.token(pool)
            if settings is None or not token or not seen.reachable:
                continue
            for node in seen.nodes:
                url = agent_url(node, settings) if node.alive else None
                if url is not None:
                    targets[f"{pool}/{node.name}"] = (url, token, settings)
        for key, (url, token, _) in targets.items():
            if key not in self._asking:
                self._asking[key] = self._pool.submit(self.fetch, url, token, self.timeout_s)
            self._since.setdefault(key, now)
        wait([self._asking[k] for k in targets], timeout=self.wait_s)
        report = AgentReport()
        for key, (url, _, settings) in targets.items():
            status = self._status(key, url, now)
            self._last[key] = status = self._judge(key, status, settings, now)
            report.agents[key] = status
            if status.verdict in ("unhealthy", "dead"):
                report.unhealthy[key] = said(status.verdict, status.reasons)
            elif status.verdict == "suspect":
                report.suspect[key] = said(status.verdict, status.reasons)
            if status.verdict == "dead":  # by its silence: dead to meshctl, whatever Ray says
                report.dead.add(key)
        for gone in set(self._since) - set(targets):  # a node gone from Ray: forget it
            self._since.pop(gone, None)
            self._last.pop(gone, None)
        return report

    def _status(self, key: str, url: str, now: float) -> AgentStatus:
        """The answer that came for ``key``, or what was last known with why it did not."""
        asked = self._asking[key]
        last = self._last.get(key, AgentStatus(url, "unknown"))
        if not asked.done():
            return replace(last, url=url, error="no answer yet")
        del self._asking[key]
        try:
            answer = asked.result()
        except Exception as err:  # whatever went wrong, the agent did not answer
            why = getattr(err, "reason", None) or err
            return replace(last, url=url, error=str(why))
        probed = now - float(answer.get("age_s") or 0.0)
        self._since[key] = probed  # its answer says how fresh it is
        verdict = str(answer.get("verdict") or "unknown")
        reasons = tuple(str(r) for r in answer.get("reasons") or ())
        cache = answer.get("cache")
        return AgentStatus(
            url, verdict, reasons, probed, cache=cache if isinstance(cache, dict) else None
        )

    def _judge(
        self, key: str, status: AgentStatus, settings: NodeAgents, now: float
    ) -> AgentStatus:
        silent_s = now - self._since[key]
        if silent_s < settings.suspect_after_s:  # silence only grows between answers
            return status
        dead = silent_s >= settings.dead_after_s
        after = settings.dead_after_s if dead else settings.suspect_after_s
        why = f"silent for over {after:g} s"  # the same words every cycle: one event
        verdict = "dead" if dead else "suspect"
        return replace(status, verdict=verdict, reasons=(why,))

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
