"""The controller's side of the nodes' dataset caches (``meshctl.data``, kept by the agents).

Each cycle: what every node's cache holds comes in with its agent's probe (``caches_of``: the
scheduler's locality scorer reads it); a job placed this cycle has its nodes' agents start
fetching its datasets at once, from a node of the pool that holds them whole (peer fetch) or
else from the source (``DataSync.sync``); and each node's agent is told which locations the
jobs on it need, so that its cache never evicts them (pins, sent when they change).

Requests go out on threads of their own with a short timeout: an agent that does not answer
never holds up a cycle. What a fetch did shows in the agent's next report.
"""

from __future__ import annotations

import json
import logging
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from meshctl.agent.server import PATH, PINS_PATH, PREFETCH_PATH
from meshctl.agent.watch import AgentReport
from meshctl.controller.dispatch import placement_nodes
from meshctl.controller.step import Step
from meshctl.controller.world import CacheSeen, World
from meshctl.model.job import Dataset
from meshctl.state.records import ACTIVE_ATTEMPT, AttemptRecord

log = logging.getLogger("meshctl.controller")

Post = Callable[[str, str, dict[str, Any]], None]


def caches_of(report: AgentReport) -> dict[str, CacheSeen]:
    """Each node's cache as its agent last reported it, by "pool/node"."""
    out = {}
    for key, status in report.agents.items():
        cache = status.cache
        if not cache:
            continue
        entries = [e for e in cache.get("entries") or () if isinstance(e, dict)]
        out[key] = CacheSeen(
            root=str(cache.get("root") or ""),
            agent=status.url.removesuffix(PATH),
            complete=frozenset(str(e["location"]) for e in entries if e.get("complete")),
        )
    return out


def peers(world: World, pool: str, node: str, location: str) -> list[str]:
    """The agents of ``pool``'s other nodes that hold ``location`` whole."""
    return sorted(
        seen.agent
        for key, seen in world.caches.items()
        if key.startswith(f"{pool}/") and key != f"{pool}/{node}" and location in seen.complete
    )


def post(url: str, token: str, body: dict[str, Any]) -> None:
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=5.0) as answer:
        answer.read()


class DataSync:
    """Tells the nodes' agents what to fetch and what to keep."""

    def __init__(self, token: Callable[[str], str | None], send: Post = post) -> None:
        self.token, self.send = token, send
        self._pins: dict[str, frozenset[str]] = {}  # "pool/node" -> what it was last told
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="data-sync")

    def sync(self, world: World, step: Step) -> None:
        views = {v.record.id: v for v in world.jobs}
        placed = [(views[d.job_id], d.attempt) for d in step.dispatches if d.job_id in views]
        for view, attempt in placed:
            for node in placement_nodes(attempt) if view.job.spec.data else ():
                self._prefetch(world, attempt.pool, node, view.job.spec.data)
        held = [(v, v.attempt) for v in world.jobs if v.attempt is not None]
        self._send_pins(world, [(v.job.spec.data, a) for v, a in [*held, *placed]])

    def _prefetch(self, world: World, pool: str, node: str, data: Iterable[Dataset]) -> None:
        seen, token = world.caches.get(f"{pool}/{node}"), self.token(pool)
        if seen is None or not token:
            return  # no cache there: the job reads from the source
        for d in data:
            body = {
                "datasets": [{"location": d.location, "endpoint_url": d.endpoint_url}],
                "peers": peers(world, pool, node, d.location),
            }
            self._submit(seen.agent + PREFETCH_PATH, token, body)

    def _send_pins(
        self, world: World, attempts: Sequence[tuple[Sequence[Dataset], AttemptRecord]]
    ) -> None:
        """Each node's agent is told the locations its active attempts read, when changed."""
        wanted: dict[str, set[str]] = {key: set() for key in world.caches}
        for data, attempt in attempts:
            if attempt.state not in ACTIVE_ATTEMPT or not data:
                continue
            for node in placement_nodes(attempt):
                key = f"{attempt.pool}/{node}"
                if key in wanted:
                    wanted[key].update(d.location for d in data)
        for key, locations in wanted.items():
            now = frozenset(locations)
            token = self.token(key.split("/", 1)[0])
            if self._pins.get(key) == now or not token:
                continue
            self._pins[key] = now
            body = {"locations": sorted(now)}
            self._submit(world.caches[key].agent + PINS_PATH, token, body)

    def _submit(self, url: str, token: str, body: Mapping[str, Any]) -> None:
        def send() -> None:
            try:
                self.send(url, token, dict(body))
            except Exception as err:  # the agent's next report shows what it holds
                log.warning("data cache request to %s failed: %s", url, err)

        self._pool.submit(send)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
