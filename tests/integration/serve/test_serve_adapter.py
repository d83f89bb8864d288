"""The Serve adapter against a real two-node Ray cluster (token auth on), over HTTP only.

One module-scoped story, observed once and asserted by the tests below: the example
application deployed with one replica pinned to node A, load running from then on; scaled to
two replicas (the second cannot start: A has one GPU and B is not allowed); re-pinned to A
and B (Serve rolls the replicas over, the load sees no failure); the traffic read twice; a
bad import path; everything deleted.

Both nodes run on this machine, so Serve's proxy runs on the head only (two proxies would want
one port) and nodes are told apart by Ray's node id. The cluster exports metrics every
second instead of every 10 s, so two reads of ``load()`` a few seconds apart see traffic.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from meshctl import loadgen
from meshctl.host.ports import free_ports
from meshctl.loadgen import LoadResult
from meshctl.pools.serve import AppLoad, AppStatus, ServeApp, ServeClient
from tests.conftest import wait_until
from tests.integration.controller.test_plain_ray import PlainCluster

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
WAIT_S = 120
APP, DEPLOYMENT = "model", "Model"
COST_MS = "20"


class ServeCluster(PlainCluster):
    """A head (1 GPU, 2 CPUs) and a second node (1 GPU): ``ray start`` processes, stopped by
    their pids."""

    def env(self) -> dict[str, str]:
        return {**super().env(), "RAY_metrics_report_interval_ms": "1000"}

    def start_node(self, name: str, *args: str) -> None:
        ports = iter(free_ports(6))
        ray = str(Path(sys.executable).with_name("ray"))
        with open(self.log_dir / f"{name}.log", "w") as log:
            proc = subprocess.Popen(
                [ray, "start", *args, "--num-gpus=1", "--num-cpus=2",
                 f"--node-manager-port={next(ports)}", f"--object-manager-port={next(ports)}",
                 f"--metrics-export-port={next(ports)}",
                 f"--dashboard-agent-listen-port={next(ports)}",
                 f"--dashboard-agent-grpc-port={next(ports)}",
                 f"--runtime-env-agent-port={next(ports)}",
                 "--object-store-memory=100000000", "--disable-usage-stats", "--block"],
                env=self.env(), cwd=self.temp_dir, stdin=subprocess.DEVNULL,
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        self.sessions.append(proc.pid)

    def node_ids(self) -> tuple[str, str]:
        """(the head's, the other node's) Ray node ids."""
        request = urllib.request.Request(
            self.dashboard + "/api/v0/nodes?detail=1",
            headers={"Authorization": f"Bearer {self.token_file.read_text()}"},
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            nodes = json.load(response)["data"]["result"]["result"]
        alive = [n for n in nodes if n["state"] == "ALIVE"]
        head = next(str(n["node_id"]) for n in alive if n["is_head_node"])
        other = next(str(n["node_id"]) for n in alive if not n["is_head_node"])
        return head, other


@dataclass
class Story:
    """What the story saw, for the tests to assert."""

    a: str = ""
    b: str = ""
    pinned: AppStatus | None = None  # one replica, pinned to A
    scaled_pinned: AppStatus | None = None  # two wanted, still pinned to A
    spread: AppStatus | None = None  # two, allowed on A and B
    loads: list[dict[str, AppLoad]] = field(default_factory=list)
    traffic: LoadResult | None = None  # the load throughout scaling and re-pinning
    broken: AppStatus | None = None
    after_delete: dict[str, AppStatus] | None = None


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeCluster]:
    cluster = ServeCluster(tmp_path_factory.mktemp("serve"))
    try:
        cluster.start_node(
            "head", "--head", f"--port={cluster.gcs_port}",
            f"--dashboard-port={cluster.dashboard_port}", "--dashboard-host=127.0.0.1",
            f"--ray-client-server-port={cluster.client_port}", f"--temp-dir={cluster.temp_dir}",
        )  # fmt: skip
        wait_until("the head never came up", lambda: cluster.alive() == 1, WAIT_S, 0.5)
        cluster.start_node("worker", f"--address=127.0.0.1:{cluster.gcs_port}")
        wait_until("the second node never joined", lambda: cluster.alive() == 2, WAIT_S, 0.5)
        yield cluster
    finally:
        cluster.stop()


def settled(client: ServeClient, app: str, ready: Callable[[AppStatus], bool]) -> AppStatus:
    """Poll the app's status until ``ready(status)`` holds; the last status in the failure."""
    seen: list[AppStatus | None] = [None]

    def check() -> AppStatus | None:
        seen[0] = client.status().get(app)
        return seen[0] if seen[0] is not None and ready(seen[0]) else None

    found = wait_until(lambda: f"{app} never settled: {seen[0]}", check, WAIT_S, 0.5)
    assert found is not None
    return found


def running(count: int) -> Callable[[AppStatus], bool]:
    def ready(status: AppStatus) -> bool:
        deployment = status.deployments.get(DEPLOYMENT)
        return (status.status == "RUNNING" and deployment is not None
                and deployment.counts.get("RUNNING", 0) == count)  # fmt: skip

    return ready


