"""The controller's side of the nodes' dataset caches (``meshctl.data``, kept by the agents).

Each cycle: what every node's cache holds comes in with its agent's probe (``caches_of``: the
scheduler's locality scorer reads it). ``DataSync.sync`` then works out what each node needs:
the datasets of the attempts placed on it (this cycle's and those already running), and of a
queued job the scheduler holds nodes for (next in line). For each dataset a node lacks:

- a node of its pool holds it whole: the node's agent fetches it from there (peer fetch);
- else, a node of the pool is already fetching it from the source: the node waits for that copy,
  so central storage is read about once per pool per dataset version;
- else the node's agent fetches it from the source.

An ask that shows no effect within ``RETRY_S`` (the agent died, its node was lost mid-transfer,
the fetch failed) is made again, and no longer makes the pool's other nodes wait: they fall
back to another holder or to the source. Each node's agent is also told which locations its
jobs need, so that its cache never evicts them (pins: sent when they change, and again every
``PIN_EVERY_S`` in case the agent restarted).

Requests go out on threads of their own with a short timeout: an agent that does not answer
never holds up a cycle. What a fetch did shows in the agent's next report.
"""

from __future__ import annotations

import json
import logging
import urllib.request
from collections.abc import Callable, Mapping
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from meshctl.agent.server import PATH, PINS_PATH, PREFETCH_PATH
from meshctl.agent.watch import AgentReport
from meshctl.controller.deciding.dispatch import placement_nodes
from meshctl.controller.deciding.step import Step
from meshctl.controller.deciding.world import CacheSeen, World
from meshctl.model.job import Dataset
from meshctl.state.records import ACTIVE_ATTEMPT

log = logging.getLogger("meshctl.controller")

Post = Callable[[str, str, dict[str, Any]], None]
RETRY_S = 30.0  # an ask that shows no effect in this long is made again
PIN_EVERY_S = 60.0  # pins are sent again this often even when unchanged


def caches_of(report: AgentReport) -> dict[str, CacheSeen]:
    """Each node's cache as its agent last reported it, by "pool/node"."""
    out = {}
    for key, status in report.agents.items():
        cache = status.cache
        if not cache:
            continue
        entries = [e for e in cache.get("entries") or () if isinstance(e, dict)]
        failed = cache.get("failed")
        out[key] = CacheSeen(
            root=str(cache.get("root") or ""),
            agent=status.url.removesuffix(PATH),
            complete=frozenset(str(e["location"]) for e in entries if e.get("complete")),
            fetching=frozenset(str(e["location"]) for e in entries if not e.get("complete")),
            failed=frozenset(str(k) for k in failed) if isinstance(failed, dict) else frozenset(),
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


@dataclass(slots=True)
class _Ask:
    at_s: float  # when the node's agent was last asked
    tries: int  # how many times in a row


def needs(world: World, step: Step) -> dict[str, dict[str, Dataset]]:
    """What each node ("pool/node") needs, in the order it is needed: this cycle's dispatches
    first, then the attempts already placed, then the nodes held for a queued job."""
    views = {v.record.id: v for v in world.jobs}
    attempts = [(views[d.job_id].job.spec.data, d.attempt) for d in step.dispatches]
    attempts += [(v.job.spec.data, v.attempt) for v in world.jobs if v.attempt is not None]
    out: dict[str, dict[str, Dataset]] = {}
    for data, attempt in attempts:
        if data and attempt.state in ACTIVE_ATTEMPT:
            for node in placement_nodes(attempt):
                wanted = out.setdefault(f"{attempt.pool}/{node}", {})
                wanted.update({d.location: d for d in data if d.location not in wanted})
    reserved = step.plan.reserved if step.plan is not None else {}
    for job_id, nodes in reserved.items():
        view = views.get(job_id)
        if view is None:
            continue
        for key in nodes:
            wanted = out.setdefault(key, {})
            wanted.update({d.location: d for d in view.job.spec.data if d.location not in wanted})
    return out


class DataSync:
    """Tells the nodes' agents what to fetch and what to keep."""

    def __init__(
        self,
        token: Callable[[str], str | None],
        send: Post = post,
        executor: Executor | None = None,
    ) -> None:
        self.token, self.send = token, send
        self._asked: dict[tuple[str, str], _Ask] = {}  # ("pool/node", location)
        self._pins: dict[str, tuple[frozenset[str], float]] = {}  # what each was told, when
        self._pool = executor or ThreadPoolExecutor(max_workers=4, thread_name_prefix="data-sync")

    def sync(self, world: World, step: Step) -> None:
        wanted = needs(world, step)
        self._forget_done(world)
        for key, data in wanted.items():
            for dataset in data.values():
                self._fetch(world, key, dataset)
        self._send_pins(world, wanted)

    def _forget_done(self, world: World) -> None:
        for key, location in list(self._asked):
            seen = world.caches.get(key)
            if seen is None or location in seen.complete:
                del self._asked[(key, location)]

    def _fetch(self, world: World, key: str, dataset: Dataset) -> None:
        """Ask ``key``'s agent to fetch ``dataset`` unless it holds it, is fetching it, was just
        asked, or should wait for a node of its pool that is fetching it from the source."""
        seen, location = world.caches.get(key), dataset.location
        pool, node = key.split("/", 1)
        token = self.token(pool)
        if seen is None or not token or location in seen.complete | seen.fetching:
            return  # no cache there (the job reads from the source), or nothing to do
        ask = self._asked.get((key, location))
        if ask is not None and world.now_s - ask.at_s < RETRY_S:
            return
        holders = peers(world, pool, node, location)
        if not holders and self._pool_fetching(world, pool, location, key):
            return  # a node of its pool is reading it from the source: its copy comes next
        self._asked[(key, location)] = _Ask(world.now_s, ask.tries + 1 if ask else 1)
        body = {
            "datasets": [{"location": location, "endpoint_url": dataset.endpoint_url}],
            "peers": holders,
        }
        self._submit(seen.agent + PREFETCH_PATH, token, body)

    def _pool_fetching(self, world: World, pool: str, location: str, but: str) -> bool:
        """Whether another node of ``pool`` is on its way to a whole copy of ``location``:
        its agent says it is fetching it, or was asked for it the first time just now."""
        for key, seen in world.caches.items():
            if key != but and key.startswith(f"{pool}/") and location in seen.fetching:
                return True
        return any(
            key != but
            and key.startswith(f"{pool}/")
            and where == location
            and ask.tries == 1
            and world.now_s - ask.at_s < RETRY_S
            and location not in world.caches[key].failed
            for (key, where), ask in self._asked.items()
        )

    def _send_pins(self, world: World, wanted: Mapping[str, Mapping[str, Dataset]]) -> None:
        """Each node's agent is told the locations its jobs read, when changed."""
        for key, seen in world.caches.items():
            now = frozenset(wanted.get(key, {}))
            token = self.token(key.split("/", 1)[0])
            last = self._pins.get(key)
            if not token or (last and last[0] == now and world.now_s - last[1] < PIN_EVERY_S):
                continue
            self._pins[key] = (now, world.now_s)
            self._submit(seen.agent + PINS_PATH, token, {"locations": sorted(now)})

    def _submit(self, url: str, token: str, body: Mapping[str, Any]) -> None:
        def send() -> None:
            try:
                self.send(url, token, dict(body))
            except Exception as err:  # the agent's next report shows what it holds
                log.warning("data cache request to %s failed: %s", url, err)

        self._pool.submit(send)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
