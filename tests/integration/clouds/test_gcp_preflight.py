"""A GCP pool's preflight against the GCE emulator: a pool set up right passes every check,
each thing set up wrong fails its own check with a fix, and nothing is ever launched; a launch
takes the pool's image, network, tags and service account.

Every case has a project of its own in the module's one emulator, so none sees another's
rules, quotas or refusals.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from meshctl.catalog import load_catalogs
from meshctl.clouds.base import LaunchRequest
from meshctl.clouds.gcp import SCOPES, client_kwargs
from meshctl.clouds.gcp_preflight import Probe, preflight
from meshctl.clouds.preflight import Check
from meshctl.controller.runtime import cloud_for
from meshctl.model.mesh import GcpPool
from tests.emulators.gce import GceEmulator
from tests.emulators.gce_resources import LINK

pytestmark = pytest.mark.integration

REGION = "us-central1"
CATALOG = next(found.catalog for found in load_catalogs() if found.provider == "gcp")
CONTROLLER = "10.8.0.0/16"
SUBNET = "10.20.0.0/20"
CHECKS = ["credentials", "zones", "image", "network", "ports", "instance types", "GPU quota"]


def set_up(gce: GceEmulator, project: str) -> None:
    """What an operator makes before the first launch: an image family, a custom network and
    subnetwork, a rule opening the dashboard and agent to the controller, and one letting the
    pool's instances reach each other."""
    gce.add_image(project, "ray-gpu-v1", family="ray-gpu")
    gce.add_network(project, "ray")
    gce.add_subnetwork(project, REGION, "ray-us", "ray", SUBNET)
    _controller_rule(gce, project, ["8265", "9109"])
    gce.add_firewall(
        project, "ray-internal", network="ray", allowed=[{"IPProtocol": "tcp"}],
        sourceTags=["ray-node"], targetTags=["ray-node"],
    )  # fmt: skip


def _controller_rule(gce: GceEmulator, project: str, ports: list[str]) -> None:
    gce.add_firewall(
        project, "ray-controller", network="ray",
        allowed=[{"IPProtocol": "tcp", "ports": ports}],
        sourceRanges=[CONTROLLER], targetTags=["ray-node"],
    )  # fmt: skip


def pool_of(gce: GceEmulator, project: str, **changed: Any) -> GcpPool:
    """A pool with every real-account setting, pointed at the emulator."""
    spec = {
        "name": "gcp-burst", "provider": "gcp", "project": project, "region": REGION,
        "zones": ["us-central1-a", "us-central1-b"], "endpoint_url": gce.endpoint,
        "node_types": [{"name": "g2-standard-8", "max_nodes": 4},
                       {"name": "a2-ultragpu-1g", "max_nodes": 2, "spot": True}],
        "max_nodes": 3, "head_node_type": "n2-standard-4",
        "image": f"projects/{project}/global/images/family/ray-gpu",
        "network": "ray", "subnetwork": "ray-us", "network_tags": ["ray-node"],
        "service_account": f"ray@{project}.iam.gserviceaccount.com",
        "controller_cidr": CONTROLLER,
    }  # fmt: skip
    return GcpPool.model_validate({**spec, **changed})


@dataclass(frozen=True)
class Case:
    name: str
    fails: str | None  # the one check that fails; None: every check passes
    detail: str = ""  # in the failing check's detail
    fix: str = ""  # in its fix
    pool: dict[str, Any] = field(default_factory=dict)  # changed from a right pool
    world: Callable[[GceEmulator, str], object] = lambda gce, project: None  # after set_up


