"""How a launched cloud instance becomes a Ray node of its pool's cluster: the seam.

On a real cloud the instance's startup script (EC2 user data, GCE ``startup-script``) installs
Ray and runs ``ray start`` against the pool's head with the pool's labels. On this machine an
emulated instance (one that moto_server or the GCE emulator launched) is a local
``ray start`` process instead, bound to the instance id:

- the pool's first instance is the head of the pool's cluster (and takes work too);
- every node has its type's GPUs (declared with ``--num-gpus``, the catalog's model as an
  ``accelerator_type`` resource) and scaled-down CPUs and memory (1 CPU, 2 GiB: a 2-core
  machine must hold several), and the labels ``meshctl.io/node=<instance>`` and
  ``meshctl.io/node-type=<type>``;
- terminating the instance stops exactly that node (``leave``).

The cluster is kept like the embedded pool's (``local.LocalCluster``, a run file per pool), so
``meshctl down`` stops it too.
"""

from __future__ import annotations

from pathlib import Path

from meshctl.clouds.base import Instance
from meshctl.model.catalog import Catalog
from meshctl.model.mesh import Accelerator, NodeGroup
from meshctl.pools import local
from meshctl.pools.observed import NODE_TYPE_LABEL, node_name

__all__ = ["EmulatedInstances", "node_name"]

CPUS, MEMORY_GIB = 1.0, 2.0  # per emulated instance, whatever its type says


class EmulatedInstances:
    def __init__(self, run_dir: Path, catalogs: dict[str, Catalog]) -> None:
        self.run_dir, self.catalogs = run_dir, catalogs

    def cluster(self, pool: str) -> local.LocalCluster | None:
        path = local.run_file(self.run_dir, pool)
        return local.LocalCluster.load(path) if path.is_file() else None

    def join(self, provider: str, instance: Instance) -> local.LocalCluster:
        """Make the instance a node of its pool's cluster (the head if there is none yet)."""
        group = self._group(provider, instance)
        cluster = self.cluster(instance.pool)
        if cluster is None or not local.running(cluster):
            if cluster is not None:
                local.stop(cluster)  # what is left of a cluster whose head died
            return local.start_head(instance.pool, self.run_dir, head=group)
        if all(p.node != group.name for p in cluster.processes):
            local.add_node(cluster, group.name, group, self.run_dir)
        return cluster

    def leave(self, pool: str, instance_id: str) -> list[str]:
        """The instance is gone: stop its node. When it was the head (or the last), the
        cluster goes with it; return the other nodes that went too (their instances are
        orphans now)."""
        cluster = self.cluster(pool)
        if cluster is None:
            return []
        name = node_name(instance_id)
        head = bool(cluster.processes) and cluster.processes[0].node == name
        if not head:
            local.remove_node(cluster, name, self.run_dir)
            if cluster.processes:
                return []
        others = [p.node for p in cluster.processes if p.node != name]
        local.stop(cluster)
        local.run_file(self.run_dir, pool).unlink(missing_ok=True)
        return others

    def _group(self, provider: str, instance: Instance) -> NodeGroup:
        catalog = self.catalogs.get(provider)
        found = catalog.instance_type(instance.node_type) if catalog else None
        if found is None:
            raise LookupError(f"{instance.node_type}: not in the {provider} catalog")
        acc = found.accelerator
        return NodeGroup(
            name=node_name(instance.id),
            gpus=acc.count,
            accelerator=Accelerator(vendor=acc.vendor, model=acc.model, memory_gib=acc.memory_gib),
            cpus=CPUS,
            memory_gib=MEMORY_GIB,
            nic_gbps=found.nic_gbps,
            labels={NODE_TYPE_LABEL: instance.node_type, "zone": instance.zone},
        )
