"""The pure halves of a GCP pool's launch settings and preflight: which quota a GPU counts
against and how many it needs, where an image, network or subnetwork setting points, and what
a set of firewall rules lets in.

(No ``__init__.py`` here: a package ``clouds`` would clash with tests/integration/clouds.)
"""

from __future__ import annotations

from typing import Any

import pytest

from meshctl.catalog import load_catalogs
from meshctl.clouds.gcp import GcpCloud, GcpSetup, image_link, network_link, subnetwork_link
from meshctl.clouds.gcp_preflight import (
    ImageRef,
    Rule,
    closed_to,
    connected,
    gpus_wanted,
    image_ref,
    network_ref,
    quota_metric,
    subnetwork_ref,
    tcp_ranges,
)
from meshctl.clouds.preflight import needed_per_quota
from meshctl.model.mesh import GcpPool

pytestmark = pytest.mark.unit

CATALOG = next(found.catalog for found in load_catalogs() if found.provider == "gcp")
URL = "https://www.googleapis.com/compute/v1/"


@pytest.mark.parametrize(
    ("model", "memory_gib", "spot", "metric"),
    [
        pytest.param("L4", 24, False, "NVIDIA_L4_GPUS", id="L4"),
        pytest.param("L4", 24, True, "PREEMPTIBLE_NVIDIA_L4_GPUS", id="spot L4"),
        pytest.param("A100", 40, False, "NVIDIA_A100_GPUS", id="A100 40GB"),
        pytest.param("A100", 80, False, "NVIDIA_A100_80GB_GPUS", id="A100 80GB: its own quota"),
        pytest.param("A100", 80, True, "PREEMPTIBLE_NVIDIA_A100_80GB_GPUS", id="spot A100 80GB"),
        pytest.param("H100", 80, False, "NVIDIA_H100_GPUS", id="H100"),
        pytest.param("T4", 16, False, "NVIDIA_T4_GPUS", id="T4"),
        pytest.param("V100", 16, True, "PREEMPTIBLE_NVIDIA_V100_GPUS", id="spot V100"),
        pytest.param("NVIDIA L4", 24, False, "NVIDIA_L4_GPUS", id="the vendor's name in front"),
        pytest.param("MI300X", 192, False, None, id="no known metric"),
    ],
)
def test_quota_metric(model: str, memory_gib: float, spot: bool, metric: str | None) -> None:
    assert quota_metric(model, memory_gib, spot) == metric


def _pool(**changed: Any) -> GcpPool:
    spec = {"name": "p", "provider": "gcp", "project": "meshctl-test", "region": "us-central1",
            "node_types": [{"name": "g2-standard-8", "max_nodes": 1}]}  # fmt: skip
    return GcpPool.model_validate({**spec, **changed})


@pytest.mark.parametrize(
    ("node_types", "pool", "needed"),
    [
        pytest.param(
            [{"name": "g2-standard-24", "max_nodes": 4}], {"max_nodes": 3},
            {"NVIDIA_L4_GPUS": 6}, id="2 L4 x 4 nodes, capped at the pool's 3 nodes",
        ),
        pytest.param(
            [{"name": "g2-standard-8", "max_nodes": 2},
             {"name": "g2-standard-48", "max_nodes": 1, "spot": True},
             {"name": "g2-standard-96", "max_nodes": 1, "spot": True}], {},
            {"NVIDIA_L4_GPUS": 2, "PREEMPTIBLE_NVIDIA_L4_GPUS": 12},
            id="1 x 2 on demand; 4 x 1 + 8 x 1 spot",
        ),
        pytest.param(
            [{"name": "a2-highgpu-8g", "max_nodes": 1},
             {"name": "a2-ultragpu-8g", "max_nodes": 2}], {},
            {"NVIDIA_A100_GPUS": 8, "NVIDIA_A100_80GB_GPUS": 16}, id="A100 40 and 80 GB apart",
        ),
        pytest.param(
            [{"name": "g2-standard-8", "max_nodes": 1}], {"head_node_type": "n2-standard-4"},
            {"NVIDIA_L4_GPUS": 1}, id="a CPU head the catalog does not list needs none",
        ),
        pytest.param(
            [{"name": "g2-standard-8", "max_nodes": 2}], {"head_node_type": "g2-standard-8"},
            {"NVIDIA_L4_GPUS": 3}, id="a GPU head is one more node, on demand",
        ),
        pytest.param(
            [{"name": "n9-unknown", "max_nodes": 5}], {}, {}, id="a type not in the catalog",
        ),
    ],
)  # fmt: skip
def test_gpus_wanted(
    node_types: list[dict[str, Any]], pool: dict[str, Any], needed: dict[str, int]
) -> None:
    found = gpus_wanted(_pool(node_types=node_types, **pool), CATALOG)
    assert needed_per_quota(found) == needed


