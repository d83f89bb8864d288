"""One contract, every provider: the fake, AWS (boto3 against moto_server) and GCP
(google-cloud-compute against the GCE emulator in tests/emulators)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from meshctl.clouds.base import Cloud, Instance, LaunchRequest, Unavailable
from meshctl.clouds.fake import FakeCloud
from tests.conftest import wait_until
from tests.emulators.aws import MotoServer
from tests.emulators.gce import GceEmulator

pytestmark = pytest.mark.integration


@dataclass
class Subject:
    cloud: Cloud
    zones: tuple[str, ...]
    node_type: str
    stock_out: Callable[[str], None]
    over_quota: Callable[[str], None]
    notice: Callable[[Instance], None]  # the provider gives a spot instance notice
    refused: Callable[[], Cloud]  # the same provider, with credentials it refuses
    refusal: str  # how check words that refusal


def _refused_fake() -> Cloud:
    cloud = FakeCloud()
    cloud.refuse("AuthFailure: refused")
    return cloud


def _fake(_: Any) -> Subject:
    cloud = FakeCloud()
    return Subject(
        cloud,
        ("z-a", "z-b"),
        "g6.xlarge",
        cloud.stock_out,
        cloud.over_quota,
        lambda i: cloud.notice(i.id),
        _refused_fake,
        "AuthFailure: refused",
    )


def _aws(request: pytest.FixtureRequest) -> Subject:
    from meshctl.clouds.aws import AwsCloud

    server: MotoServer = request.getfixturevalue("moto")
    server.faults.clear()
    server.refuse("AKIDREFUSED")
    monkeypatch: pytest.MonkeyPatch = request.getfixturevalue("monkeypatch")
    cloud = AwsCloud("us-east-1", endpoint_url=server.endpoint)

    def refused() -> Cloud:
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDREFUSED")
        return AwsCloud("us-east-1", endpoint_url=server.endpoint)

    return Subject(
        cloud,
        ("us-east-1a", "us-east-1b"),
        "g6.xlarge",
        server.stock_out,
        server.over_quota,
        lambda i: server.spot_notice(i.id),
        refused,
        "AuthFailure: AWS was not able to validate the provided access credentials",
    )


def _gcp(request: pytest.FixtureRequest) -> Subject:
    from meshctl.clouds.gcp import GcpCloud

    server: GceEmulator = request.getfixturevalue("gce")
    for zone in ("us-central1-a", "us-central1-b"):
        server.heal(zone)
    cloud = GcpCloud("meshctl-test", endpoint_url=server.endpoint)
    server.deny("meshctl-denied")
    return Subject(
        cloud,
        ("us-central1-a", "us-central1-b"),
        "g2-standard-8",
        server.fail_zone,
        server.quota_exceeded,
        lambda i: server.preempt(i.id.split("/", 1)[1], notice=True),
        lambda: GcpCloud("meshctl-denied", endpoint_url=server.endpoint),
        "Forbidden: Required permission for 'projects/meshctl-denied'",
    )


PROVIDERS = {"fake": _fake, "aws": _aws, "gcp": _gcp}


@pytest.fixture(params=sorted(PROVIDERS))
def subject(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Subject:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    return PROVIDERS[request.param](request)


_n = 0


def launch(
    subject: Subject, mesh: str = "m1", count: int = 1, spot: bool = False, rid: str | None = None
) -> Any:
    global _n
    _n += 1
    request = LaunchRequest(
        mesh,
        "burst",
        subject.node_type,
        count,
        rid or f"req-{_n}-{time.time_ns()}",
        subject.zones,
        spot,
        job="j1",
    )
    return request, subject.cloud.launch(request)


def listed(subject: Subject, mesh: str) -> list[Instance]:
    return subject.cloud.list_instances(mesh)


def test_launched_instances_are_listed_with_their_tags(subject: Subject) -> None:
    mesh = f"mesh-{time.time_ns()}"
    request, result = launch(subject, mesh, count=2)
    assert result.ok
    assert result.errors == ()
    assert len(result.instances) == 2
    found = {i.id: i for i in listed(subject, mesh)}
    assert set(found) == {i.id for i in result.instances}
    for instance in found.values():
        assert (instance.pool, instance.node_type, instance.zone) == (
            "burst",
            subject.node_type,
            subject.zones[0],
        )
        assert instance.request_id == request.request_id
        assert instance.labels["mesh"] == mesh
        assert instance.labels["job"] == "j1"
        assert instance.state in ("pending", "running")


def test_the_same_request_id_never_launches_twice(subject: Subject) -> None:
    mesh = f"mesh-{time.time_ns()}"
    request, first = launch(subject, mesh)
    again = subject.cloud.launch(request)
    assert {i.id for i in again.instances} == {i.id for i in first.instances}
    assert len(listed(subject, mesh)) == 1


def test_spot_is_asked_for_and_reported(subject: Subject) -> None:
    _, result = launch(subject, f"mesh-{time.time_ns()}", spot=True)
    assert [i.spot for i in result.instances] == [True]


def test_a_stock_out_fails_over_to_the_next_zone(subject: Subject) -> None:
    subject.stock_out(subject.zones[0])
    _, result = launch(subject, f"mesh-{time.time_ns()}")
    assert [i.zone for i in result.instances] == [subject.zones[1]]
    assert [(e.kind, e.zone) for e in result.errors] == [("capacity", subject.zones[0])]


def test_no_capacity_anywhere_is_an_error_per_zone_not_an_exception(subject: Subject) -> None:
    subject.stock_out(subject.zones[0])
    subject.over_quota(subject.zones[1])
    _, result = launch(subject, f"mesh-{time.time_ns()}")
    assert not result.ok
    assert [(e.kind, e.zone) for e in result.errors] == [
        ("capacity", subject.zones[0]),
        ("quota", subject.zones[1]),
    ]


def test_terminated_instances_leave_the_list_and_terminating_twice_is_fine(
    subject: Subject,
) -> None:
    mesh = f"mesh-{time.time_ns()}"
    _, result = launch(subject, mesh, count=2)
    ids = [i.id for i in result.instances]
    assert subject.cloud.terminate(ids[:1], "stop-1") == []
    assert subject.cloud.terminate(ids[:1], "stop-1") == []
    wait_until(  # eventually consistent
        "the terminated instance is still listed",
        lambda: {i.id for i in listed(subject, mesh)} == {ids[1]},
        30,
    )


def test_only_this_meshs_instances_are_listed(subject: Subject) -> None:
    mine, other = f"mine-{time.time_ns()}", f"other-{time.time_ns()}"
    launch(subject, mine)
    launch(subject, other)
    assert {i.labels["mesh"] for i in listed(subject, mine)} == {mine}


def test_a_spot_instance_given_notice_is_listed_interrupting(subject: Subject) -> None:
    mesh = f"mesh-{time.time_ns()}"
    _, result = launch(subject, mesh, count=2, spot=True)
    noticed, spared = result.instances
    subject.notice(noticed)
    states = {i.id: i.state for i in listed(subject, mesh)}
    assert states == {noticed.id: "interrupting", spared.id: "running"}
    assert subject.cloud.notice_s > 0


def test_check_passes_with_credentials_the_provider_accepts(subject: Subject) -> None:
    assert subject.cloud.check() is None


def test_refused_credentials_are_an_auth_error_with_a_short_reason(subject: Subject) -> None:
    cloud = subject.refused()
    error = cloud.check()
    assert error is not None
    assert (error.kind, error.message) == ("auth", subject.refusal)
    request = LaunchRequest("m", "burst", subject.node_type, 1, "r-refused", subject.zones)
    result = cloud.launch(request)  # errors as data, never an exception
    assert not result.ok
    assert [(e.kind, e.message) for e in result.errors] == [("auth", subject.refusal)]


def test_aws_without_credentials_is_unavailable_with_no_credentials(
    moto: MotoServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    from meshctl.clouds.aws import AwsCloud

    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # no instance role to ask for
    error = AwsCloud("us-east-1", endpoint_url=moto.endpoint).check()
    assert error is not None
    assert (error.kind, error.message) == ("auth", "no credentials")
    with pytest.raises(Unavailable, match=r"^no credentials: The config profile \(gone\)"):
        AwsCloud("us-east-1", endpoint_url=moto.endpoint, profile="gone")


def test_gcp_with_a_missing_credentials_file_is_unavailable(
    gce: GceEmulator, tmp_path: Any
) -> None:
    from meshctl.clouds.gcp import GcpCloud

    missing = tmp_path / "key.json"
    with pytest.raises(Unavailable) as raised:
        GcpCloud("meshctl-test", endpoint_url=gce.endpoint, credentials_file=str(missing))
    assert str(raised.value) == f"no credentials: {missing}: No such file or directory"


def test_gcp_throttling_is_retried_by_a_launch_and_fails_the_cycle_s_listing_at_once(
    gce: GceEmulator,
) -> None:
    """A launch (on the controller's worker thread) backs off and tries again (the client
    does not retry a 429 itself); a listing (the controller's cycle) fails at once, to be
    asked again next cycle, never holding the cycle up."""
    from google.api_core.exceptions import TooManyRequests

    from meshctl.clouds.gcp import GcpCloud

    cloud = GcpCloud("meshctl-test", endpoint_url=gce.endpoint)
    mesh = f"mesh-{time.time_ns()}"
    request = LaunchRequest(
        mesh, "burst", "g2-standard-8", 1, f"r-{time.time_ns()}", ("us-central1-a",)
    )
    gce.throttle(2)
    [instance] = cloud.launch(request).instances
    gce.throttle(1)
    with pytest.raises(TooManyRequests):
        cloud.list_instances(mesh)
    assert [i.id for i in cloud.list_instances(mesh)] == [instance.id]


def test_a_preempted_gcp_spot_instance_is_reported_so(gce: GceEmulator) -> None:
    from meshctl.clouds.gcp import GcpCloud

    cloud = GcpCloud("meshctl-test", endpoint_url=gce.endpoint)
    mesh = f"mesh-{time.time_ns()}"
    request = LaunchRequest(
        mesh, "burst", "g2-standard-8", 1, f"r-{time.time_ns()}", ("us-central1-a",), spot=True
    )
    [instance] = cloud.launch(request).instances
    gce.preempt(instance.id.split("/", 1)[1])
    assert [i.state for i in cloud.list_instances(mesh)] == ["preempted"]


def test_throttling_is_retried_by_the_fake_as_by_the_sdks() -> None:
    cloud = FakeCloud()
    cloud.throttle(3)
    result = cloud.launch(LaunchRequest("m", "p", "t", 1, "r", ("z",)))
    assert result.ok