CASES = [
    Case("a pool set up right passes every check", None),
    Case(
        "a missing image fails the image check",
        "image", "not found", "gcloud compute images list",
        pool={"image": "projects/{project}/global/images/family/gone"},
    ),
    Case(
        "a missing subnetwork fails the network check",
        "network", "subnetwork gone not found in us-central1",
        "gcloud compute networks subnets create gone", pool={"subnetwork": "gone"},
    ),
    Case(
        "a zero GPU quota fails the quota check",
        "GPU quota", "NVIDIA_L4_GPUS needs 3, 0 left (limit 0)", "IAM & Admin > Quotas",
        world=lambda gce, project: gce.set_quota(project, REGION, "NVIDIA_L4_GPUS", 0),
    ),
    Case(
        # 3 L4 (4 nodes, capped at the pool's 3) + 2 spot A100 80GB = 5 GPUs
        "a used-up project-wide GPU quota fails the quota check",
        "GPU quota", "GPUS_ALL_REGIONS needs 5, 4 left", "IAM & Admin > Quotas",
        world=lambda gce, project: gce.set_quota(project, None, "GPUS_ALL_REGIONS", 8, usage=4),
    ),
    Case(
        "a firewall that does not open the agent port fails the ports check",
        "ports", f"tcp 9109 not open to {CONTROLLER}",
        f"--allow tcp:9109 --source-ranges {CONTROLLER} --target-tags ray-node",
        world=lambda gce, project: _controller_rule(gce, project, ["8265"]),
    ),
    Case(
        "instances that cannot reach each other fail the ports check",
        "ports", "cannot reach each other", "--allow tcp --source-tags ray-node",
        world=lambda gce, project: gce.add_firewall(
            project, "ray-internal", network="ray", allowed=[{"IPProtocol": "tcp"}],
            sourceTags=["someone-else"], targetTags=["ray-node"],
        ),
    ),
    Case(
        "a zone outside the region's zones fails the zones check",
        "zones", "us-central1-z not found", "set zones to some of: us-central1-a",
        pool={"zones": ["us-central1-a", "us-central1-z"]},
    ),
    Case(
        "a type offered in none of the zones fails the instance types check",
        "instance types", "a2-ultragpu-1g not offered in us-central1-b",
        "gcloud compute machine-types list", pool={"zones": ["us-central1-b"]},
    ),
    Case(
        "denied credentials fail the credentials check and nothing else is asked",
        "credentials", "credentials refused: Forbidden", "GOOGLE_APPLICATION_CREDENTIALS",
        world=lambda gce, project: gce.deny(project),
    ),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_preflight(gce: GceEmulator, case: Case) -> None:
    project = f"preflight-{CASES.index(case)}"
    set_up(gce, project)
    case.world(gce, project)
    changed = {k: v.format(project=project) if isinstance(v, str) else v
               for k, v in case.pool.items()}  # fmt: skip
    checks = preflight(pool_of(gce, project, **changed), CATALOG)
    if case.fails is None:
        assert [(c.name, c.result) for c in checks] == [(name, "pass") for name in CHECKS]
    else:
        [failing] = [c for c in checks if c.result == "fail"]
        assert failing.name == case.fails
        assert case.detail in failing.detail
        assert case.fix in failing.fix
    _nothing_launched(gce, project)


def test_a_real_account_pool_lacking_settings_fails_each_setting_first(
    gce: GceEmulator, tmp_path: Path
) -> None:
    """No endpoint: a real account. Its credentials file is missing, so nothing is called."""
    pool = GcpPool.model_validate({
        "name": "gcp-real", "provider": "gcp", "project": "meshctl-real", "region": REGION,
        "credentials_file": str(tmp_path / "missing.json"),
        "node_types": [{"name": "g2-standard-8", "max_nodes": 1}],
    })  # fmt: skip
    checks = preflight(pool, CATALOG)
    assert [(c.name, c.result) for c in checks] == [
        ("setting image", "fail"), ("setting head_node_type", "fail"),
        ("setting network", "fail"), ("setting subnetwork", "fail"),
        ("setting network_tags", "fail"), ("setting service_account", "fail"),
        ("credentials", "fail"),
    ]  # fmt: skip
    assert all(c.fix.startswith(f"set {c.name.removeprefix('setting ')} in mesh.yaml")
               for c in checks[:-1])  # fmt: skip
    assert "missing.json" in checks[-1].detail
    assert "credentials_file" in checks[-1].fix
    _nothing_launched(gce, "meshctl-real")


def test_an_emulated_pool_needs_no_settings(gce: GceEmulator) -> None:
    """The defaults a launch takes (the default image, network and subnetwork) are what an
    emulated pool is checked with; the default network's internal rule covers the ports."""
    project = "preflight-bare"
    pool = GcpPool.model_validate({
        "name": "gcp-burst", "provider": "gcp", "project": project, "region": REGION,
        "zones": ["us-central1-a"], "endpoint_url": gce.endpoint,
        "node_types": [{"name": "g2-standard-8", "max_nodes": 2}],
    })  # fmt: skip
    checks = {c.name: c for c in preflight(pool, CATALOG)}
    assert [(name, c.result) for name, c in checks.items()] == [(n, "pass") for n in CHECKS]
    assert checks["image"].detail == "not set: the default image"
    assert "10.128.0.0/20" in checks["network"].detail
    _nothing_launched(gce, project)


@pytest.mark.parametrize(("emulated", "result"), [(True, "skip"), (False, "fail")])
def test_an_api_the_endpoint_does_not_serve(gce: GceEmulator, emulated: bool, result: str) -> None:
    """The emulator answers 501 for what it does not serve: not judged for an emulated pool,
    a failure for a real account (whose endpoint should serve everything)."""
    pool = pool_of(gce, "preflight-unserved", endpoint_url=gce.endpoint if emulated else None)
    probe = Probe(pool, CATALOG, client_kwargs(gce.endpoint, None))

    def unserved() -> Check:  # machineTypes.aggregatedList: not served
        probe.call("types", "aggregated_list", project=pool.project)
        return Check("instance types", "pass", "")

    assert probe.run("instance types", unserved).result == result


def test_a_launch_takes_the_pools_setup(gce: GceEmulator) -> None:
    """Through the controller's ``cloud_for``: bare names in mesh.yaml become GCE's links."""
    project = "preflight-launch"
    set_up(gce, project)
    pool = pool_of(gce, project)
    cloud = cloud_for(pool)
    assert cloud is not None
    request = LaunchRequest("m", pool.name, "g2-standard-8", 1, "r-setup", ("us-central1-a",))
    [launched] = cloud.launch(request).instances
    [raw] = [i for i in gce.instances() if f"/projects/{project}/" in i["selfLink"]]
    [nic] = raw["networkInterfaces"]
    assert nic["network"] == f"{LINK}projects/{project}/global/networks/ray"
    assert nic["subnetwork"] == f"{LINK}projects/{project}/regions/{REGION}/subnetworks/ray-us"
    assert ipaddress.ip_address(launched.address) in ipaddress.ip_network(SUBNET)
    assert raw["tags"]["items"] == ["ray-node"]
    assert raw["serviceAccounts"] == [{"email": pool.service_account, "scopes": SCOPES}]
    [disk] = raw["disks"]
    assert disk["initializeParams"]["sourceImage"] == pool.image
    assert cloud.terminate([launched.id], "r-setup-stop") == []


def _nothing_launched(gce: GceEmulator, project: str) -> None:
    """No instance, and no call but reads, in the project."""
    assert [i for i in gce.instances() if f"/projects/{project}/" in i["selfLink"]] == []
    assert [(v, p) for v, p, _ in gce.requests if f"/projects/{project}" in p and v != "GET"] == []