@pytest.mark.parametrize(
    ("image", "ref"),
    [
        pytest.param("projects/debian-cloud/global/images/family/debian-12",
                     ImageRef("debian-cloud", "debian-12", True), id="a family of another project"),
        pytest.param("projects/p-1/global/images/ray-v1", ImageRef("p-1", "ray-v1", False),
                     id="an image of another project"),
        pytest.param(f"{URL}projects/p-1/global/images/ray-v1", ImageRef("p-1", "ray-v1", False),
                     id="a full URL"),
        pytest.param("global/images/family/ray", ImageRef("mine", "ray", True),
                     id="a family of the pool's project"),
        pytest.param("ray-v1", ImageRef("mine", "ray-v1", False), id="a bare name: the pool's"),
        pytest.param("zones/us-central1-a/disks/d", None, id="not an image"),
    ],
)  # fmt: skip
def test_image_ref(image: str, ref: ImageRef | None) -> None:
    assert image_ref(image, "mine") == ref


@pytest.mark.parametrize(
    ("network", "ref"),
    [
        pytest.param(None, ("mine", "default"), id="unset: the default network"),
        pytest.param("ray", ("mine", "ray"), id="a bare name"),
        pytest.param("projects/host/global/networks/shared", ("host", "shared"),
                     id="a shared VPC's host project"),
        pytest.param(f"{URL}projects/host/global/networks/shared", ("host", "shared"),
                     id="a full URL"),
        pytest.param("regions/us-central1/subnetworks/s", None, id="a subnetwork is not one"),
    ],
)  # fmt: skip
def test_network_ref(network: str | None, ref: tuple[str, str] | None) -> None:
    assert network_ref(network, "mine") == ref


@pytest.mark.parametrize(
    ("subnetwork", "ref"),
    [
        pytest.param(None, ("host", "us-central1", "ray"), id="unset: named after the network"),
        pytest.param("ray-us", ("host", "us-central1", "ray-us"),
                     id="a bare name: the network's project, the pool's region"),
        pytest.param("regions/us-east1/subnetworks/s", ("host", "us-east1", "s"),
                     id="a link to another region (the check refuses it)"),
        pytest.param("projects/other/regions/us-central1/subnetworks/s",
                     ("other", "us-central1", "s"), id="a link to another project"),
        pytest.param("global/networks/ray", None, id="a network is not one"),
    ],
)  # fmt: skip
def test_subnetwork_ref(subnetwork: str | None, ref: tuple[str, str, str] | None) -> None:
    assert subnetwork_ref(subnetwork, "host", "us-central1", "ray") == ref


@pytest.mark.parametrize(
    ("allowed", "ranges"),
    [
        pytest.param([("tcp", [])], [(0, 65535)], id="tcp without ports: all of them"),
        pytest.param([("tcp", ["22", "8000-9000"])], [(22, 22), (8000, 9000)], id="tcp ports"),
        pytest.param([("all", [])], [(0, 65535)], id="every protocol"),
        pytest.param([("udp", []), ("icmp", [])], [], id="no tcp"),
        pytest.param([("TCP", ["8265"]), ("udp", ["53"])], [(8265, 8265)], id="tcp among others"),
    ],
)  # fmt: skip
def test_tcp_ranges(allowed: list[tuple[str, list[str]]], ranges: list[tuple[int, int]]) -> None:
    assert tcp_ranges(allowed) == ranges


NET = "projects/p/global/networks/ray"
DASHBOARD_AND_AGENT = Rule("ctl", NET, ((8265, 8265), (9109, 9109)), ("10.8.0.0/16",))
EVERY_TCP_FROM_TAG = Rule("int", NET, ((0, 65535),), source_tags=("ray-node",))
EVERY_TCP_FROM_SUBNET = Rule("int", NET, ((1, 65535),), ("10.20.0.0/16",))


