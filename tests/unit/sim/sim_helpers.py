"""Small meshes and jobs for the simulator's tests, where every figure is computed by hand."""

from __future__ import annotations

from meshctl.policy.facts import MeshSnapshot, PoolFacts
from meshctl.scheduler import Node, Offer, PoolInfo
from meshctl.sim.core.engine import CloudPool, SimConfig, SimMesh
from meshctl.sim.core.failures import Checkpoints
from meshctl.sim.core.network import Network
from meshctl.sim.core.workload import SimJob

FREE = Checkpoints(interval_s=None, cost_s=0.0, restart_s=0.0)  # no checkpoint or restart cost


def node(name: str, gpus: int = 1, rack: str = "r0", switch: str = "s0") -> Node:
    return Node(
        name=name,
        pool="onprem",
        gpu_free=(1.0,) * gpus,
        gpu_memory_gib=80.0,
        accelerator="H100",
        vendor="nvidia",
        cpus=64.0,
        cpus_free=64.0,
        memory_gib=1024.0,
        memory_gib_free=1024.0,
        labels={"rack": rack, "switch": switch},
        usd_per_gpu_hour=1.0,
    )


def mesh(*nodes: Node, network: Network | None = None, cloud: bool = False) -> SimMesh:
    pools = [PoolInfo("onprem", cloud=False)]
    offers, clouds = [], {}
    if cloud:
        pools.append(PoolInfo("cloud", cloud=True, max_new_nodes=4))
        offers.append(
            Offer("cloud", "gpu-1", 1, 80.0, "H100", "nvidia", 16, 128, 0, 4.0, 1.5, True, 4)
        )
        clouds["cloud"] = CloudPool("cloud", provision_s=100.0, spot_lifetime_s=None, idle_s=600.0)
    networks = {"onprem": network} if network else {}
    gpus = sum(n.gpus for n in nodes)
    facts = [PoolFacts("onprem", "local", "", {"tier": "strategic"}, ("H100",), gpus, 1.0, gpus)]
    if cloud:
        facts.append(
            PoolFacts("cloud", "gcp", "us-central1", {"tier": "burst"}, ("H100",), 0, None, 0)
        )
    configured = MeshSnapshot(tuple(facts))
    return SimMesh(tuple(nodes), tuple(pools), tuple(offers), clouds, networks, configured)


def job(
    name: str,
    arrival: float,
    duration: float,
    gpus: float = 1,
    nodes: int = 1,
    criticality: str = "standard",
    kind: str = "batch",
    team: str = "t",
) -> SimJob:
    return SimJob(name, arrival, duration, gpus, nodes, kind, criticality, team)


def config(**changes: object) -> SimConfig:
    base: dict[str, object] = {"checkpoints": FREE, "cycle_s": 0.0}
    base.update(changes)
    return SimConfig(**base)  # type: ignore[arg-type]
