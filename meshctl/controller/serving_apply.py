"""The services' side of the loop that talks to Serve (``meshctl.pools.serve``): what each
pool's Serve applications report (their status and traffic: ``World.serve``), and deploying
every service of a pool to its cluster whenever what they hold changes.

A pool's applications are deployed together (Serve's REST API replaces the whole set), each
with its replica count and the job's resources per replica; its working directory is uploaded
once (Ray's package store). A change of count alone goes through Serve's outside scaler
(``ServeClient.scale``): no replica restarts. Replicas are not pinned to nodes by label (a
change of the node set would restart every replica, one at a time, in the middle of a
surge): meshctl frees the GPU a new replica is to take (a loan), Ray puts it on the free GPU
of its cluster, and where each replica runs is read back from Serve every cycle
(``services.units`` moves a replica meshctl placed elsewhere to where it runs).

A deploy that fails, or an application Serve reports failed (its own message, e.g. the
import error, as a ``service.failed`` event, once per message), is tried again with backoff:
5 s, doubling, at most 5 minutes; never in a tight loop. Serve's HTTP port per pool is
chosen free the first time and kept in ``$MESHCTL_HOME/serve.json`` (Serve cannot move it
while it runs); a local pool's proxy runs on its head only (its nodes share one host), any
other's on every node.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from meshctl.controller.deciding.world import JobView, ServeSeen
from meshctl.controller.packages import Packages
from meshctl.host.ports import free_port
from meshctl.model.mesh import LocalPool, Mesh
from meshctl.pools.serve import ServeApp, ServeClient
from meshctl.state.records import Event, JobRecord, JobState
from meshctl.state.store import Store

log = logging.getLogger("meshctl.controller")
BACKOFF_S, BACKOFF_MAX_S = 5.0, 300.0
LIVE = frozenset({JobState.PENDING, JobState.ADMITTED, JobState.RUNNING})
GIB = 1024**3


def serve_file(home: Path) -> Path:
    return home / "serve.json"


def serve_ports(home: Path) -> dict[str, int]:
    """Each pool's Serve HTTP port, as chosen (``{}``: none yet)."""
    try:
        found = json.loads(serve_file(home).read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): int(v) for k, v in found.items()} if isinstance(found, dict) else {}


@dataclass
class _Retry:
    due_s: float = 0.0
    wait_s: float = BACKOFF_S

    def failed(self, now: float) -> None:
        self.due_s = now + self.wait_s
        self.wait_s = min(BACKOFF_MAX_S, self.wait_s * 2)


