"""Which pools this controller drives, and how to reach each: the seam between the mesh file
and the pool adapters.

- ``local`` pools: the cluster ``meshctl up`` started, found through its run file (address and
  token) under ``$MESHCTL_HOME/run``; a local pool that is not up is not driven.
- ``ray`` pools: the address in mesh.yaml, the token from the pool's ``auth`` (an environment
  variable or a file).
- ``aws`` / ``gcp`` pools: launching cloud capacity is the provider adapters' job; until a pool
  has one it is planned for (the scheduler may say "burst") but not driven.
"""

from __future__ import annotations

import os
from pathlib import Path

from meshctl.clouds.base import Cloud
from meshctl.model.mesh import AwsPool, GcpPool, LocalPool, Mesh, Pool, RayPool
from meshctl.pools import local
from meshctl.pools.ray import RayPoolClient
from meshctl.state.private import private_dir, private_home


def run_dir(home: Path) -> Path:
    return home / "run"


def make_run_dir(home: Path) -> Path:
    """The run folder (pid, heartbeat, tokens, up.json, process logs), created private: 0700,
    like its home (``meshctl.state.private``); an older, looser one is tightened."""
    private_home(home)
    return private_dir(run_dir(home))


def client_for(pool: Pool, home: Path) -> RayPoolClient | None:
    if isinstance(pool, LocalPool | AwsPool | GcpPool):  # a cloud pool: once it has a cluster
        path = local.run_file(run_dir(home), pool.name)
        if not path.is_file():
            return None
        cluster = local.LocalCluster.load(path)
        return RayPoolClient(pool.name, cluster.dashboard, cluster.token, log_root=cluster.temp_dir)
    if isinstance(pool, RayPool):
        return RayPoolClient(pool.name, pool.address, _token(pool))
    return None


def clients(mesh: Mesh, home: Path) -> dict[str, RayPoolClient]:
    found = {pool.name: client_for(pool, home) for pool in mesh.spec.pools}
    return {name: client for name, client in found.items() if client is not None}


def why_not_driven(pool: Pool) -> str:
    if isinstance(pool, LocalPool):
        return "not up (meshctl up starts it)"
    return "no instances: launched when the plan bursts to it"


def clouds(mesh: Mesh) -> dict[str, Cloud]:
    """The provider of each cloud pool; a pool whose provider cannot be built is skipped
    (logged), the others go on."""
    import logging

    found: dict[str, Cloud] = {}
    for pool in mesh.spec.pools:
        try:
            cloud = cloud_for(pool)
        except Exception as err:  # missing credentials, an SDK not installed
            logging.getLogger("meshctl.controller").warning("pool %s: %s", pool.name, err)
            continue
        if cloud is not None:
            found[pool.name] = cloud
    return found


def _token(pool: RayPool) -> str | None:
    if pool.auth.token_file:
        return Path(pool.auth.token_file).expanduser().read_text().strip()
    if pool.auth.token_env:
        return os.environ.get(pool.auth.token_env) or None
    return None


def cloud_for(pool: Pool) -> Cloud | None:
    """The provider adapter of a cloud pool (its SDK is imported here, on first use)."""
    if isinstance(pool, AwsPool):
        from meshctl.clouds.aws import AwsCloud

        return AwsCloud(pool.region, pool.endpoint_url, pool.profile)
    if isinstance(pool, GcpPool):
        from meshctl.clouds.gcp import GcpCloud

        return GcpCloud(pool.project, pool.endpoint_url, pool.credentials_file)
    return None
