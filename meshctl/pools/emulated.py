"""Emulated cloud instances boot by running their own startup script, here.

An instance that moto_server or the GCE emulator launched is no machine; this module plays
the machine's part and nothing more. It reads the instance's startup script back from the
provider (EC2 user data, GCE ``startup-script`` metadata) and runs it as a local process in a
session of its own, with:

- ``MESHCTL_METADATA_URL``: a metadata endpoint of its own (``metadata_server``) telling it
  its id, zone, region or project and private address (127.0.0.1);
- ``MESHCTL_BOOT_RAY_ARGS`` and ``MESHCTL_BOOT_AGENT_PORT``: what a machine holding several
  instances must give each: free ports, and scaled-down CPUs, memory and object store (1
  CPU, 2 GiB: a 2-core machine must hold several); the head's GCS and dashboard ports are
  the pool cluster's (recorded in its run file, as the embedded pool's are);
- the provider's endpoint for the secret manager the script reads the cluster token from.

So what joins the instance to its pool's cluster (the Ray version check, the token from the
secret manager, the agent, ``ray start``) is the script itself. ``boot`` returns once the
instance's node is in the cluster and its agent answers. Terminating the instance stops
exactly its session (``leave``); the head's takes the cluster with it.
"""

from __future__ import annotations

import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from meshctl.clouds.base import Instance
from meshctl.host.ports import free_port
from meshctl.pools import local
from meshctl.pools.metadata_server import Entry, MetadataServer
from meshctl.pools.observed import node_name

__all__ = ["EmulatedInstances", "node_name"]

CPUS, MEMORY_GIB = 1, 2  # per emulated instance, whatever its type says
LOOPBACK = "127.0.0.1"


class EmulatedInstances:
    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.metadata = MetadataServer()

    def cluster(self, pool: str) -> local.LocalCluster | None:
        path = local.run_file(self.run_dir, pool)
        return local.LocalCluster.load(path) if path.is_file() else None

    def head_address(self, pool: str) -> str | None:
        """The GCS address of the pool's running cluster, which workers join; None: none."""
        cluster = self.cluster(pool)
        return cluster.gcs if cluster is not None and local.running(cluster) else None

    def token_file(self, pool: str) -> Path:
        """Where the controller keeps its copy of the pool's cluster token."""
        return self.run_dir / f"pool-{pool}.token"

    def boot(
        self,
        provider: str,
        instance: Instance,
        script: str,
        head: bool,
        endpoint_url: str,
        where: str,
    ) -> local.LocalCluster:
        """Run the instance's startup script; return once its node has joined the pool's
        cluster and its agent answers the cluster's token. ``where``: the AWS region, or the
        GCP project."""
        name = node_name(instance.id)
        for attempt in (1, 2):  # on a loaded machine Ray's own start-up wait can run out
            cluster = self._head_cluster(instance.pool) if head else self.cluster(instance.pool)
            if cluster is None:
                raise LookupError(f"pool {instance.pool} has no cluster for {instance.id}")
            if any(p.node == name for p in cluster.processes):  # a boot that failed: again
                local.remove_node(cluster, name, self.run_dir)
            agent_port = free_port()
            entry = Entry(provider, instance.id, instance.zone, where, LOOPBACK)
            env = self._environment(entry, cluster, head, agent_port, endpoint_url)
            path = local.run_file(self.run_dir, instance.pool)
            log_name = f"{instance.pool}-{name}.log"
            local.spawn(cluster, name, ["bash", "-c", script], log_name, path, env)
            try:  # its agent may outlive a ray start that exited: watch the script's own
                joined = _joined(cluster, name, agent_port)
                local.wait_for(joined, f"instance {instance.id}", cluster, leader_only=True)
                return cluster
            except local.LocalPoolError as err:
                if attempt == 2 or not local.exited_starting(err):
                    raise
                local.remove_node(cluster, name, self.run_dir)  # its agent too
        raise AssertionError("unreachable")

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

    def close(self) -> None:
        self.metadata.close()

    def _head_cluster(self, pool: str) -> local.LocalCluster:
        """A new cluster record for a head about to boot: its GCS and dashboard ports."""
        old = self.cluster(pool)
        if old is not None:
            local.stop(old)  # what is left of a cluster whose head died
        cluster = local.LocalCluster(
            pool=pool,
            dashboard=f"http://{LOOPBACK}:{free_port()}",
            gcs=f"{LOOPBACK}:{free_port()}",
            token_file=str(self.token_file(pool)),
            temp_dir=tempfile.mkdtemp(prefix="meshctl-ray-"),  # short: Ray's socket paths
            log_dir=str(self.run_dir / "logs"),
        )
        Path(cluster.log_dir).mkdir(parents=True, exist_ok=True, mode=0o700)
        cluster.save(local.run_file(self.run_dir, pool))
        return cluster

    def _environment(
        self,
        entry: Entry,
        cluster: local.LocalCluster,
        head: bool,
        agent_port: int,
        endpoint_url: str,
    ) -> dict[str, str]:
        name = node_name(entry.instance_id)
        env = local.environment(cluster)
        env.pop("RAY_AUTH_TOKEN_PATH", None)  # the script reads its own, from the secret
        env.update(
            MESHCTL_METADATA_URL=self.metadata.url(name, entry),
            MESHCTL_PYTHON=sys.executable,
            MESHCTL_BOOT_RAY_ARGS=" ".join(_ray_args(cluster, head)),
            MESHCTL_BOOT_AGENT_PORT=str(agent_port),
            MESHCTL_NODE_DIR=str(self.run_dir / "nodes" / name),
        )
        if entry.provider == "aws":
            env["AWS_ENDPOINT_URL"] = endpoint_url  # Secrets Manager on the emulator
            env.setdefault("AWS_DEFAULT_REGION", entry.region)
        else:
            env["MESHCTL_SECRETS_ENDPOINT"] = endpoint_url
        return env


def _ray_args(cluster: local.LocalCluster, head: bool) -> list[str]:
    args = [*local.node_ports(), f"--num-cpus={CPUS}", f"--memory={MEMORY_GIB * local.GIB}"]
    if head:
        port = cluster.gcs.rsplit(":", 1)[1]
        dashboard = cluster.dashboard.rsplit(":", 1)[1]
        return [*args, f"--port={port}", f"--dashboard-port={dashboard}",
                f"--dashboard-host={LOOPBACK}", f"--ray-client-server-port={free_port()}",
                f"--temp-dir={cluster.temp_dir}"]  # fmt: skip
    return [*args, "--include-log-monitor=False"]  # one log monitor per machine: the head's


def _joined(cluster: local.LocalCluster, name: str, agent_port: int) -> Callable[[], bool]:
    """Whether the node is in the cluster and its agent answers the cluster's token."""
    up, token = local.node_up(cluster, name), cluster.token
    return lambda: up() and agent_answers(LOOPBACK, agent_port, token)


def agent_answers(address: str, port: int, token: str) -> bool:
    """Whether the node's agent at ``address:port`` answers the cluster's token."""
    request = urllib.request.Request(
        f"http://{address}:{port}/v1/probe", headers={"Authorization": f"Bearer {token}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as reply:
            return bool(reply.status == 200)
    except (urllib.error.URLError, OSError):
        return False
