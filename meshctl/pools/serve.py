"""A pool's services: Ray Serve applications driven over HTTP only (Ray 2.60, token auth on).

meshctl owns the replica count and the nodes replicas may run on; Serve runs them.

- Deploying: ``PUT /api/serve/applications/`` with the FULL set of meshctl's applications on
  the cluster (the endpoint replaces every application; one left out is deleted). Each
  deployment gets a fixed ``num_replicas`` and no ``autoscaling_config``.
- Pinning: every Ray node carries the label ``ray.io/node-id``; a deployment's
  ``ray_actor_options.label_selector`` of ``{"ray.io/node-id": "in(<id1>,<id2>)"}`` makes Ray
  place its replicas only on those nodes (a replica that fits none stays pending). Changing
  the node set changes ``ray_actor_options``, so Serve rolls the replicas over to the new
  version, never more than one replica (its rollout size) in transition at a time: at least
  the old ones keep serving while new ones start.
- Scaling: applications are deployed with ``external_scaler_enabled: true``, and
  ``scale()`` uses ``POST /api/v1/applications/{app}/deployments/{dep}/scale``
  ``{"target_num_replicas": N}`` (Ray 2.60's endpoint for an external scaler: no redeploy, no
  restart of running replicas); Serve's own autoscaling is then refused. Serve applies a
  config's ``num_replicas`` only when that application's config changed: a count set by
  ``scale`` survives a redeploy of an unchanged config, so ``deploy`` must always be given
  meshctl's current count (then the two never disagree). A change of nodes goes through
  ``deploy`` (it changes ``ray_actor_options``: a rolling restart).
- Working directories: Serve's REST config takes only remote URIs, so ``upload_working_dir``
  zips a folder the way Ray's ``JobSubmissionClient`` does (Ray's own packaging helpers: the
  content hash names it ``gcs://_ray_pkg_<hash>.zip``) and ``PUT``s it to
  ``/api/packages/gcs/<name>`` unless the cluster already has it.
- Traffic: ``load()`` reads Ray's Prometheus metrics from every node's metrics export port
  (the targets of the dashboard's ``GET /api/prometheus/sd``, or given). Serve's processes
  push their metrics to their node's agent every ``metrics_report_interval_ms`` (10 s by
  default; ``RAY_metrics_report_interval_ms``), so the signal lags by up to that much.
  Rates and percentiles are deltas of counters and histograms between this client's last two
  reads: the first read has none, and reads closer together than the export interval see
  no change.
"""

from __future__ import annotations

import json
import re
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from meshctl.pools.observed import RAY_NODE_ID_LABEL
from meshctl.pools.ray import PoolError

# Ray's application states (``serve.schema.ApplicationStatus``), for readers of AppStatus.
APP_STATES = ("NOT_STARTED", "DEPLOYING", "DEPLOY_FAILED", "RUNNING", "UNHEALTHY", "DELETING")
ProxyLocation = Literal["EveryNode", "HeadOnly", "Disabled"]
MESSAGE_CHARS = 2000  # Ray's own message, on one line: a failed import's traceback tail

# Serve's metrics (ray/serve/_private: replica.py, router.py, request_ingress_metrics.py), as
# the node's Prometheus exporter names them (counters get "_total").
ONGOING = "ray_serve_replica_processing_queries"  # gauge per replica: in flight at it
QUEUED = "ray_serve_deployment_queued_queries"  # gauge per handle: waiting for a replica
REQUESTS = "ray_serve_deployment_request_counter_total"  # per replica
LATENCY = "ray_serve_deployment_processing_latency_ms_bucket"  # per replica: its own time
HTTP_REQUESTS = "ray_serve_num_http_requests_total"  # per proxy and application
HTTP_LATENCY = "ray_serve_http_request_latency_ms_bucket"  # per proxy: end to end
BY_DEPLOYMENT = ("application", "deployment")


