"""The chaos benchmark's faults (``chaos.py`` has the command): each breaks one thing meshctl
drives or stands on, for its outage, then ends as an operator or the thing itself would end it.

- ``job-agent``: the Ray head's job agent is away (restarting, or slow to come up): every job
  submission is answered with Ray's "500: No available agent to submit job, please try again
  later" (a gate in front of the dashboard says it; everything else passes).
- ``dashboard``: the Ray head's dashboard (the Jobs and state APIs) restarts: nothing listens on
  its port (a switch in front of it is cut), then it is back.
- ``node-kill``: a GPU node of the on-prem pool is killed (every process of it), then a node
  of the same name and shape joins again.
- ``head-restart``: the on-prem pool's Ray cluster is killed, head and nodes (without GCS
  fault tolerance, a head that restarts takes its cluster's work with it), then started again
  by ``meshctl up``, on new ports.
- ``controller-kill``: the controller is SIGKILLed, then started again by ``meshctl up``.
- ``postgres-restart``: the state store's Postgres server stops (``pg_ctl stop -m fast``: its
  clients' connections end) under the API server and the controller, then starts again.
- ``cloud-throttled``: both clouds' APIs refuse every call as over their request rate (EC2's
  ``RequestLimitExceeded``, HTTP 503; GCE's HTTP 429 ``rateLimitExceeded``).
- ``cloud-unreachable``: nothing answers at either cloud's API endpoint (switches cut).

The on-prem pool's dashboard address, as meshctl reads it from the pool's run file, is pointed
at the switch, the switch at the gate and the gate at the dashboard: ``Front.install`` writes
it again after each (re)start of the cluster.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from meshctl.controller import daemon
from meshctl.model import LocalPool
from meshctl.pools import local
from tests.emulators.aws import MotoServer
from tests.emulators.gate import NO_AGENT, Gate
from tests.emulators.gce import GceEmulator
from tests.emulators.switch import Switch
from tests.pgserver import PgServer

POOL = "onprem"


@dataclass
class Front:
    """What stands between meshctl and the on-prem pool's dashboard: a switch, then a gate."""

    gate: Gate
    switch: Switch
    run_dir: Path

    def cluster(self) -> local.LocalCluster:
        return local.LocalCluster.load(local.run_file(self.run_dir, POOL))

    def install(self) -> None:
        """Point the gate at the cluster's dashboard, and the pool's address at the switch."""
        cluster = self.cluster()
        if cluster.dashboard != self.switch.address:
            self.gate.target = cluster.dashboard.rstrip("/")
            cluster.dashboard = self.switch.address
            cluster.save(local.run_file(self.run_dir, POOL))


@dataclass
class World:
    """Everything the faults act on."""

    front: Front
    pool: LocalPool
    moto: MotoServer | None  # with the cloud pools only
    gce: GceEmulator | None
    clouds: list[Switch]
    postgres: PgServer
    up: Callable[[], None]  # a callable running `meshctl up` (the operator's restart)
    home: Path
    status: Callable[[], dict[str, Any]]  # `meshctl status -o json`, as a user sees the mesh


@dataclass
class Fault:
    kind: str
    outage_s: float
    probes: tuple[str, ...] = ("onprem",)  # who to send a job to as it starts
    began_s: float = 0.0
    ended_s: float = 0.0
    notes: list[str] = field(default_factory=list)

    def begin(self, world: World) -> None:
        raise NotImplementedError

    def end(self, world: World) -> None:
        raise NotImplementedError


class JobAgent(Fault):
    def begin(self, world: World) -> None:
        world.front.gate.refuse("POST", "/api/jobs/", 500, NO_AGENT)

    def end(self, world: World) -> None:
        pools = world.status().get("pools", [])
        shown = next((p["state"] for p in pools if p["pool"] == POOL), None)
        self.notes.append(f"pool {POOL} shown as {shown!r}")
        world.front.gate.open()
        self.notes.append(f"{len(world.front.gate.refused)} submissions refused")


class Dashboard(Fault):
    def begin(self, world: World) -> None:
        world.front.switch.cut()

    def end(self, world: World) -> None:
        world.front.switch.mend()


class NodeKill(Fault):
    node = ""

    def begin(self, world: World) -> None:
        cluster = world.front.cluster()
        nodes = sorted({p.node for p in cluster.processes if p.node != "head"})
        self.node = nodes[-1]
        local.remove_node(cluster, self.node, world.front.run_dir)

    def end(self, world: World) -> None:
        cluster = world.front.cluster()
        group = next(g for g in world.pool.nodes if self.node in g.node_names())
        local.add_node(cluster, self.node, group, world.front.run_dir, world.pool.agents)
        self.notes.append(f"node {self.node} killed and started again")


class HeadRestart(Fault):
    def begin(self, world: World) -> None:
        local.stop(world.front.cluster())

    def end(self, world: World) -> None:
        world.up()
        world.front.install()


class ControllerKill(Fault):
    def begin(self, world: World) -> None:
        pid = daemon.running(world.home)
        assert pid is not None, "no controller to kill"
        os.kill(pid, signal.SIGKILL)
        self.notes.append(f"controller {pid} SIGKILLed")

    def end(self, world: World) -> None:
        world.up()


class PostgresRestart(Fault):
    def begin(self, world: World) -> None:
        world.postgres.stop("fast")

    def end(self, world: World) -> None:
        world.postgres.start()


class CloudThrottled(Fault):
    def begin(self, world: World) -> None:
        assert world.moto is not None
        assert world.gce is not None
        world.moto.throttle(True)
        world.gce.throttle(10**9, 429)

    def end(self, world: World) -> None:
        assert world.moto is not None
        assert world.gce is not None
        world.moto.throttle(False)
        world.gce.throttle(0)


class CloudUnreachable(Fault):
    def begin(self, world: World) -> None:
        for switch in world.clouds:
            switch.cut()

    def end(self, world: World) -> None:
        for switch in world.clouds:
            switch.mend()


KINDS: dict[str, type[Fault]] = {
    "job-agent": JobAgent,
    "dashboard": Dashboard,
    "node-kill": NodeKill,
    "head-restart": HeadRestart,
    "controller-kill": ControllerKill,
    "postgres-restart": PostgresRestart,
    "cloud-throttled": CloudThrottled,
    "cloud-unreachable": CloudUnreachable,
}
CLOUD_KINDS = ("cloud-throttled", "cloud-unreachable")