@pytest.fixture(scope="module")
def story(cluster: ServeCluster) -> Story:
    seen = Story()
    seen.a, seen.b = cluster.node_ids()
    client = ServeClient(cluster.dashboard, cluster.token_file.read_text(), timeout_s=30)
    http_port = free_ports(1)[0]
    uri = client.upload_working_dir(ROOT / "examples" / "serve")
    env = {"working_dir": uri, "env_vars": {"MESHCTL_SERVE_COST_MS": COST_MS}}
    app = ServeApp(APP, "app:app", "/model", DEPLOYMENT, num_replicas=1, node_ids=(seen.a,),
                   num_gpus=1, num_cpus=0.5, max_ongoing_requests=8, runtime_env=env)  # fmt: skip
    try:
        client.deploy([app], http_port, proxy_location="HeadOnly")
        seen.pinned = settled(client, APP, running(1))

        seen.traffic = scale_under_load(client, app, http_port, seen)

        broken = ServeApp("broken", "no_such_module:app", "/broken", DEPLOYMENT, 1,
                          num_cpus=0.1, runtime_env={"working_dir": uri})  # fmt: skip
        spread_app = replace(app, num_replicas=2, node_ids=(seen.a, seen.b))
        client.deploy([spread_app, broken], http_port, proxy_location="HeadOnly")
        seen.broken = settled(
            client, "broken", lambda s: s.status not in ("NOT_STARTED", "DEPLOYING")
        )
    finally:
        client.delete_all()
    wait_until("the apps were never deleted", lambda: client.status() == {}, WAIT_S, 0.5)
    seen.after_delete = client.status()
    return seen


def scale_under_load(client: ServeClient, app: ServeApp, http_port: int, seen: Story) -> LoadResult:
    """Scale to two replicas still pinned to A, read the traffic twice, then allow A and B;
    load runs throughout. What the load saw."""
    stop, traffic = threading.Event(), []
    url = f"http://127.0.0.1:{http_port}/model"
    load = threading.Thread(target=lambda: traffic.append(
        loadgen.run(url, [(WAIT_S * 3, 20)], timeout_s=30, stop=stop)))  # fmt: skip
    load.start()
    try:
        client.scale(APP, DEPLOYMENT, 2)
        settled(client, APP, lambda s: len(s.deployments[DEPLOYMENT].replicas) == 2)
        seen.loads.append(client.load())
        with_traffic = wait_until("no traffic in the metrics", lambda: busy(client), WAIT_S, 1)
        assert with_traffic is not None
        seen.loads.append(with_traffic)
        seen.scaled_pinned = client.status()[APP]  # seconds later: still waiting

        spread = replace(app, num_replicas=2, node_ids=(seen.a, seen.b))
        client.deploy([spread], http_port, proxy_location="HeadOnly")
        seen.spread = settled(client, APP, lambda s: running(2)(s)
                              and len(s.deployments[DEPLOYMENT].replicas) == 2)  # fmt: skip
    finally:
        stop.set()
        load.join()
    return traffic[0]


def busy(client: ServeClient) -> dict[str, AppLoad] | None:
    """A read that shows the deployment's traffic as the tests assert it: its request counter
    and its latency histogram both grown since the read before (two metrics: a read is not
    promised to see both grow at once)."""
    found = client.load()
    model = found.get(APP)
    deployment = model.deployments.get(DEPLOYMENT) if model else None
    seen = deployment is not None and bool(deployment.rps) and deployment.p50_ms is not None
    return found if seen else None


def test_one_replica_runs_on_the_node_it_is_pinned_to(story: Story) -> None:
    assert story.pinned is not None
    deployment = story.pinned.deployments[DEPLOYMENT]
    assert deployment.running_on == {story.a}
    assert deployment.counts == {"RUNNING": 1}


def test_a_second_replica_pinned_to_a_full_node_does_not_go_elsewhere(story: Story) -> None:
    # A's one GPU is taken and B has one free, but B is not allowed: the replica waits.
    assert story.scaled_pinned is not None
    deployment = story.scaled_pinned.deployments[DEPLOYMENT]
    assert deployment.target_replicas == 2
    assert deployment.running_on == {story.a}
    assert deployment.counts.get("RUNNING") == 1
    assert all(r.node_id in ("", story.a) for r in deployment.replicas), deployment.replicas


def test_allowed_on_both_nodes_two_replicas_run_one_on_each(story: Story) -> None:
    assert story.spread is not None
    deployment = story.spread.deployments[DEPLOYMENT]
    assert deployment.running_on == {story.a, story.b}
    assert deployment.counts == {"RUNNING": 2}


def test_no_request_failed_while_scaling_and_repinning(story: Story) -> None:
    assert story.traffic is not None
    assert story.traffic.total > 0
    assert story.traffic.failed == 0, story.traffic.failures


def test_the_traffic_signal_has_rates_after_a_second_read(story: Story) -> None:
    first, second = story.loads
    assert all(d.rps is None for app in first.values() for d in app.deployments.values())
    deployment = second[APP].deployments[DEPLOYMENT]
    assert isinstance(deployment.ongoing, float)
    assert deployment.ongoing >= 0
    assert isinstance(deployment.queued, float)
    assert deployment.queued >= 0
    assert deployment.rps is not None
    assert deployment.rps > 0
    assert deployment.p50_ms is not None
    assert deployment.p99_ms is not None
    assert deployment.p50_ms >= float(COST_MS)  # the example's cost per request
    app = second[APP]  # the proxy's own counters: exported on their own schedule, they may
    assert app.rps is not None  # not have moved between two reads a few seconds apart
    assert app.rps >= 0


def test_a_bad_import_path_fails_with_serves_message_naming_the_module(story: Story) -> None:
    assert story.broken is not None
    assert story.broken.status == "DEPLOY_FAILED"
    assert "no_such_module" in story.broken.message, story.broken.message
    assert "ModuleNotFoundError" in story.broken.message


def test_delete_all_leaves_no_application(story: Story) -> None:
    assert story.after_delete == {}