# --- values -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ServeApp:
    """One Serve application of one deployment, as meshctl wants it."""

    name: str
    import_path: str  # "module:attr", importable from the working_dir
    route_prefix: str  # "/" or "/name"
    deployment: str  # the deployment's name in the application's code (its class name)
    num_replicas: int
    node_ids: tuple[str, ...] = ()  # Ray node ids replicas may run on; empty: any node
    num_gpus: float = 0.0  # per replica
    num_cpus: float = 1.0
    memory_bytes: int | None = None
    max_ongoing_requests: int = 5
    runtime_env: Mapping[str, Any] = field(default_factory=dict)  # working_dir: a URI


@dataclass(frozen=True, slots=True)
class Replica:
    replica_id: str
    state: str  # STARTING, UPDATING, RECOVERING, RUNNING, STOPPING, PENDING_MIGRATION
    node_id: str  # "" until placed


@dataclass(frozen=True, slots=True)
class DeploymentStatus:
    name: str
    status: str  # UPDATING, HEALTHY, UNHEALTHY, DEPLOY_FAILED, UPSCALING, DOWNSCALING
    message: str
    target_replicas: int | None
    replicas: tuple[Replica, ...]

    @property
    def counts(self) -> dict[str, int]:
        """Replicas by state."""
        found: dict[str, int] = {}
        for replica in self.replicas:
            found[replica.state] = found.get(replica.state, 0) + 1
        return found

    @property
    def running_on(self) -> frozenset[str]:
        """The node ids of its running replicas."""
        return frozenset(r.node_id for r in self.replicas if r.state == "RUNNING")


@dataclass(frozen=True, slots=True)
class AppStatus:
    name: str
    status: str  # one of APP_STATES
    message: str  # what went wrong, one line: a traceback's last ("ModuleNotFoundError: ...")
    details: str  # Serve's whole message (a failed build's traceback)
    route_prefix: str | None
    deployments: Mapping[str, DeploymentStatus]


@dataclass(frozen=True, slots=True)
class DeploymentLoad:
    """The traffic at one deployment's replicas. Rates and percentiles are over the interval
    since the client's previous read: None on the first read or when no request finished."""

    ongoing: float  # requests in flight at its replicas
    queued: float  # requests waiting at handles and proxies for a replica
    rps: float | None
    p50_ms: float | None
    p99_ms: float | None


@dataclass(frozen=True, slots=True)
class AppLoad:
    """An application's traffic as its clients see it, at Serve's HTTP proxies (queueing
    included), over the interval since the previous read (None: first read, or no request)."""

    name: str
    rps: float | None
    p50_ms: float | None
    p99_ms: float | None
    deployments: Mapping[str, DeploymentLoad]


# --- the client ---------------------------------------------------------------------------