@dataclass
class ServeDeployer:
    home: Path
    packages: Packages | None = None  # a service's files made local (``packages.py``)
    deployed: dict[str, str] = field(default_factory=dict)  # pool -> the config last deployed
    retries: dict[str, _Retry] = field(default_factory=dict)
    uploaded: dict[str, str] = field(default_factory=dict)  # working dir -> its package URI
    said: dict[str, str] = field(default_factory=dict)  # job -> the failure last told
    pool_of: dict[str, str] = field(default_factory=dict)  # service -> its pool, as seen
    counts: dict[str, int] = field(default_factory=dict)  # service -> replicas asked of Serve
    _clients: dict[tuple[str, str], ServeClient] = field(default_factory=dict)

    def client(self, pool: Any) -> ServeClient:
        """The pool's Serve client, kept per dashboard (it keeps the last metrics read)."""
        key = (str(pool.address), str(pool.token))
        found = self._clients.get(key)
        if found is None:
            found = self._clients[key] = ServeClient(pool.address, pool.token or "")
        return found

    # --- what Serve says ------------------------------------------------------------------

    def observe(self, views: Sequence[JobView], clients: Mapping[str, Any]) -> dict[str, ServeSeen]:
        """Each service's application as its pool's Serve reports it; a pool that does not
        answer says nothing (its services keep their count)."""
        pools = {v.attempt.pool for v in views if v.job.spec.serve and v.attempt}
        seen: dict[str, ServeSeen] = {}
        for name in sorted(pools):
            pool = clients.get(name)
            if pool is None:
                continue
            serve = self.client(pool)
            try:
                status, load = serve.status(), serve.load()
            except Exception as err:  # a pool's error is its own; the loop goes on
                log.warning("serve status of %s: %s", name, err)
                continue
            for app, found in status.items():
                deployments = found.deployments
                running = sum(d.counts.get("RUNNING", 0) for d in deployments.values())
                on = tuple(
                    r.node_id
                    for d in deployments.values()
                    for r in d.replicas
                    if r.state == "RUNNING"
                )
                traffic = load.get(app)
                ongoing = rps = p50 = p99 = None
                if traffic is not None:
                    parts = traffic.deployments.values()
                    counts = [d.ongoing + d.queued for d in parts if d.ongoing is not None]
                    ongoing = sum(counts) if counts else None
                    rps, p50, p99 = traffic.rps, traffic.p50_ms, traffic.p99_ms
                self.pool_of[app] = name
                self.pool_of[app] = name
                seen[app] = ServeSeen(
                    found.status, found.message, running, ongoing, rps, p50, p99, on
                )
        return seen

    # --- deploying ----------------------------------------------------------------------------

    def sync(
        self,
        store: Store,
        mesh: Mesh,
        clients: Mapping[str, Any],
        views: Sequence[JobView],
        seen: Mapping[str, ServeSeen],
        now: float,
    ) -> list[str]:
        """Deploy each pool's services where what they hold changed (or a retry is due).
        ``views``: the cycle's jobs; the services among them are read again, as this cycle
        left them (a job the cycle did not see has no attempt yet: only a controller makes
        one, from the jobs it saw)."""
        from meshctl.model import Job
        from meshctl.state.records import AttemptRecord, latest_attempts

        self._tell_failures(store, seen, now)
        services = [v.record.id for v in views if _is_service(v.record)]
        fresh = (store.get(JobRecord, job_id) for job_id in services)
        jobs = [j for j in fresh if j is not None and j.state in LIVE]
        latest = latest_attempts(store.list(AttemptRecord, job_id=[j.id for j in jobs]))
        wanted: dict[str, list[ServeApp]] = {}
        for record in jobs:
            attempt = latest.get(record.id)
            if attempt is None or not attempt.detail.replica_ids:
                continue
            job = Job.model_validate(record.spec)
            pool = clients.get(attempt.pool)
            if pool is None:
                continue
            app = self._app(record, job, len(attempt.detail.replica_ids), (), pool)
            wanted.setdefault(attempt.pool, []).append(app)
        for name in {*wanted, *self.deployed}:
            error = self._deploy(name, mesh, clients, wanted.get(name, []), now)
            if error:
                return [error]
        return []

    def _app(
        self, record: JobRecord, job: Any, replicas: int, nodes: tuple[str, ...], pool: Any
    ) -> ServeApp:
        spec = job.spec
        serve, res = spec.serve, spec.resources
        env_vars = {**spec.runtime_env.env_vars, "MESHCTL_JOB_ID": record.id}
        env: dict[str, Any] = {"env_vars": env_vars}
        if spec.working_dir:
            key = f"{pool.address} {spec.working_dir}"
            uri = self.uploaded.get(key)
            if uri is None:
                here = spec.working_dir
                if self.packages is not None:
                    here = self.packages.folder(record.id, spec.working_dir)
                uri = self.uploaded[key] = pool.in_place(here) or self.client(
                    pool
                ).upload_working_dir(here)
            env["working_dir"] = uri
        return ServeApp(
            name=record.id,
            import_path=serve.app,
            route_prefix=serve.route_prefix,
            deployment=serve.deployment or "",
            num_replicas=replicas,
            node_ids=nodes,
            num_gpus=float(res.gpus),
            num_cpus=float(res.cpus),
            memory_bytes=int(res.memory_gib * GIB),
            max_ongoing_requests=serve.max_ongoing_requests,
            runtime_env=env,
        )

    def _deploy(
        self, name: str, mesh: Mesh, clients: Mapping[str, Any], apps: list[ServeApp], now: float
    ) -> str | None:
        pool = clients.get(name)
        if pool is None:
            return None
        # What needs a deploy (Serve restarts replicas on it) is the set of applications and
        # their settings; a count alone goes through Serve's outside scaler, restarting none.
        config = json.dumps([repr(replace(a, num_replicas=0)) for a in _sorted(apps)])
        counts = {a.name: a.num_replicas for a in apps}
        retry = self.retries.setdefault(name, _Retry())
        if retry.due_s > now:
            return None  # failed: not again before its backoff
        serve = self.client(pool)
        try:
            if self.deployed.get(name) != config or retry.due_s != 0.0:
                local = isinstance(mesh.pool(name), LocalPool)
                serve.deploy(apps, self._port(name), "HeadOnly" if local else "EveryNode")
            else:
                for app in apps:
                    if self.counts.get(app.name) != app.num_replicas:
                        serve.scale(app.name, app.deployment, app.num_replicas)
        except Exception as err:
            retry.failed(now)
            return f"serve deploy on {name}: {err}"
        self.deployed[name] = config
        self.counts.update(counts)
        self.retries[name] = _Retry()
        return None

    def _port(self, pool: str) -> int:
        ports = serve_ports(self.home)
        if pool not in ports:
            ports[pool] = free_port()
            serve_file(self.home).write_text(json.dumps(ports))
        return ports[pool]

    def _tell_failures(self, store: Store, seen: Mapping[str, ServeSeen], now: float) -> None:
        """A failed application: Serve's own message as an event (once per message), and
        its pool is deployed again after a backoff."""
        for job_id, found in seen.items():
            if found.status not in ("DEPLOY_FAILED", "UNHEALTHY"):
                self.said.pop(job_id, None)
                continue
            if self.said.get(job_id) == found.message:
                continue
            self.said[job_id] = found.message
            message = f"Serve: {found.status}: {found.message}"
            store.append_event(Event(now, "service.failed", job_id, message))
            pool = self.pool_of.get(job_id)
            if pool is not None:
                self.retries.setdefault(pool, _Retry()).failed(now)


def _sorted(apps: Sequence[ServeApp]) -> list[ServeApp]:
    return sorted(apps, key=lambda a: a.name)


def _is_service(record: JobRecord) -> bool:
    spec = record.spec.get("spec", {}) if isinstance(record.spec, dict) else {}
    return isinstance(spec, dict) and spec.get("serve") is not None
