"""A node of a local cluster (``meshctl.pools.local``) lost on purpose, for the benchmarks.

- ``kill``: every process of the node ends (``local.remove_node``: SIGTERM, SIGKILL 3 s later),
  as when a machine is switched off: its connections close, Ray notices within seconds.
- ``stop``: every process of the node is stopped with SIGSTOP (its ``ray start`` session: the
  raylet, its agents and workers, what they started, job drivers included; and the node's
  meshctl agent, in a session of its own), as when a machine hangs or drops off the network:
  nothing exits, no connection closes, nothing answers. Only silence tells.

``LostNode.end`` ends what is left of it: the stopped processes by SIGKILL, never SIGCONT (a
worker let go on would report steps its run no longer takes), then the rest as
``remove_node`` does; ``wait_gone`` waits until Ray no longer lists the node alive, so a node
of the same name can be started again. Meanwhile a thread notes when Ray declared the node
dead (``ray_dead_after_s``): which of Ray and a controller noticed first.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

from meshctl.pools import local
from meshctl.pools.ray import PoolError, RayPoolClient

LOSSES = ("kill", "stop")
POLL_S = 0.5  # how often Ray's view of the lost node is read


class LostNode:
    """A node lost at ``at_s`` (``time.time()``), and what was left of it."""

    def __init__(self, cluster: local.LocalCluster, kind: str, node: str) -> None:
        if kind not in LOSSES:
            raise ValueError(f"loss: expected one of {', '.join(LOSSES)}, got {kind!r}")
        self.kind, self.node = kind, node
        self.stopped: list[local.Process] = []  # pid and start ticks: never a reused pid
        self.dead_at_s: float | None = None
        self._client = _client(cluster)
        self._ended = threading.Event()
        self.at_s = time.time()

    @property
    def ray_dead_after_s(self) -> float | None:
        """Seconds from the loss to Ray listing the node dead (None: not yet)."""
        return None if self.dead_at_s is None else round(self.dead_at_s - self.at_s, 2)

    def watch(self) -> None:
        """From now on, note when Ray lists the node dead (in a thread of its own)."""
        threading.Thread(target=self._watch_ray, daemon=True).start()

    def _watch_ray(self) -> None:
        while not self._ended.wait(POLL_S):
            alive = _alive(self._client)
            if alive is not None and self.node not in alive:
                self.dead_at_s = time.time()
                return

    def end(self, cluster: local.LocalCluster, run_dir: Path) -> None:
        """End every process of the node that is left: stopped ones first, by SIGKILL."""
        self._ended.set()
        for process in self.stopped:
            if local.start_ticks(process.pid) == process.start_ticks:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process.pid, signal.SIGKILL)
        local.remove_node(cluster, self.node, run_dir)


def lose(cluster: local.LocalCluster, node: str, run_dir: Path, kind: str) -> LostNode:
    """Lose ``node`` the ``kind`` way; Ray's view of it is watched from then on."""
    lost = LostNode(cluster, kind, node)
    if kind == "kill":
        local.remove_node(cluster, node, run_dir)
    else:
        try:
            stop_node(cluster, node, lost.stopped)
        except BaseException:
            lost.end(cluster, run_dir)
            raise
    lost.watch()
    return lost


def stop_node(cluster: local.LocalCluster, node: str, stopped: list[local.Process]) -> None:
    """SIGSTOP every process of ``node``, found as ``remove_node`` finds them (its sessions and
    their descendants), again until no new one shows up: one may have started meanwhile.
    ``stopped`` grows as they are stopped, so that a failure half-way leaves none behind."""
    only = dataclasses.replace(cluster, processes=[p for p in cluster.processes if p.node == node])
    for _ in range(10):
        seen = {p.pid for p in stopped}
        fresh = [pid for pid in local.leftover(only) if pid not in seen]
        if not fresh:
            return
        for pid in fresh:
            ticks = local.start_ticks(pid)
            if ticks is None:
                continue  # gone meanwhile
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
                stopped.append(local.Process(node, pid, ticks))


def wait_gone(cluster: local.LocalCluster, node: str, timeout_s: float) -> bool:
    """Until Ray no longer lists ``node`` alive (False: not within ``timeout_s``)."""
    client = _client(cluster)
    return _until(lambda: node not in (_alive(client) or {node}), timeout_s)


def _until(done: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            return False
        time.sleep(POLL_S)
    return True


def _client(cluster: local.LocalCluster) -> RayPoolClient:
    return RayPoolClient(cluster.pool, cluster.dashboard, cluster.token, timeout_s=5)


def _alive(client: RayPoolClient) -> set[str] | None:
    """Names of the nodes Ray lists alive; None: it did not answer."""
    try:
        return {n.name for n in client.nodes() if n.alive}
    except PoolError:
        return None
