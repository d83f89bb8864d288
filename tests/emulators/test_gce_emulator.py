"""The GCE emulator, driven through the real google-cloud-compute client (REST transport).

These pin down both the emulator and how the client library behaves against it: which
exception each failure becomes, and that a 429 is not retried unless the caller asks.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

import pytest
from google.api_core import exceptions as gexc
from google.api_core.retry import Retry, if_exception_type
from google.auth.credentials import AnonymousCredentials
from google.cloud import compute_v1

from tests.emulators.gce import GceEmulator
from tests.emulators.gce_resources import LINK

pytestmark = pytest.mark.integration
T = TypeVar("T")

PROJECT, ZONE, OTHER_ZONE = "meshctl-test", "us-central1-a", "europe-west4-b"


@dataclass
class Clients:
    instances: compute_v1.InstancesClient
    operations: compute_v1.ZoneOperationsClient
    machine_types: compute_v1.MachineTypesClient
    accelerator_types: compute_v1.AcceleratorTypesClient


@pytest.fixture
def gce() -> Iterator[GceEmulator]:
    with GceEmulator() as emulator:
        yield emulator


@pytest.fixture
def gcp(gce: GceEmulator) -> Clients:
    kwargs = {
        "credentials": AnonymousCredentials(),
        "client_options": {"api_endpoint": gce.endpoint},  # "http://127.0.0.1:PORT"
        "transport": "rest",
    }
    return Clients(
        compute_v1.InstancesClient(**kwargs),
        compute_v1.ZoneOperationsClient(**kwargs),
        compute_v1.MachineTypesClient(**kwargs),
        compute_v1.AcceleratorTypesClient(**kwargs),
    )


def _instance(
    name: str, machine: str = "g2-standard-8", zone: str = ZONE, spot: bool = False, **labels: str
) -> compute_v1.Instance:
    return compute_v1.Instance(
        name=name,
        machine_type=f"zones/{zone}/machineTypes/{machine}",
        labels=labels,
        scheduling=compute_v1.Scheduling(provisioning_model="SPOT" if spot else "STANDARD"),
    )


def _insert(
    gcp: Clients, inst: compute_v1.Instance, zone: str = ZONE, request_id: str | None = None
) -> compute_v1.Operation:
    request = compute_v1.InsertInstanceRequest(
        project=PROJECT, zone=zone, instance_resource=inst, request_id=request_id
    )
    return gcp.instances.insert(request=request)


def _names(gcp: Clients, zone: str = ZONE, **kwargs: object) -> list[str]:
    request = compute_v1.ListInstancesRequest(project=PROJECT, zone=zone, **kwargs)
    return [i.name for i in gcp.instances.list(request=request)]


def test_insert_creates_a_spot_instance_with_labels_accelerators_and_startup_script(
    gce: GceEmulator, gcp: Clients
) -> None:
    inst = compute_v1.Instance(
        name="worker-1",
        machine_type=f"https://www.googleapis.com/compute/v1/projects/{PROJECT}/zones/{ZONE}/machineTypes/g2-standard-8",
        labels={"meshctl-pool": "gcp-l4", "meshctl-mesh": "m1"},
        guest_accelerators=[
            compute_v1.AcceleratorConfig(
                accelerator_type=f"zones/{ZONE}/acceleratorTypes/nvidia-l4", accelerator_count=1
            )
        ],
        scheduling=compute_v1.Scheduling(
            provisioning_model="SPOT", instance_termination_action="DELETE"
        ),
        metadata=compute_v1.Metadata(
            items=[compute_v1.Items(key="startup-script", value="#!/bin/sh\nray start")]
        ),
        disks=[compute_v1.AttachedDisk(boot=True, auto_delete=True)],
        network_interfaces=[compute_v1.NetworkInterface(network="global/networks/default")],
    )
    op = _insert(gcp, inst, request_id=str(uuid.uuid4()))
    assert op.result(timeout=10) is None  # already DONE: result() makes no further request
    assert op.status == compute_v1.Operation.Status.DONE
    assert op.operation_type == "insert"
    assert op.target_link.endswith(f"/projects/{PROJECT}/zones/{ZONE}/instances/worker-1")
    verb, path, query = gce.requests[-1]
    assert (verb, path) == ("POST", f"/compute/v1/projects/{PROJECT}/zones/{ZONE}/instances")
    assert "requestId" in query

    got = gcp.instances.get(project=PROJECT, zone=ZONE, instance="worker-1")
    assert got.status == "RUNNING"
    assert int(got.id) > 0
    assert got.zone.endswith(f"/zones/{ZONE}")
    assert got.machine_type.endswith(f"/zones/{ZONE}/machineTypes/g2-standard-8")
    assert dict(got.labels) == {"meshctl-pool": "gcp-l4", "meshctl-mesh": "m1"}
    assert got.scheduling.provisioning_model == "SPOT"
    assert got.scheduling.instance_termination_action == "DELETE"
    [accel] = got.guest_accelerators
    assert accel.accelerator_type.endswith("/acceleratorTypes/nvidia-l4")
    assert accel.accelerator_count == 1
    assert got.metadata.items[0].key == "startup-script"
    assert got.network_interfaces[0].network_i_p.startswith("10.128.")
    assert datetime.fromisoformat(got.creation_timestamp).tzinfo is not None
    assert got.self_link.endswith(f"/zones/{ZONE}/instances/worker-1")
    assert [i["name"] for i in gce.instances()] == ["worker-1"]


def test_accelerator_optimized_machine_types_report_their_gpus(gcp: Clients) -> None:
    _insert(gcp, _instance("big", machine="a3-highgpu-8g")).result()
    [accel] = gcp.instances.get(project=PROJECT, zone=ZONE, instance="big").guest_accelerators
    assert accel.accelerator_type.endswith("/nvidia-h100-80gb")
    assert accel.accelerator_count == 8


def test_insert_with_the_same_request_id_is_idempotent(gce: GceEmulator, gcp: Clients) -> None:
    request_id = str(uuid.uuid4())
    first = _insert(gcp, _instance("w"), request_id=request_id)
    again = _insert(gcp, _instance("w"), request_id=request_id)
    again.result()
    assert again.name == first.name
    assert len(gce.instances()) == 1


def test_concurrent_inserts_are_safe(gce: GceEmulator, gcp: Clients) -> None:
    request_id = str(uuid.uuid4())
    with ThreadPoolExecutor(8) as pool:
        ops = list(
            pool.map(lambda _: _insert(gcp, _instance("same"), request_id=request_id), range(8))
        )
        list(pool.map(lambda n: _insert(gcp, _instance(f"w{n}")).result(), range(8)))
    assert len({op.name for op in ops}) == 1
    assert len(gce.instances()) == 9


def test_insert_of_an_existing_name_is_a_409_conflict(gcp: Clients) -> None:
    _insert(gcp, _instance("w"), request_id=str(uuid.uuid4())).result()
    with pytest.raises(gexc.Conflict) as caught:  # 409 maps to Conflict, not AlreadyExists
        _insert(gcp, _instance("w"), request_id=str(uuid.uuid4()))
    assert caught.value.code == 409
    assert caught.value.errors[0]["reason"] == "alreadyExists"


def test_insert_of_an_unknown_machine_type_is_a_400(gcp: Clients) -> None:
    with pytest.raises(gexc.BadRequest) as caught:
        _insert(gcp, _instance("w", machine="n9-imaginary-4"))
    assert caught.value.errors[0]["reason"] == "invalid"


def test_list_filters_by_label_and_pages(gcp: Clients) -> None:
    for name, pool in [("a1", "a"), ("a2", "a"), ("b1", "b")]:
        _insert(gcp, _instance(name, pool=pool, mesh="m1")).result()
    _insert(gcp, _instance("elsewhere", zone=OTHER_ZONE, pool="a"), zone=OTHER_ZONE).result()

    assert _names(gcp) == ["a1", "a2", "b1"]
    assert _names(gcp, filter='labels.pool = "a"') == ["a1", "a2"]
    assert _names(gcp, filter="labels.pool=b") == ["b1"]
    assert _names(gcp, filter='(labels.pool = "a") (labels.mesh = "m1")') == ["a1", "a2"]
    assert _names(gcp, filter='labels.pool = "a" AND name != "a1"') == ["a2"]
    assert _names(gcp, filter='labels.pool = "zzz"') == []
    assert _names(gcp, max_results=1) == ["a1", "a2", "b1"]  # the pager follows nextPageToken
    with pytest.raises(gexc.BadRequest):
        _names(gcp, filter='labels.pool = "a" OR labels.pool = "b"')


def test_aggregated_list_groups_instances_by_zone(gcp: Clients) -> None:
    _insert(gcp, _instance("a", pool="x")).result()
    _insert(gcp, _instance("b", zone=OTHER_ZONE, pool="x"), zone=OTHER_ZONE).result()
    _insert(gcp, _instance("c", pool="y")).result()
    request = compute_v1.AggregatedListInstancesRequest(project=PROJECT, filter="labels.pool=x")
    by_zone = {
        scope: [i.name for i in scoped.instances]
        for scope, scoped in gcp.instances.aggregated_list(request=request)
    }
    assert by_zone == {f"zones/{ZONE}": ["a"], f"zones/{OTHER_ZONE}": ["b"]}


def test_delete_removes_the_instance_and_is_idempotent_by_request_id(
    gce: GceEmulator, gcp: Clients
) -> None:
    _insert(gcp, _instance("w")).result()
    request = compute_v1.DeleteInstanceRequest(
        project=PROJECT, zone=ZONE, instance="w", request_id=str(uuid.uuid4())
    )
    op = gcp.instances.delete(request=request)
    op.result()
    assert op.operation_type == "delete"
    assert gcp.instances.delete(request=request).name == op.name  # a retry, not a 404
    assert gce.instances() == []
    assert _names(gcp) == []
    with pytest.raises(gexc.NotFound):
        gcp.instances.get(project=PROJECT, zone=ZONE, instance="w")
    with pytest.raises(gexc.NotFound) as caught:
        gcp.instances.delete(project=PROJECT, zone=ZONE, instance="w")
    assert caught.value.errors[0]["reason"] == "notFound"


def test_zone_operations_get_and_wait_return_the_done_operation(gcp: Clients) -> None:
    op = _insert(gcp, _instance("w"))
    waited = gcp.operations.wait(project=PROJECT, zone=ZONE, operation=op.name)
    fetched = gcp.operations.get(project=PROJECT, zone=ZONE, operation=op.name)
    assert waited.status == fetched.status == compute_v1.Operation.Status.DONE
    assert waited.target_link == op.target_link
    with pytest.raises(gexc.NotFound):
        gcp.operations.get(project=PROJECT, zone=ZONE, operation="operation-missing")


def test_machine_and_accelerator_types_come_from_the_catalog(gcp: Clients) -> None:
    machines = {m.name: m for m in gcp.machine_types.list(project=PROJECT, zone=ZONE)}
    assert set(machines) == {
        "g2-standard-8", "a2-highgpu-1g", "a3-highgpu-8g", "n2-standard-4", "a2-ultragpu-1g"
    }  # fmt: skip
    a3 = machines["a3-highgpu-8g"]
    assert (a3.guest_cpus, a3.memory_mb) == (208, 1904640)
    assert a3.zone == ZONE
    assert [(a.guest_accelerator_type, a.guest_accelerator_count) for a in a3.accelerators] == [
        ("nvidia-h100-80gb", 8)
    ]
    accels = {a.name: a for a in gcp.accelerator_types.list(project=PROJECT, zone=ZONE)}
    assert set(accels) == {"nvidia-l4", "nvidia-tesla-a100", "nvidia-h100-80gb", "nvidia-a100-80gb"}
    assert accels["nvidia-h100-80gb"].maximum_cards_per_instance == 8


def test_a_stock_out_raises_service_unavailable_from_operation_result(
    gce: GceEmulator, gcp: Clients
) -> None:
    gce.fail_zone(ZONE)
    op = _insert(gcp, _instance("w"))  # the insert call itself succeeds
    with pytest.raises(gexc.ServiceUnavailable) as caught:
        op.result()
    err = caught.value
    assert err.code == 503
    assert err.message == "SERVICE UNAVAILABLE"
    assert err.errors[0].code == "ZONE_RESOURCE_POOL_EXHAUSTED"  # compute_v1.Errors, not a dict
    assert "does not have enough resources" in err.errors[0].message
    assert op.error.errors[0].code == "ZONE_RESOURCE_POOL_EXHAUSTED"
    assert op.http_error_status_code == 503
    assert gce.instances() == []

    _insert(gcp, _instance("w", zone=OTHER_ZONE), zone=OTHER_ZONE).result()  # other zones work
    gce.heal(ZONE)
    _insert(gcp, _instance("w")).result()


def test_a_zone_reason_can_be_the_with_details_variant(gce: GceEmulator, gcp: Clients) -> None:
    gce.fail_zone(ZONE, reason="ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS")
    with pytest.raises(gexc.ServiceUnavailable) as caught:
        _insert(gcp, _instance("w")).result()
    assert caught.value.errors[0].code == "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS"


def test_quota_in_the_operation_raises_forbidden(gce: GceEmulator, gcp: Clients) -> None:
    gce.quota_exceeded(ZONE)
    with pytest.raises(gexc.Forbidden) as caught:
        _insert(gcp, _instance("w")).result()
    assert caught.value.code == 403
    assert caught.value.errors[0].code == "QUOTA_EXCEEDED"
    assert "NVIDIA_L4_GPUS" in caught.value.errors[0].message
    assert gce.instances() == []


def test_quota_refused_at_once_raises_forbidden_from_insert(gce: GceEmulator, gcp: Clients) -> None:
    gce.quota_exceeded(ZONE, metric="GPUS_ALL_REGIONS", immediate=True)
    with pytest.raises(gexc.Forbidden) as caught:
        _insert(gcp, _instance("w"))
    assert caught.value.errors[0]["reason"] == "quotaExceeded"


def test_a_429_is_not_retried_by_default(gce: GceEmulator, gcp: Clients) -> None:
    _insert(gcp, _instance("w")).result()
    gce.throttle(1)
    sent = len(gce.requests)
    with pytest.raises(gexc.TooManyRequests) as caught:
        gcp.instances.get(project=PROJECT, zone=ZONE, instance="w")
    assert caught.value.errors[0]["reason"] == "rateLimitExceeded"
    assert len(gce.requests) == sent + 1  # one attempt: the default retry covers only 503/504
    assert gcp.instances.get(project=PROJECT, zone=ZONE, instance="w").name == "w"


def test_a_429_is_retried_when_the_caller_asks(gce: GceEmulator, gcp: Clients) -> None:
    _insert(gcp, _instance("w")).result()
    gce.throttle(2)
    retry = Retry(
        predicate=if_exception_type(gexc.TooManyRequests), initial=0.01, maximum=0.05, timeout=10
    )
    got = gcp.instances.get(project=PROJECT, zone=ZONE, instance="w", retry=retry)
    assert got.name == "w"
    assert sum(1 for _, path, _ in gce.requests if path.endswith("/instances/w")) == 3  # 2 + 1


def test_preempting_a_spot_instance_terminates_it(gce: GceEmulator, gcp: Clients) -> None:
    _insert(gcp, _instance("spot", spot=True)).result()
    gce.preempt("spot")
    got = gcp.instances.get(project=PROJECT, zone=ZONE, instance="spot")
    assert got.status == "TERMINATED"
    assert got.scheduling.instance_termination_action == "STOP"  # GCE's default for SPOT
    assert datetime.fromisoformat(got.last_stop_timestamp) >= datetime.fromisoformat(
        got.creation_timestamp
    )
    request = compute_v1.ListZoneOperationsRequest(
        project=PROJECT, zone=ZONE, filter='operationType = "compute.instances.preempted"'
    )
    [op] = gcp.operations.list(request=request)
    assert op.target_link == got.self_link


def test_preempting_a_spot_instance_with_delete_action_removes_it(
    gce: GceEmulator, gcp: Clients
) -> None:
    inst = _instance("spot", spot=True)
    inst.scheduling.instance_termination_action = "DELETE"
    _insert(gcp, inst).result()
    gce.preempt("spot")
    with pytest.raises(gexc.NotFound):
        gcp.instances.get(project=PROJECT, zone=ZONE, instance="spot")


def test_only_spot_instances_can_be_preempted(gce: GceEmulator, gcp: Clients) -> None:
    _insert(gcp, _instance("standard")).result()
    with pytest.raises(ValueError, match="not a SPOT"):
        gce.preempt("standard")


def test_an_unserved_call_answers_501(gcp: Clients) -> None:
    with pytest.raises(gexc.MethodNotImplemented):
        gcp.instances.start(project=PROJECT, zone=ZONE, instance="w")


# --- the project's resources (what `meshctl pools check` reads) ---------------------------------


def _client(gce: GceEmulator, kind: type[T]) -> T:
    return kind(  # type: ignore[call-arg]
        credentials=AnonymousCredentials(),
        client_options={"api_endpoint": gce.endpoint},
        transport="rest",
    )


def test_a_region_reports_its_zones_and_quotas_which_can_be_set(gce: GceEmulator) -> None:
    regions = _client(gce, compute_v1.RegionsClient)
    region = regions.get(project=PROJECT, region="us-central1")
    assert [z.rsplit("/", 1)[-1] for z in region.zones] == [
        "us-central1-a", "us-central1-b", "us-central1-c", "us-central1-f"
    ]  # fmt: skip
    quotas = {q.metric: (q.limit, q.usage) for q in region.quotas}
    assert quotas["NVIDIA_L4_GPUS"][0] > 0
    assert quotas["PREEMPTIBLE_NVIDIA_H100_GPUS"][0] > 0
    gce.set_quota(PROJECT, "us-central1", "NVIDIA_L4_GPUS", 8, usage=6)
    gce.set_quota(PROJECT, None, "GPUS_ALL_REGIONS", 0)
    region = regions.get(project=PROJECT, region="us-central1")
    assert {q.metric: (q.limit, q.usage) for q in region.quotas}["NVIDIA_L4_GPUS"] == (8, 6)
    project = _client(gce, compute_v1.ProjectsClient).get(project=PROJECT)
    assert {q.metric: q.limit for q in project.quotas}["GPUS_ALL_REGIONS"] == 0
    other = regions.get(project="another-project", region="us-central1")  # quotas per project
    assert {q.metric: q.limit for q in other.quotas}["NVIDIA_L4_GPUS"] > 8
    with pytest.raises(gexc.NotFound):
        regions.get(project=PROJECT, region="mars-north1")


def test_a_zone_names_its_region_and_an_unknown_one_is_404(gce: GceEmulator) -> None:
    zones = _client(gce, compute_v1.ZonesClient)
    assert zones.get(project=PROJECT, zone="europe-west4-b").region.endswith(
        "/regions/europe-west4"
    )
    with pytest.raises(gexc.NotFound):
        zones.get(project=PROJECT, zone="us-central1-z")


def test_images_by_name_and_by_family_in_any_project(gce: GceEmulator) -> None:
    images = _client(gce, compute_v1.ImagesClient)
    gce.add_image("debian-cloud", "debian-12-v1", family="debian-12")
    gce.add_image("debian-cloud", "debian-12-v2", family="debian-12")
    gce.add_image(PROJECT, "ray-gpu")
    assert images.get_from_family(project="debian-cloud", family="debian-12").name == "debian-12-v2"
    got = images.get(project=PROJECT, image="ray-gpu")
    assert (got.status, got.self_link.endswith(f"/projects/{PROJECT}/global/images/ray-gpu")) == (
        "READY", True
    )  # fmt: skip
    default = images.get_from_family(
        project="deeplearning-platform-release", family="common-cu124-debian-11"
    )
    assert default.family == "common-cu124-debian-11"  # what a launch boots when none is set
    with pytest.raises(gexc.NotFound):
        images.get(project="debian-cloud", image="ray-gpu")
    with pytest.raises(gexc.NotFound):
        images.get_from_family(project=PROJECT, family="nope")


def test_networks_subnetworks_and_the_default_network(gce: GceEmulator) -> None:
    networks = _client(gce, compute_v1.NetworksClient)
    subnetworks = _client(gce, compute_v1.SubnetworksClient)
    assert networks.get(project=PROJECT, network="default").auto_create_subnetworks
    default = subnetworks.get(project=PROJECT, region="us-central1", subnetwork="default")
    assert default.ip_cidr_range == "10.128.0.0/20"
    gce.add_network(PROJECT, "ray")
    gce.add_subnetwork(PROJECT, "us-east1", "ray-east", "ray", "10.20.0.0/20")
    got = subnetworks.get(project=PROJECT, region="us-east1", subnetwork="ray-east")
    assert got.network.endswith(f"/projects/{PROJECT}/global/networks/ray")
    assert got.ip_cidr_range == "10.20.0.0/20"
    assert networks.get(project=PROJECT, network="ray").subnetworks == [got.self_link]
    with pytest.raises(gexc.NotFound):
        subnetworks.get(project=PROJECT, region="us-central1", subnetwork="ray-east")
    with pytest.raises(gexc.NotFound):
        networks.get(project=PROJECT, network="nope")


def test_firewall_rules_list_with_the_fields_they_were_made_with(gce: GceEmulator) -> None:
    gce.add_network(PROJECT, "ray")
    gce.add_firewall(
        PROJECT, "ray-agent", network="ray",
        allowed=[{"IPProtocol": "tcp", "ports": ["8265", "9000-9200"]}],
        sourceRanges=["10.8.0.0/16"], targetTags=["ray-node"],
    )  # fmt: skip
    rules = {r.name: r for r in _client(gce, compute_v1.FirewallsClient).list(project=PROJECT)}
    assert set(rules) == {"default-allow-internal", "default-allow-ssh", "ray-agent"}
    rule = rules["ray-agent"]
    assert rule.network.endswith(f"/projects/{PROJECT}/global/networks/ray")
    assert (rule.direction, rule.disabled) == ("INGRESS", False)
    assert [(a.I_p_protocol, list(a.ports)) for a in rule.allowed] == [
        ("tcp", ["8265", "9000-9200"])
    ]
    assert (list(rule.source_ranges), list(rule.target_tags)) == (["10.8.0.0/16"], ["ray-node"])
    assert list(rules["default-allow-internal"].source_ranges) == ["10.128.0.0/9"]
    with pytest.raises(TypeError, match="sourceRange"):
        gce.add_firewall(PROJECT, "typo", sourceRange=["10.0.0.0/8"])


def test_a_machine_type_is_got_only_in_the_zones_that_offer_it(
    gce: GceEmulator, gcp: Clients
) -> None:
    got = gcp.machine_types.get(project=PROJECT, zone=ZONE, machine_type="a2-ultragpu-1g")
    assert (got.name, got.guest_cpus) == ("a2-ultragpu-1g", 12)
    assert gcp.machine_types.get(project=PROJECT, zone=ZONE, machine_type="n2-standard-4")
    with pytest.raises(gexc.NotFound):
        gcp.machine_types.get(project=PROJECT, zone="us-central1-b", machine_type="a2-ultragpu-1g")
    with pytest.raises(gexc.NotFound):
        gcp.machine_types.get(project=PROJECT, zone=ZONE, machine_type="n9-imaginary-4")
    with pytest.raises(gexc.BadRequest):  # nor can it be launched there
        _insert(gcp, _instance("w", "a2-ultragpu-1g", "us-central1-b"), zone="us-central1-b")


def test_insert_keeps_network_interfaces_tags_service_accounts_and_disks(
    gce: GceEmulator, gcp: Clients
) -> None:
    gce.add_network(PROJECT, "ray")
    gce.add_subnetwork(PROJECT, "us-central1", "ray-us", "ray", "10.20.0.0/20")
    inst = _instance("w")
    inst.network_interfaces = [
        compute_v1.NetworkInterface(
            network=f"projects/{PROJECT}/global/networks/ray",
            subnetwork=f"projects/{PROJECT}/regions/us-central1/subnetworks/ray-us",
        )
    ]
    inst.tags = compute_v1.Tags(items=["ray-node"])
    inst.service_accounts = [compute_v1.ServiceAccount(email="ray@x.iam", scopes=["s"])]
    inst.disks = [
        compute_v1.AttachedDisk(
            boot=True,
            initialize_params=compute_v1.AttachedDiskInitializeParams(
                source_image="global/images/i"
            ),
        )
    ]
    _insert(gcp, inst).result()
    got = gcp.instances.get(project=PROJECT, zone=ZONE, instance="w")
    [nic] = got.network_interfaces
    assert nic.network == f"{LINK}projects/{PROJECT}/global/networks/ray"
    assert nic.subnetwork == f"{LINK}projects/{PROJECT}/regions/us-central1/subnetworks/ray-us"
    assert nic.network_i_p.startswith("10.20.")
    assert list(got.tags.items) == ["ray-node"]
    assert got.tags.fingerprint
    assert [(s.email, list(s.scopes)) for s in got.service_accounts] == [("ray@x.iam", ["s"])]
    assert got.disks[0].initialize_params.source_image == "global/images/i"


@pytest.mark.parametrize(
    ("interface", "error"),
    [
        pytest.param({"network": "global/networks/nope"}, gexc.NotFound, id="no such network"),
        pytest.param(
            {"subnetwork": "regions/us-central1/subnetworks/nope"}, gexc.NotFound,
            id="no such subnetwork",
        ),
        pytest.param(
            {"subnetwork": "regions/us-east1/subnetworks/default"}, gexc.BadRequest,
            id="a subnetwork of another region",
        ),
        pytest.param(
            {"network": "global/networks/ray"}, gexc.BadRequest,
            id="a custom network with no subnetwork in the region",
        ),
    ],
)  # fmt: skip
def test_insert_refuses_a_network_interface_that_cannot_be(
    gce: GceEmulator, gcp: Clients, interface: dict[str, str], error: type[Exception]
) -> None:
    gce.add_network(PROJECT, "ray")
    inst = _instance("w")
    inst.network_interfaces = [compute_v1.NetworkInterface(**interface)]
    with pytest.raises(error):
        _insert(gcp, inst)
    assert gce.instances() == []


def test_a_denied_project_cannot_read_its_resources(gce: GceEmulator) -> None:
    gce.deny(PROJECT)
    with pytest.raises(gexc.Forbidden):
        _client(gce, compute_v1.ProjectsClient).get(project=PROJECT)
    with pytest.raises(gexc.Forbidden):
        _client(gce, compute_v1.RegionsClient).get(project=PROJECT, region="us-central1")