@pytest.mark.parametrize(
    ("rules", "source", "closed"),
    [
        pytest.param([DASHBOARD_AND_AGENT], "10.8.0.0/16", [], id="both open to the range"),
        pytest.param([DASHBOARD_AND_AGENT], "10.8.4.0/24", [], id="a range inside it"),
        pytest.param([DASHBOARD_AND_AGENT], "10.0.0.0/8", [8265, 9109], id="a wider range"),
        pytest.param([Rule("d", NET, ((8265, 8265),), ("0.0.0.0/0",))], "10.8.0.0/16", [9109],
                     id="the agent port left out"),
        pytest.param([EVERY_TCP_FROM_TAG], "10.8.0.0/16", [8265, 9109],
                     id="a rule from tags opens nothing to an address range"),
        pytest.param([], "10.8.0.0/16", [8265, 9109], id="no rule"),
    ],
)  # fmt: skip
def test_closed_to(rules: list[Rule], source: str, closed: list[int]) -> None:
    assert closed_to(rules, [8265, 9109], source) == closed


@pytest.mark.parametrize(
    ("rules", "tags", "subnet", "together"),
    [
        pytest.param([EVERY_TCP_FROM_TAG], ["ray-node"], "10.20.0.0/20", True,
                     id="every TCP port from the pool's tag"),
        pytest.param([EVERY_TCP_FROM_TAG], ["other"], "10.20.0.0/20", False,
                     id="from a tag the pool lacks"),
        pytest.param([EVERY_TCP_FROM_SUBNET], [], "10.20.0.0/20", True,
                     id="every TCP port from a range covering the subnetwork"),
        pytest.param([EVERY_TCP_FROM_SUBNET], [], "10.30.0.0/20", False,
                     id="from a range that misses the subnetwork"),
        pytest.param([Rule("gcs", NET, ((6379, 6379),), source_tags=("ray-node",))],
                     ["ray-node"], "10.20.0.0/20", False,
                     id="the GCS port alone: Ray's nodes pick their other ports"),
    ],
)  # fmt: skip
def test_connected(rules: list[Rule], tags: list[str], subnet: str, together: bool) -> None:
    assert connected(rules, tags, subnet) is together


@pytest.mark.parametrize(
    ("rule", "applies"),
    [
        pytest.param(Rule("r", NET, ()), True, id="no targets: every instance"),
        pytest.param(Rule("r", NET, (), target_tags=("ray-node",)), True, id="the pool's tag"),
        pytest.param(Rule("r", NET, (), target_tags=("web",)), False, id="another tag"),
        pytest.param(Rule("r", NET, (), target_accounts=("ray@p.iam",)), True,
                     id="the pool's service account"),
        pytest.param(Rule("r", NET, (), target_accounts=("web@p.iam",)), False,
                     id="another service account"),
    ],
)  # fmt: skip
def test_a_rule_applies_to_the_pools_instances(rule: Rule, applies: bool) -> None:
    assert rule.applies(["ray-node"], "ray@p.iam") is applies


@pytest.mark.parametrize(
    ("made", "link"),
    [
        pytest.param(network_link("p", "ray"), "projects/p/global/networks/ray", id="network"),
        pytest.param(network_link("p", "projects/h/global/networks/n"),
                     "projects/h/global/networks/n", id="a network link as given"),
        pytest.param(subnetwork_link("p", "us-east1", "s"),
                     "projects/p/regions/us-east1/subnetworks/s", id="subnetwork"),
        pytest.param(subnetwork_link("p", "us-east1", "regions/r/subnetworks/s"),
                     "regions/r/subnetworks/s", id="a subnetwork link as given"),
        pytest.param(image_link("ray-v1"), "global/images/ray-v1", id="image"),
        pytest.param(image_link("projects/p/global/images/family/f"),
                     "projects/p/global/images/family/f", id="an image link as given"),
    ],
)  # fmt: skip
def test_bare_names_become_links(made: str, link: str) -> None:
    assert made == link


@pytest.mark.parametrize(
    ("setup", "interface"),
    [
        pytest.param(GcpSetup(), {"network": "global/networks/default"},
                     id="neither: the default network"),
        pytest.param(GcpSetup(network="ray"), {"network": "projects/p/global/networks/ray"},
                     id="a network alone"),
        pytest.param(GcpSetup(subnetwork="ray-us"),
                     {"subnetwork": "projects/p/regions/us-east1/subnetworks/ray-us"},
                     id="a subnetwork alone, in the zone's region"),
        pytest.param(GcpSetup(network="projects/host/global/networks/shared", subnetwork="s"),
                     {"network": "projects/host/global/networks/shared",
                      "subnetwork": "projects/host/regions/us-east1/subnetworks/s"},
                     id="a shared VPC: the subnetwork in the host project"),
    ],
)  # fmt: skip
def test_a_launch_names_the_pools_network(setup: GcpSetup, interface: dict[str, str]) -> None:
    cloud = GcpCloud("p", "http://127.0.0.1:9", setup=setup)  # builds clients, calls nothing
    assert cloud._network("us-east1-b") == interface
