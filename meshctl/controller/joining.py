"""How the controller's cloud side gets a launched instance into its pool's Ray cluster: by
the instance's own startup script (``meshctl.boot``), never by the controller.

For a provider whose instances boot from a script (``clouds.base.Scripted``: AWS, GCP):

- a pool without a running cluster gets a new cluster token, written to the secret manager
  (a new version when the name exists: rotated with the cluster) and kept in the run folder
  for the controller's own calls; its next instance is the head: one of its own
  (``head_node_type``, labelled ``meshctl.io/role=head``: it takes no work), else the first
  worker (``lifecycle.clusters``);
- each launch carries the startup script rendered for it (``boot.script``): the head's, or a
  worker's with the head's GCS address; the token is never in it;
- an emulated instance (an emulator's endpoint) boots here by running the script the
  provider holds for it (``pools.emulated``); an instance on a real account boots itself.
  Either counts as joined once its node is in the pool's cluster and its agent answers.

Providers without a secret manager (the tests' fake) launch without a script, as before:
their instances count as joined at once.
"""

from __future__ import annotations

import importlib.metadata
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from meshctl.boot.script import StartupSpec, render, secret_name
from meshctl.clouds.base import Cloud, Instance, Scripted
from meshctl.lifecycle.clusters import Part
from meshctl.model.accelerators import GPU, AcceleratorsSpec
from meshctl.model.catalog import Catalog
from meshctl.model.mesh import RAY_DASHBOARD_PORT, RAY_GCS_PORT, AwsPool, GcpPool, Mesh
from meshctl.pools import local
from meshctl.pools.emulated import EmulatedInstances, agent_answers
from meshctl.pools.observed import ROLE_LABEL, node_name
from meshctl.pools.ray import PoolError, RayPoolClient
from meshctl.state.private import private_dir, write_private


class StandIn(Protocol):
    """What plays the instances' machines in a harness whose provider has no secret manager
    (the differential check's fake world): it is told an instance joins or leaves."""

    def join(self, provider: str, instance: Instance) -> None: ...

    def leave(self, pool: str, instance_id: str) -> list[str]: ...


@dataclass
class Joiner:
    mesh: Mesh
    catalogs: Mapping[str, Catalog]
    nodes: EmulatedInstances | None
    registry: AcceleratorsSpec | None = None  # the Ray resource an instance's devices are in

    def scripted(self, cloud: Cloud) -> bool:
        """Whether the provider's instances join by their startup script."""
        return isinstance(cloud, Scripted) and self.nodes is not None

    def head_address(self, pool: AwsPool | GcpPool) -> str | None:
        """The GCS address of the pool's running cluster (what workers join), or None."""
        assert self.nodes is not None
        if pool.emulated:
            return self.nodes.head_address(pool.name)
        cluster = self.nodes.cluster(pool.name)
        return cluster.gcs if cluster is not None else None

    def new_token(self, pool: AwsPool | GcpPool, cloud: Cloud) -> None:
        """A fresh cluster token for the pool's next cluster: in the secret manager, and in
        the run folder (0600) for the controller."""
        assert isinstance(cloud, Scripted)
        assert self.nodes is not None
        token = secrets.token_hex(32)
        name = secret_name(self.mesh.metadata.name, pool.name)
        cloud.put_secret(name, token, {"mesh": self.mesh.metadata.name, "pool": pool.name})
        private_dir(self.nodes.run_dir)
        write_private(self.nodes.token_file(pool.name), token)

    def script(self, pool: AwsPool | GcpPool, part: Part, head: str | None) -> str:
        """The startup script of ``part``'s instances: the head's when ``head`` is None
        (a pool's own head labelled as one that takes no work), else a worker's joining
        that address."""
        catalog = self.catalogs.get(pool.provider)
        shape = catalog.instance_type(part.node_type) if catalog else None
        acc = shape.accelerator if shape else None
        counted = self.registry.counted_in(acc.vendor, acc.model) if self.registry and acc else None
        resource, units = counted or (GPU, 1)
        spec = StartupSpec(
            provider=pool.provider, mesh=self.mesh.metadata.name, pool=pool.name,
            role="worker" if head else "head", ray_version=_ray_version(),
            secret=secret_name(self.mesh.metadata.name, pool.name), node_type=part.node_type,
            where=_where(pool),
            head_address=head, gpus=acc.count if acc else 0,
            accelerator=acc.model if acc else None, device_resource=resource, device_units=units,
            gpu_memory_gib=acc.count * acc.memory_gib if acc else 0.0,
            nic_gbps=shape.nic_gbps if shape else 0.0, agent_port=pool.agent_port,
            spot=part.spot, labels=((ROLE_LABEL, "head"),) if part.dedicated else (),
        )  # fmt: skip
        return render(spec)

    def join(self, pool: AwsPool | GcpPool, cloud: Cloud, instance: Instance, head: bool) -> None:
        """Return once the instance has joined its pool's cluster (raises when it did not
        within the pool's provision timeout)."""
        assert self.nodes is not None
        if pool.emulated:
            assert isinstance(cloud, Scripted)
            script = cloud.startup_script(instance.id)
            self.nodes.boot(
                pool.provider, instance, script, head, pool.endpoint_url or "", _where(pool)
            )
            return
        if head:
            self._record_head(pool, instance)
        self._wait(pool, instance)

    def _record_head(self, pool: AwsPool | GcpPool, instance: Instance) -> None:
        """A real head's cluster, as the controller reaches it: its private address."""
        assert self.nodes is not None
        cluster = local.LocalCluster(
            pool=pool.name,
            dashboard=f"http://{instance.address}:{RAY_DASHBOARD_PORT}",
            gcs=f"{instance.address}:{RAY_GCS_PORT}",
            token_file=str(self.nodes.token_file(pool.name)),
            temp_dir="",
            log_dir=str(self.nodes.run_dir / "logs"),
        )
        cluster.save(local.run_file(self.nodes.run_dir, pool.name))

    def _wait(self, pool: AwsPool | GcpPool, instance: Instance) -> None:
        """Until the instance's node is alive in the pool's cluster and its agent answers."""
        assert self.nodes is not None
        cluster = self.nodes.cluster(pool.name)
        if cluster is None:
            raise LookupError(f"pool {pool.name} has no head for {instance.id} to join")
        name, token = node_name(instance.id), cluster.token
        client = RayPoolClient(pool.name, cluster.dashboard, token, timeout_s=10)
        deadline = time.monotonic() + pool.provision_timeout_s
        while not (
            _alive(client, name) and agent_answers(instance.address, pool.agent_port, token)
        ):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{instance.id} did not join pool {pool.name} in time")
            time.sleep(5.0)


def _where(pool: AwsPool | GcpPool) -> str:
    """Where the pool's secret lives: its AWS region, or its GCP project."""
    return pool.region if isinstance(pool, AwsPool) else pool.project


def _ray_version() -> str:
    return importlib.metadata.version("ray")


def _alive(client: RayPoolClient, name: str) -> bool:
    try:
        return any(n.name == name and n.alive for n in client.nodes())
    except PoolError:
        return False
