"""meshctl's metrics against the real Prometheus: ``promtool`` checks the exposition and the
alert rules, and a Prometheus server scrapes ``meshctl server``'s /metrics and a controller's,
and evaluates ``deploy/prometheus/alerts.yml`` over what it scraped.

Prometheus is Debian's ``prometheus`` package; the session installs it when it is missing (as
CI does), which needs root.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from meshctl.agent.watch import AgentReport, AgentStatus
from meshctl.controller.metrics import Address, ControllerMetrics
from meshctl.host.ports import free_port
from meshctl.model.policy import TeamQuota
from meshctl.policy.tenancy import BudgetStanding
from meshctl.state import Event, JobRecord, JobState, NodeRecord, SqliteStore
from tests.conftest import wait_until
from tests.integration.server.test_api import start, stop

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"
INSTALL_TIMEOUT_S = 900


@dataclass(frozen=True)
class Tools:
    promtool: str
    prometheus: str


def _found() -> Tools | None:
    promtool, prometheus = shutil.which("promtool"), shutil.which("prometheus")
    return Tools(promtool, prometheus) if promtool and prometheus else None


@pytest.fixture(scope="session")
def tools() -> Tools:
    """promtool and prometheus from PATH, Debian's package installed first when missing."""
    found = _found()
    if found is not None:
        return found
    if os.geteuid() != 0:
        pytest.skip("prometheus is not installed; installing Debian's package needs root")
    if shutil.which("apt-get") is None:
        pytest.skip("prometheus is not installed and this is not a Debian system (no apt-get)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (
        ["apt-get", "update"],
        ["apt-get", "install", "-y", "--no-install-recommends", "prometheus"],
    ):
        done = subprocess.run(
            command, env=env, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S
        )
        assert done.returncode == 0, f"{' '.join(command)}: {done.stderr[-2000:]}"
    found = _found()
    assert found is not None, "Debian's prometheus package installed no promtool or prometheus"
    return found


def _filled(path: Path) -> SqliteStore:
    """A store with three jobs waiting (two batch, one requeued high), one admitted after a
    wait of 40 s, and an unhealthy node."""
    store = SqliteStore(path)
    spec = {"spec": {"priority_class": "batch"}}
    for job_id, at in (("a", 100.0), ("b", 110.0)):
        record = JobRecord(job_id, job_id, "ml", JobState.PENDING, 1, spec, None, at, at)
        store.create(record, events=[Event(at, "job.pending", job_id, "submitted")])
    high = {"spec": {"priority_class": "high"}}
    store.create(JobRecord("c", "c", "ml", JobState.REQUEUED, 9, high, "onprem", 50.0, 90.0))
    store.append_event(Event(50.0, "job.pending", "c", "submitted"))
    store.append_event(Event(90.0, "job.admitted", "c", "placed", {"pool": "onprem"}))
    store.create(NodeRecord("onprem/n1", "onprem", "unhealthy", {}, {"alive": True}, 100.0))
    return store


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, SqliteStore]]:
    """``meshctl server`` over the filled store: its /metrics is what Prometheus scrapes."""
    folder = tmp_path_factory.mktemp("state")
    store = _filled(folder / "state.db")
    process, url = start(folder / "home", "--store", str(folder / "state.db"))
    yield url.removeprefix("http://"), store
    stop(process)
    store.close()


class _Standby:
    """What a controller's metrics read: a budget at 95% of its limit, a quota, one agent
    silent."""

    standings = (BudgetStanding("cloud", "provider:aws", 950.0, 1000.0, "warn"),)
    agent_report = AgentReport(agents={"onprem/n1": AgentStatus("http://n1", "dead")})

    def quotas(self) -> dict[str, TeamQuota]:
        return {"ml": TeamQuota(team="ml", gpus=8)}

    def last_world(self) -> None:
        return None


@pytest.fixture(scope="module")
def controller_endpoint() -> Iterator[str]:
    """A controller's metrics served as ``--metrics-address 127.0.0.1:0`` does; one that
    does not lead."""
    metrics = ControllerMetrics(_Standby())
    metrics.observe(1_800_000_000.0, 0.2, [])
    metrics.lead(False)
    port = metrics.serve(Address("127.0.0.1", 0))
    yield f"127.0.0.1:{port}"
    metrics.close()


