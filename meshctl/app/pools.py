"""The mesh's pools, for the CLI and the API server alike: capacity and price per GPU-hour as
configured, what the controller last recorded of each (``pool_rows``), one pool's settings
and prices (``pool_data``), and whether each can be used now (``pool_health``, ``checked``,
``PoolHealth``)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from meshctl.errors import InvalidInput
from meshctl.units import count_of

if TYPE_CHECKING:
    from meshctl.app.context import AppContext
    from meshctl.model import Catalog, Mesh
    from meshctl.state import Store


def capacities(context: AppContext) -> list[dict[str, Any]]:
    """``pools list``: this mesh's pools as rows (``pool_rows``), with what the controller last
    recorded where a store exists (nothing ran here: no store made to be read)."""
    mesh = context.mesh()
    catalogs = context.catalog_map()
    if not context.has_store():
        return pool_rows(mesh, catalogs, None)
    with context.store() as store:
        return pool_rows(mesh, catalogs, store)


def pool_rows(mesh: Mesh, catalogs: Mapping[str, Catalog], store: Store | None) -> list[Any]:
    """Each pool as data (``shapes.PoolRow``): configured capacity, prices, and what the
    controller last recorded (null where nothing was). For the CLI and the API server."""
    from meshctl.model.capacity import pool_capacity

    live = _live(store) if store is not None else {}
    rows = []
    for pool in mesh.spec.pools:
        cap = asdict(pool_capacity(pool, catalogs))
        cap["pool"] = cap.pop("name")
        cap["accelerators"] = list(cap["accelerators"])
        seen = live.get(pool.name, {})
        rows.append(
            cap
            | {
                "state": seen.get("state"),
                "gpus_in_use": seen.get("gpus_in_use"),
                "spend_usd_month": seen.get("spend_usd_month"),
            }
        )
    return rows


def _live(store: Store) -> dict[str, dict[str, Any]]:
    """Per pool, what the controller last saw (state) and the GPUs its jobs hold now."""
    from meshctl.controller.status import pool_state
    from meshctl.state import ACTIVE_ATTEMPT, AttemptRecord, PoolRecord

    live: dict[str, dict[str, Any]] = {
        p.name: {
            "state": pool_state(p),
            "gpus_in_use": 0.0,
            "spend_usd_month": p.observed.get("spend_usd"),
        }
        for p in store.list(PoolRecord)
    }
    for attempt in store.list(AttemptRecord, state=ACTIVE_ATTEMPT):
        if attempt.pool in live:
            held = attempt.detail.allocations
            live[attempt.pool]["gpus_in_use"] += sum(h.gpus() for h in held)
    return live


def pool_data(mesh: Mesh, catalogs: Mapping[str, Catalog], name: str) -> dict[str, Any]:
    """``pools show -o json``: the pool's settings with defaults filled in, and its prices."""
    from meshctl.errors import InvalidRequestError

    pool = mesh.pool(name)
    if pool is None:
        names = ", ".join(p.name for p in mesh.spec.pools)
        raise InvalidRequestError(f"pool: expected one of {names}, got {name!r}")
    return pool.model_dump(mode="json") | {"prices": _prices(pool, catalogs)}


def _prices(pool: Any, catalogs: Mapping[str, Catalog]) -> list[dict[str, Any]]:
    """A cloud pool's node types priced in its region (``shapes.PriceData``); on-prem: none."""
    from meshctl.model.mesh import AwsPool, GcpPool

    if not isinstance(pool, AwsPool | GcpPool):
        return []
    catalog = catalogs.get(pool.provider)
    discount = 1 - pool.cost.discount_pct / 100
    rows = []
    for node_type in pool.node_types:
        found = catalog.instance_type(node_type.name) if catalog else None
        price = found.prices.get(pool.region) if found else None
        spot = price.spot_usd_per_hour if price and node_type.spot else None
        rows.append(
            {
                "node_type": node_type.name,
                "on_demand_usd_per_hour": (
                    round(price.on_demand_usd_per_hour * discount, 6) if price else None
                ),
                "spot_usd_per_hour": spot,
                "price_uncertain": bool(price and price.uncertain),
            }
        )
    return rows


FIXES = {  # what to do about a pool that cannot be reached at all
    "local": "meshctl up starts it",
    "ray": "check address and auth in mesh.yaml, and that the cluster's dashboard runs",
    "aws": "check the pool's credentials: profile in mesh.yaml, or AWS_PROFILE and its files",
    "gcp": "check the pool's credentials: credentials_file, or application default credentials",
}


def checked(
    context: AppContext, mesh: Mesh, catalogs: Mapping[str, Catalog], pool: str | None
) -> list[dict[str, Any]]:
    """``pools check -o json``: each pool (or the one named) with its checks."""
    if pool is not None and mesh.pool(pool) is None:
        known = ", ".join(p.name for p in mesh.spec.pools)
        where = context.mesh_file()
        raise InvalidInput(f"{where}: pool {pool!r}: not in the mesh; pools: {known}")
    return preflight_rows(context, mesh, catalogs, pool)


