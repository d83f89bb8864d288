"""Which pools this controller drives, and how to reach each: the seam between the mesh file
and the pool adapters.

- ``local`` pools: the cluster ``meshctl up`` started, found through its run file (address and
  token) under ``$MESHCTL_HOME/run``; a local pool that is not up is not driven.
- ``ray`` pools: the address in mesh.yaml, the token from the pool's ``auth`` (an environment
  variable or a file).
- ``aws`` / ``gcp`` pools: driven once instances were launched there (their cluster's run
  file); their provider adapters (``cloud_for``) are built on first use.

``unavailable(pool, home)`` is the one-off health check of a pool (``up``, ``status``, ``pools
check``): a local pool that is not up, a Ray pool whose dashboard does not answer or refuses
the token, a cloud pool with no credentials or refused ones. ``preflight`` then checks a cloud
pool that answers in depth (``pools check``), launching nothing. The controller keeps its own
view (``access.py`` for cloud pools, the observations for the others); the cloud half of the
check (``provider_for``, ``refusal``) is one, shared by all three and by ``meshctl gc``.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Hashable, Mapping
from pathlib import Path

from meshctl.clouds.base import Cloud, Unavailable, reason_of
from meshctl.clouds.preflight import Check, failed, settings
from meshctl.controller.rundir import run_dir
from meshctl.model.catalog import Catalog
from meshctl.model.mesh import AwsPool, CloudPoolBase, GcpPool, LocalPool, Mesh, Pool, RayPool
from meshctl.pools import driverlogs, local
from meshctl.pools.ray import RayPoolClient


def client_for(pool: Pool, home: Path) -> RayPoolClient | None:
    if isinstance(pool, LocalPool | AwsPool | GcpPool):  # a cloud pool: once it has a cluster
        path = local.run_file(run_dir(home), pool.name)
        if not path.is_file():
            return None
        cluster = local.LocalCluster.load(path)
        # a real cloud head's cluster has no temp folder here: nothing of it is on this machine
        on_host = cluster.temp_dir or None
        kept = str(driverlogs.kept_folder(cluster.log_dir, pool.name)) if on_host else None
        return RayPoolClient(
            pool.name, cluster.dashboard, cluster.token, log_root=on_host, kept_logs=kept
        )
    if isinstance(pool, RayPool):
        return RayPoolClient(pool.name, pool.address, _token(pool))
    return None


def clients(mesh: Mesh, home: Path) -> dict[str, RayPoolClient]:
    return driven(mesh, home)[0]


def driven(mesh: Mesh, home: Path) -> tuple[dict[str, RayPoolClient], dict[str, str]]:
    """The pools that can be driven now, each with its client; and the Ray pools that cannot,
    with why (``unavailable``'s words: their token file cannot be read)."""
    found: dict[str, RayPoolClient] = {}
    skipped: dict[str, str] = {}
    for pool in mesh.spec.pools:
        try:
            client = client_for(pool, home)
        except OSError as err:  # a token file that cannot be read: the pool is unavailable
            if isinstance(pool, RayPool):
                skipped[pool.name] = _unreadable(pool, err)
            continue
        if client is not None:
            found[pool.name] = client
    return found, skipped


def why_not_driven(pool: Pool) -> str:
    if isinstance(pool, LocalPool):
        return "not up (meshctl up starts it)"
    return "no instances: launched when the plan bursts to it"


def unavailable(pool: Pool, home: Path) -> str | None:
    """Why ``pool`` cannot be used now, or None: one cheap check (a request to a Ray
    dashboard, one authenticated call to a cloud provider)."""
    if isinstance(pool, LocalPool):
        path = local.run_file(run_dir(home), pool.name)
        if not path.is_file():
            return "not up"
        cluster = local.LocalCluster.load(path)
        if not local.running(cluster):
            return "not up (its processes are gone; meshctl up restarts it)"
        return RayPoolClient(pool.name, cluster.dashboard, cluster.token).check()
    if isinstance(pool, RayPool):
        try:
            client = RayPoolClient(pool.name, pool.address, _token(pool))
        except OSError as err:
            return _unreadable(pool, err)
        return client.check()
    cloud, why = provider_for(pool)
    return refusal(cloud) if cloud is not None else why


def settings_missing(pool: Pool) -> str | None:
    """Why a cloud pool on a real account must not launch yet: the settings mesh.yaml lacks
    (its image, network, identity, head); None when it has them, or is emulated."""
    if not isinstance(pool, AwsPool | GcpPool):
        return None
    gaps = [name for name, _ in pool.real_account_gaps()]
    if not gaps:
        return None
    return f"not set for a real account: {', '.join(gaps)} (see meshctl pools check)"


def provider_for(
    pool: Pool, build: Callable[[Pool], Cloud | None] | None = None
) -> tuple[Cloud | None, str | None]:
    """The pool's provider adapter (``build``, by default ``cloud_for``: None for a pool that
    is not a cloud pool), or why it cannot be built: no credentials (``Unavailable``), an
    SDK that is not installed, a malformed setting."""
    try:
        return (build or cloud_for)(pool), None
    except Exception as err:
        return None, reason_of(err)


def refusal(cloud: Cloud) -> str | None:
    """Why the provider refuses this pool's credentials (``Cloud.check``), or None."""
    try:
        error = cloud.check()
    except Exception as err:  # check is meant to return errors, not raise them
        return reason_of(err)
    return error.message if error else None


def credentials_seen(pool: Pool) -> Hashable:
    """What, when it changes, may mean other credentials for a cloud pool: its entry in
    mesh.yaml, the variables (hashed, never kept) and the files its SDK reads them from."""
    names: tuple[str, ...]
    if isinstance(pool, AwsPool):
        names = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE")
        files = [
            os.environ.get("AWS_SHARED_CREDENTIALS_FILE") or "~/.aws/credentials",
            os.environ.get("AWS_CONFIG_FILE") or "~/.aws/config",
        ]
    elif isinstance(pool, GcpPool):
        names = ("GOOGLE_APPLICATION_CREDENTIALS",)
        default = "~/.config/gcloud/application_default_credentials.json"
        files = [pool.credentials_file or os.environ.get(names[0]) or default]
    else:
        return pool.model_dump_json()
    said = hashlib.sha256("\0".join(os.environ.get(n, "") for n in names).encode()).hexdigest()
    return pool.model_dump_json(), said, tuple(_stat(Path(f).expanduser()) for f in files)


def _stat(path: Path) -> tuple[int, int] | None:
    try:
        found = path.stat()
    except OSError:
        return None
    return found.st_mtime_ns, found.st_size


def _unreadable(pool: RayPool, err: OSError) -> str:
    return f"token file {pool.auth.token_file}: {err.strerror}"


def _token(pool: RayPool) -> str | None:
    if pool.auth.token_file:
        return Path(pool.auth.token_file).expanduser().read_text().strip()
    if pool.auth.token_env:
        return os.environ.get(pool.auth.token_env) or None
    return None


def cloud_for(pool: Pool) -> Cloud | None:
    """The provider adapter of a cloud pool (its SDK is imported here, on first use); raises
    ``Unavailable`` when it cannot be built for lack of credentials, or when a real account's
    pool lacks the settings its instances need (``settings_missing``): it would launch
    instances that bill and never join, so it is never built to launch with."""
    missing = settings_missing(pool)
    if missing is not None:
        raise Unavailable(missing)
    return adapter_for(pool)


def adapter_for(pool: Pool) -> Cloud | None:
    """``cloud_for`` without the settings guard: for what launches nothing (the preflight,
    ``meshctl gc``)."""
    if isinstance(pool, AwsPool):
        from meshctl.clouds.aws import AwsCloud, AwsSetup

        setup = AwsSetup(
            pool.image, tuple(pool.subnets), tuple(pool.security_groups), pool.instance_profile
        )
        return AwsCloud(pool.region, pool.endpoint_url, pool.profile, setup)
    if isinstance(pool, GcpPool):
        from meshctl.clouds.gcp import GcpCloud, GcpSetup

        gcp_setup = GcpSetup(
            pool.image,
            pool.network,
            pool.subnetwork,
            tuple(pool.network_tags),
            pool.service_account,
        )
        return GcpCloud(pool.project, pool.endpoint_url, pool.credentials_file, gcp_setup)
    return None


def preflight(pool: Pool, catalogs: Mapping[str, Catalog]) -> list[Check]:
    """A cloud pool's preflight (``meshctl pools check``): launches nothing. A provider that
    cannot even be built fails the credentials check, after a row per missing setting. A GCP
    pool's preflight builds its own clients (it needs no adapter), so it says what its
    credentials lack, with the fix, itself."""
    if isinstance(pool, GcpPool):
        from meshctl.clouds.gcp_preflight import preflight as gcp_preflight

        return gcp_preflight(pool, catalogs.get("gcp"))
    cloud, why = provider_for(pool, adapter_for)
    if cloud is None:
        fix = "fix what was found, then run meshctl pools check again"
        gaps = settings(pool) if isinstance(pool, CloudPoolBase) else []
        return [*gaps, failed("credentials", why or "no provider", fix)]
    if isinstance(pool, AwsPool):
        from meshctl.clouds.aws import AwsCloud
        from meshctl.clouds.aws_preflight import preflight as aws_preflight

        assert isinstance(cloud, AwsCloud)
        return aws_preflight(pool, cloud)
    return []