class ServeClient:
    """Ray Serve's REST API and Serve's metrics on one cluster. Not thread-safe: ``load``
    keeps the previous read to compute rates."""

    def __init__(
        self,
        dashboard: str,
        token: str,
        timeout_s: float = 10,
        metrics_targets: Sequence[str] | None = None,  # "host:port"; None: from the dashboard
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.dashboard = dashboard.rstrip("/")
        self.token = token
        self.timeout_s = timeout_s
        self.metrics_targets = tuple(metrics_targets) if metrics_targets is not None else None
        self._clock = clock
        self._previous: tuple[float, Samples] | None = None

    def deploy(
        self, apps: Sequence[ServeApp], http_port: int, proxy_location: ProxyLocation = "EveryNode"
    ) -> None:
        """Make these the cluster's applications, all of them (others are deleted)."""
        self._request(
            "PUT", "/api/serve/applications/", deploy_config(apps, http_port, proxy_location)
        )

    def scale(self, app: str, deployment: str, replicas: int) -> None:
        """Set a deployment's replica count now, without a redeploy (external scaler)."""
        path = f"/api/v1/applications/{_quote(app)}/deployments/{_quote(deployment)}/scale"
        self._request("POST", path, {"target_num_replicas": replicas})

    def status(self) -> dict[str, AppStatus]:
        body = self._request("GET", "/api/serve/applications/")
        apps = body.get("applications") or {}
        return {str(name): app_status(str(name), raw) for name, raw in apps.items()}

    def delete_all(self) -> None:
        self._request("DELETE", "/api/serve/applications/")

    def load(self) -> dict[str, AppLoad]:
        """Traffic per application and deployment, from every node's metrics (see above)."""
        now, samples = self._clock(), self.scrape()
        previous, self._previous = self._previous, (now, samples)
        if previous is None:
            return app_loads(samples, None, None)
        return app_loads(samples, previous[1], now - previous[0])

    def scrape(self) -> Samples:
        """Serve's samples from every metrics target; a target that does not answer (a node
        going away) is left out."""
        samples: Samples = {}
        for target in self.metrics_targets or self._targets():
            try:
                text = self._get_text(f"http://{target}/metrics")
            except PoolError:
                continue
            for key, value in parse_prometheus(text, prefix="ray_serve_"):
                samples[key] = samples.get(key, 0.0) + value
        return samples

    def upload_working_dir(self, path: str | Path, excludes: Sequence[str] = ()) -> str:
        """Zip a folder as Ray's job SDK does, upload it unless the cluster has it, and
        return its URI (``gcs://_ray_pkg_<hash>.zip``) for a runtime_env's working_dir."""
        from ray._private.runtime_env import packaging  # heavy: only when uploading

        folder, skip = str(Path(path).resolve()), list(excludes)
        uri: str = packaging.get_uri_for_directory(folder, include_gitignore=True, excludes=skip)
        protocol, _, name = uri.partition("://")  # gcs, _ray_pkg_<hash>.zip
        where = f"/api/packages/{protocol}/{name}"
        if self._exists(where):
            return uri
        with tempfile.TemporaryDirectory() as tmp:
            package = Path(tmp) / name
            packaging.create_package(folder, package, include_gitignore=True, excludes=skip)
            self._request("PUT", where, package.read_bytes())
        return uri

    # --- HTTP -----------------------------------------------------------------------------

    def _targets(self) -> list[str]:
        found = self._request("GET", "/api/prometheus/sd")
        return [str(t) for group in found or [] for t in group.get("targets", [])]

    def _exists(self, path: str) -> bool:
        try:
            self._request("GET", path)
        except _NotFound:
            return False
        return True

    def _request(self, method: str, path: str, body: Any = None) -> Any:
        url = self.dashboard + path
        headers = {"Authorization": f"Bearer {self.token}"}
        data: bytes | None = None
        if isinstance(body, bytes):
            data, headers["Content-Type"] = body, "application/octet-stream"
        elif body is not None:
            data, headers["Content-Type"] = json.dumps(body).encode(), "application/json"
        request = urllib.request.Request(url, data, headers, method=method)
        text = self._send(request, f"{method} {url}")
        try:
            return json.loads(text) if text.strip() else {}
        except ValueError:
            return {"text": text}

    def _get_text(self, url: str) -> str:
        return self._send(urllib.request.Request(url), f"GET {url}")

    def _send(self, request: urllib.request.Request, what: str) -> str:
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                return bytes(response.read()).decode("utf-8", "replace")
        except urllib.error.HTTPError as err:
            said = one_line(err.read().decode("utf-8", "replace"))
            if err.code == 404:
                raise _NotFound(f"{what}: HTTP 404: {said or err.reason}") from None
            if err.code in (401, 403):
                said = "the dashboard refused the token; check the pool's auth settings"
            raise PoolError(f"{what}: HTTP {err.code}: {said or err.reason}") from None
        except (urllib.error.URLError, OSError, ValueError) as err:
            raise PoolError(f"{what}: no answer: {getattr(err, 'reason', err)}") from None


class _NotFound(PoolError):
    """HTTP 404: no such application, deployment or package."""


def _quote(value: str) -> str:
    return urllib.parse.quote(value, safe="")


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def last_line(text: str) -> str:
    """A message's point: the last line of a traceback, or the whole of a short message."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if "Traceback (most recent call last)" in text and lines:
        return one_line(lines[-1])
    return one_line(text)


def one_line(text: str) -> str:
    """Ray's message on one line, its end kept when long (a traceback ends with the error)."""
    flat = " | ".join(line.strip() for line in text.splitlines() if line.strip())
    return flat if len(flat) <= MESSAGE_CHARS else "..." + flat[-MESSAGE_CHARS:]


# --- the config (pure) --------------------------------------------------------------------


def deploy_config(
    apps: Sequence[ServeApp], http_port: int, proxy_location: ProxyLocation
) -> dict[str, Any]:
    """Serve's ``ServeDeploySchema`` for these applications."""
    return {
        "proxy_location": proxy_location,
        "http_options": {"host": "0.0.0.0", "port": http_port},
        "applications": [app_config(app) for app in apps],
    }


def app_config(app: ServeApp) -> dict[str, Any]:
    options: dict[str, Any] = {"num_cpus": app.num_cpus, "num_gpus": app.num_gpus}
    if app.memory_bytes is not None:
        options["memory"] = app.memory_bytes
    if app.node_ids:
        options["label_selector"] = node_selector(app.node_ids)
    deployment = {
        "name": app.deployment,
        "num_replicas": app.num_replicas,
        "max_ongoing_requests": app.max_ongoing_requests,
        "ray_actor_options": options,
    }
    return {
        "name": app.name,
        "import_path": app.import_path,
        "route_prefix": app.route_prefix,
        "runtime_env": dict(app.runtime_env),
        "external_scaler_enabled": True,  # meshctl owns the count: no Serve autoscaling
        "deployments": [deployment],
    }


def node_selector(node_ids: Iterable[str]) -> dict[str, str]:
    """Ray's label selector for "any of these nodes"."""
    return {RAY_NODE_ID_LABEL: f"in({','.join(sorted(set(node_ids)))})"}


# --- status (pure) ------------------------------------------------------------------------


def app_status(name: str, raw: Mapping[str, Any]) -> AppStatus:
    deployments = raw.get("deployments") or {}
    details = _ANSI.sub("", str(raw.get("message") or "")).strip()
    return AppStatus(
        name=name,
        status=str(raw.get("status") or ""),
        message=last_line(details),
        details=details,
        route_prefix=raw.get("route_prefix"),
        deployments={str(d): deployment_status(str(d), v) for d, v in deployments.items()},
    )


def deployment_status(name: str, raw: Mapping[str, Any]) -> DeploymentStatus:
    target = raw.get("target_num_replicas")
    replicas = tuple(
        Replica(str(r.get("replica_id") or ""), str(r.get("state") or ""),
                str(r.get("node_id") or ""))
        for r in raw.get("replicas") or []
    )  # fmt: skip
    return DeploymentStatus(
        name=name,
        status=str(raw.get("status") or ""),
        message=last_line(_ANSI.sub("", str(raw.get("message") or ""))),
        target_replicas=int(target) if target is not None else None,
        replicas=replicas,
    )


# --- metrics (pure) -----------------------------------------------------------------------

# A sample's key: the metric's name and its labels, sorted.
SampleKey = tuple[str, tuple[tuple[str, str], ...]]
Samples = dict[SampleKey, float]

_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s+(\S+)")
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_prometheus(text: str, prefix: str = "") -> Iterable[tuple[SampleKey, float]]:
    """The samples of a Prometheus text exposition whose names start with ``prefix``."""
    for line in text.splitlines():
        if not line.startswith(prefix) or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if match is None:
            continue
        name, labels, value = match.groups()
        try:
            number = float(value)
        except ValueError:
            continue
        pairs = tuple(sorted((k, v.replace('\\"', '"')) for k, v in _LABEL.findall(labels or "")))
        yield (name, pairs), number


def app_loads(now: Samples, before: Samples | None, interval_s: float | None) -> dict[str, AppLoad]:
    """Per application and deployment: gauges from ``now``; rates and percentiles from the
    growth of counters and histograms since ``before`` over ``interval_s``."""
    grown = growth(now, before) if before is not None else {}
    seconds = interval_s if before is not None and interval_s else None
    ongoing, queued = total(now, ONGOING, BY_DEPLOYMENT), total(now, QUEUED, BY_DEPLOYMENT)
    done, latency = total(grown, REQUESTS, BY_DEPLOYMENT), buckets(grown, LATENCY, BY_DEPLOYMENT)
    http, http_latency = (
        total(grown, HTTP_REQUESTS, ("application",)),
        buckets(grown, HTTP_LATENCY, ("application",)),
    )
    deployments: dict[str, dict[str, DeploymentLoad]] = {}
    for key in sorted({*ongoing, *queued, *done, *latency}):
        app, deployment = key
        deployments.setdefault(app, {})[deployment] = DeploymentLoad(
            ongoing=ongoing.get(key, 0.0),
            queued=queued.get(key, 0.0),
            rps=done.get(key, 0.0) / seconds if seconds else None,
            p50_ms=quantile(latency.get(key, {}), 0.5),
            p99_ms=quantile(latency.get(key, {}), 0.99),
        )
    names = {*deployments, *(k[0] for k in http), *(k[0] for k in http_latency)} - {""}
    return {
        app: AppLoad(
            name=app,
            rps=http.get((app,), 0.0) / seconds if seconds else None,
            p50_ms=quantile(http_latency.get((app,), {}), 0.5),
            p99_ms=quantile(http_latency.get((app,), {}), 0.99),
            deployments=deployments.get(app, {}),
        )
        for app in sorted(names)
    }


def growth(now: Samples, before: Samples) -> Samples:
    """How much each counter series grew; a series that went down restarted from zero (a
    replica or proxy restarted), one not seen before started from zero since."""
    return {key: (v - before.get(key, 0.0) if v >= before.get(key, 0.0) else v)
            for key, v in now.items()}  # fmt: skip


def total(samples: Samples, name: str, by: Sequence[str]) -> dict[tuple[str, ...], float]:
    """The sum of a metric's series, grouped by the values of the labels ``by``."""
    found: dict[tuple[str, ...], float] = {}
    for (metric, labels), value in samples.items():
        if metric == name:
            group = _group(labels, by)
            found[group] = found.get(group, 0.0) + value
    return found


def buckets(
    samples: Samples, name: str, by: Sequence[str]
) -> dict[tuple[str, ...], dict[float, float]]:
    """A histogram's cumulative bucket counts (by upper bound), summed per group."""
    found: dict[tuple[str, ...], dict[float, float]] = {}
    for (metric, labels), value in samples.items():
        if metric == name:
            le = float(dict(labels).get("le", "+Inf"))
            group = found.setdefault(_group(labels, by), {})
            group[le] = group.get(le, 0.0) + value
    return found


def quantile(cumulative: Mapping[float, float], q: float) -> float | None:
    """Prometheus's ``histogram_quantile``: linear within the bucket the rank falls in (so no
    finer than Serve's bucket bounds); the highest finite bound when it falls past it. None
    with no observation."""
    bounds = sorted(cumulative)
    count = cumulative[bounds[-1]] if bounds else 0.0
    if count <= 0:
        return None
    rank, lower, below = q * count, 0.0, 0.0
    for bound in bounds:
        seen = cumulative[bound]
        if seen >= rank:
            if bound == float("inf"):
                return lower
            share = (rank - below) / (seen - below) if seen > below else 1.0
            return lower + (bound - lower) * share
        lower, below = bound, seen
    return lower


def _group(labels: tuple[tuple[str, str], ...], by: Sequence[str]) -> tuple[str, ...]:
    found = dict(labels)
    return tuple(found.get(label, "") for label in by)