@pytest.fixture(scope="module")
def prometheus(
    tools: Tools,
    endpoint: tuple[str, SqliteStore],
    controller_endpoint: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[str]:
    """A Prometheus server scraping both endpoints every second with the shipped alert rules;
    its HTTP API's base URL. Stopped by its pid at the end."""
    folder = tmp_path_factory.mktemp("prometheus")
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(ALERTS)],
        "scrape_configs": [
            {"job_name": "meshctl-server", "static_configs": [{"targets": [endpoint[0]]}]},
            {
                "job_name": "meshctl-controller",
                "static_configs": [{"targets": [controller_endpoint]}],
            },
        ],
    }
    (folder / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    log = (folder / "prometheus.log").open("wb")
    process = subprocess.Popen(
        [
            tools.prometheus,
            f"--config.file={folder / 'prometheus.yml'}",
            f"--storage.tsdb.path={folder / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=30)
        log.close()


def _api(base: str, path: str, **query: str) -> Any:
    url = f"{base}{path}?{urllib.parse.urlencode(query)}" if query else f"{base}{path}"
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return json.loads(answer.read())
    except OSError:  # not listening yet
        return None


def _log(base: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    logs = sorted(tmp_path_factory.getbasetemp().glob("prometheus*/prometheus.log"))
    return f"{base}: " + (logs[-1].read_text()[-3000:] if logs else "(no log)")


def test_promtool_accepts_the_expositions(
    tools: Tools, endpoint: tuple[str, SqliteStore], controller_endpoint: str
) -> None:
    for where in (endpoint[0], controller_endpoint):
        with urllib.request.urlopen(f"http://{where}/metrics", timeout=10) as answer:
            text = answer.read()
        assert b"meshctl_" in text
        done = subprocess.run([tools.promtool, "check", "metrics"], input=text, capture_output=True)
        assert done.returncode == 0, done.stdout.decode() + done.stderr.decode()


def test_promtool_accepts_the_alert_rules(tools: Tools) -> None:
    done = subprocess.run(
        [tools.promtool, "check", "rules", str(ALERTS)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_prometheus_scrapes_the_queue(
    prometheus: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    def pending() -> dict[str, float]:
        found = _api(prometheus, "/api/v1/query", query="meshctl_pending_workloads")
        results = found["data"]["result"] if found else []
        return {r["metric"]["class"]: float(r["value"][1]) for r in results}

    found = wait_until(lambda: _log(prometheus, tmp_path_factory), pending, timeout_s=60)
    assert found == {"batch": 2.0, "high": 1.0}


def test_prometheus_scrapes_the_controller(
    prometheus: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    def cycles() -> float | None:
        query = "meshctl_controller_cycle_duration_seconds_count"
        found = _api(prometheus, "/api/v1/query", query=query)
        results = found["data"]["result"] if found else []
        return float(results[0]["value"][1]) if results else None

    assert wait_until(lambda: _log(prometheus, tmp_path_factory), cycles, timeout_s=60) == 1
    found = _api(prometheus, "/api/v1/query", query="meshctl_team_nominal_quota")
    assert [float(r["value"][1]) for r in found["data"]["result"]] == [8.0]


def test_prometheus_evaluates_the_alert_rules(
    prometheus: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    shipped = {r["alert"] for g in yaml.safe_load(ALERTS.read_text())["groups"] for r in g["rules"]}

    def evaluated() -> list[dict[str, Any]]:
        found = _api(prometheus, "/api/v1/rules")
        rules = [r for g in found["data"]["groups"] for r in g["rules"]] if found else []
        done = rules and all(r.get("lastEvaluation", "").startswith("20") for r in rules)
        return rules if done else []

    rules = wait_until(lambda: _log(prometheus, tmp_path_factory), evaluated, timeout_s=60)
    assert {r["name"] for r in rules} == shipped
    assert {r["name"]: r["health"] for r in rules} == dict.fromkeys(shipped, "ok")

    def pending() -> set[str]:  # "for:" keeps them pending for minutes
        found = _api(prometheus, "/api/v1/alerts")
        return {a["labels"]["alertname"] for a in found["data"]["alerts"]} if found else set()

    # The controller does not lead, its budget is at 95%, one agent is silent, and the store
    # has an unhealthy node.
    wanted = {
        "MeshctlControllerNotLeading",
        "MeshctlBudgetNearLimit",
        "MeshctlAgentsSilent",
        "MeshctlNodesUnhealthy",
    }
    assert wait_until(
        lambda: _log(prometheus, tmp_path_factory), lambda: wanted <= pending(), timeout_s=60
    )