def preflight_rows(
    context: AppContext, mesh: Any, catalogs: Mapping[str, Catalog], only: str | None = None
) -> list[dict[str, Any]]:
    """``pool_health``'s rows with each pool's checks: a cloud pool that answers gets its
    preflight; ``available`` is false when any check failed."""
    from concurrent.futures import ThreadPoolExecutor

    from meshctl.controller.runtime import preflight, settings_missing

    home = context.home
    rows = [r for r in pool_health(context, mesh) if only is None or r["pool"] == only]
    clouds = [  # those that answer, or whose only fault is a setting mesh.yaml lacks
        r
        for r in rows
        if r["provider"] in ("aws", "gcp")
        and (r["available"] or r["reason"] == settings_missing(mesh.pool(r["pool"])))
    ]
    busy = context.busy(f"preflight of {count_of(len(clouds), 'cloud pool')}")
    with busy, ThreadPoolExecutor(4) as run:
        found = dict(
            zip(
                [r["pool"] for r in clouds],
                run.map(lambda r: preflight(mesh.pool(r["pool"]), catalogs), clouds),
                strict=True,
            )
        )
    for row in rows:
        checks = found.get(row["pool"])
        if checks is None:  # not a cloud pool, or its provider refused us: that one check
            name = "credentials" if row["provider"] in ("aws", "gcp") else "reachable"
            result, detail = ("pass", "yes") if row["available"] else ("fail", row["reason"])
            fix = None if row["available"] else FIXES[row["provider"]]
            row["checks"] = [{"check": name, "result": result, "detail": detail, "fix": fix}]
            if row["provider"] == "local" and row["available"]:
                _check_local_nodes(row, mesh.pool(row["pool"]), home)
            continue
        row["checks"] = [
            {"check": c.name, "result": c.result, "detail": c.detail, "fix": c.fix or None}
            for c in checks
        ]
        first = next((c for c in checks if not c.ok), None)
        if first is not None and row["available"]:
            row["available"], row["reason"] = False, f"{first.name}: {first.detail}"
    return rows


def _check_local_nodes(row: dict[str, Any], pool: Any, home: Path) -> None:
    """A local pool that answers: whether each of its nodes runs (a node whose raylet was
    killed leaves the head answering)."""
    from meshctl.controller.rundir import run_dir
    from meshctl.pools import local
    from meshctl.pools.local_nodes import dead_nodes

    cluster = local.LocalCluster.load(local.run_file(run_dir(home), pool.name))
    dead = dead_nodes(cluster, pool)
    detail = f"dead: {', '.join(dead)}" if dead else "every node runs"
    fix = "meshctl up starts them again" if dead else None
    row["checks"].append(
        {"check": "nodes", "result": "fail" if dead else "pass", "detail": detail, "fix": fix}
    )
    if dead:
        row["available"], row["reason"] = False, f"nodes: {detail}"


def pool_health(context: AppContext, mesh: Any) -> list[dict[str, Any]]:
    """One row per pool: ``pool``, ``provider``, ``available``, ``reason`` (None when it is);
    the checks run side by side (a cloud provider may take seconds to answer)."""
    from concurrent.futures import ThreadPoolExecutor

    from meshctl.controller.runtime import unavailable

    pools = list(mesh.spec.pools)
    with context.busy(f"checking {count_of(len(pools), 'pool')}"), ThreadPoolExecutor(4) as run:
        reasons = list(run.map(lambda pool: unavailable(pool, context.home), pools))
    return [
        {"pool": p.name, "provider": p.provider, "available": why is None, "reason": why}
        for p, why in zip(pools, reasons, strict=True)
    ]


class PoolHealth:
    """Whether each pool can be used now: what the running controller saw in its last cycle,
    else a check of our own (at most every ``LIVE_CHECK_S``: a cloud provider takes a while)."""

    LIVE_CHECK_S = 30.0

    def __init__(self, context: AppContext) -> None:
        self.context = context
        self._checked: tuple[float, dict[str, str | None]] | None = None

    def __call__(self, mesh: Any, live: Mapping[str, Any]) -> dict[str, str | None]:
        """``live``: the running controller's heartbeat (``daemon.live_beat``), or nothing."""
        seen = live.get("unavailable")
        if isinstance(seen, dict):
            return {p.name: seen.get(p.name) for p in mesh.spec.pools}
        now = time.monotonic()
        if self._checked is None or now - self._checked[0] > self.LIVE_CHECK_S:
            rows = pool_health(self.context, mesh)
            self._checked = (now, {r["pool"]: r["reason"] for r in rows})
        return self._checked[1]
