"""`meshctl pools check` on an AWS pool, against moto_server: a correct setup passes every
check; a missing image, a missing subnet, a security group that does not open the agent port
or lets the instances reach each other, a zone outside the region and a zero GPU quota each
fail their check with the fix, and nothing is ever launched. A launch takes the pool's subnet,
security groups and instance profile.

moto serves no EC2 quotas: the tests' proxy answers GetServiceQuota for the ones a test sets
(``MotoServer.set_quota``), and a quota not set is ``skip`` on an emulated pool."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest
from typer.testing import CliRunner

from meshctl.cli.app import app
from meshctl.clouds.aws import AwsCloud, AwsSetup
from meshctl.clouds.aws_preflight import preflight
from meshctl.clouds.base import LaunchRequest
from meshctl.model.mesh import AwsPool
from tests.emulators.aws import MotoServer

pytestmark = pytest.mark.integration

REGION = "us-east-1"
G_ON_DEMAND, G_SPOT, STANDARD = "L-DB2E81BA", "L-3819A6DF", "L-1216C47A"


@dataclass(frozen=True)
class Account:
    """What a platform engineer set up in the account for the pool."""

    image: str
    subnets: tuple[str, str]  # us-east-1a, us-east-1b
    group: str  # opens 8265 and 9109 to the VPC, and everything between its members
    closed_group: str  # opens 8265 only, and nothing between members
    profile: str
    ec2: Any


@pytest.fixture(scope="module")
def account(moto: MotoServer) -> Iterator[Account]:
    with pytest.MonkeyPatch.context() as env:
        env.setenv("AWS_ACCESS_KEY_ID", "testing")
        env.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        ec2 = boto3.client("ec2", region_name=REGION, endpoint_url=moto.moto)
        vpc = ec2.create_vpc(CidrBlock="10.20.0.0/16")["Vpc"]["VpcId"]
        subnets = tuple(
            ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.20.{n}.0/24", AvailabilityZone=zone)[
                "Subnet"
            ]["SubnetId"]
            for n, zone in enumerate(("us-east-1a", "us-east-1b"))
        )
        group = _group(ec2, vpc, "ray", [8265, 9109], between=True)
        closed = _group(ec2, vpc, "closed", [8265], between=False)
        [image] = ec2.describe_images(Owners=["amazon"])["Images"][:1]
        iam = boto3.client("iam", region_name=REGION, endpoint_url=moto.moto)
        iam.create_instance_profile(InstanceProfileName="meshctl-node")
        moto.set_quota(G_ON_DEMAND, 64)
        moto.set_quota(G_SPOT, 64)
        moto.set_quota(STANDARD, 32)
        yield Account(image["ImageId"], subnets, group, closed, "meshctl-node", ec2)  # type: ignore[arg-type]


def _group(ec2: Any, vpc: str, name: str, ports: list[int], between: bool) -> str:
    group = str(ec2.create_security_group(GroupName=name, Description=name, VpcId=vpc)["GroupId"])
    rules: list[dict[str, Any]] = [
        {"IpProtocol": "tcp", "FromPort": p, "ToPort": p, "IpRanges": [{"CidrIp": "10.20.0.0/16"}]}
        for p in ports
    ]
    if between:
        rules.append({"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": group}]})
    ec2.authorize_security_group_ingress(GroupId=group, IpPermissions=rules)
    return group


def pool(moto: MotoServer, account: Account, **changes: Any) -> AwsPool:
    fields: dict[str, Any] = {
        "name": "aws-burst",
        "provider": "aws",
        "region": REGION,
        "zones": ["us-east-1a", "us-east-1b"],
        "endpoint_url": moto.endpoint,
        "image": account.image,
        "subnets": list(account.subnets),
        "security_groups": [account.group],
        "instance_profile": account.profile,
        "head_node_type": "m7i.large",
        "max_nodes": 4,
        "node_types": [{"name": "g6.xlarge", "max_nodes": 4, "spot": True},
                       {"name": "g6e.12xlarge", "max_nodes": 1}],
    }  # fmt: skip
    return AwsPool.model_validate(fields | changes)


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")


def checks(moto: MotoServer, account: Account, **changes: Any) -> dict[str, Any]:
    subject = pool(moto, account, **changes)
    cloud = AwsCloud(REGION, moto.endpoint, setup=None)
    return {c.name: c for c in preflight(subject, cloud)}


def instances(account: Account) -> list[Any]:
    reply = account.ec2.describe_instances(
        Filters=[{"Name": "instance-state-name", "Values": ["pending", "running"]}]
    )
    return [i for r in reply["Reservations"] for i in r["Instances"]]


def test_a_correct_setup_passes_every_check_and_launches_nothing(
    moto: MotoServer, account: Account, aws_env: None
) -> None:
    found = checks(moto, account)
    assert list(found) == ["credentials", "zones", "image", "subnets", "security groups",
                           "instance types", "GPU quota"]  # fmt: skip
    assert {c.result for c in found.values()} == {"pass"}, found
    # g6.xlarge spot: 4 x 4 vCPUs; g6e.12xlarge: 1 x 48; the head m7i.large: 2
    assert found["GPU quota"].detail == (
        f"{STANDARD} 2/32 vCPUs, {G_SPOT} 16/64 vCPUs, {G_ON_DEMAND} 48/64 vCPUs"
    )
    assert instances(account) == []


CASES = [
    ("image", {"image": "ami-0000000000000dead"}, "not found or not readable", "copy the image"),
    ("subnets", {"subnets": ["subnet-00000000dead"]}, "InvalidSubnetID", "existing subnet ids"),
    ("subnets", {"zones": ["us-east-1a", "us-east-1c"]}, "no subnet in us-east-1c",
     "add a subnet"),
    ("zones", {"zones": ["us-east-1a", "us-east-1q"]}, "us-east-1q not available",
     "set zones to some of"),
    ("security groups", {"security_groups": ["closed"]}, "tcp 9109 not open to 10.20.0.0/16",
     "--port 9109 --cidr 10.20.0.0/16"),
    ("security groups", {"security_groups": ["closed"], "agents": {"port": 8265}},
     "cannot reach each other", "--protocol -1 --source-group"),
    ("security groups", {"controller_cidr": "192.168.7.0/24"},
     "tcp 8265, 9109 not open to 192.168.7.0/24", "--cidr 192.168.7.0/24"),
    ("instance types", {"head_node_type": "m7i.nonesuch"}, "m7i.nonesuch not offered",
     "pick other types or zones"),
    ("GPU quota", {"max_nodes": 16, "node_types": [{"name": "g6e.12xlarge", "max_nodes": 2}]},
     f"({G_ON_DEMAND}) is 64 vCPUs, needs 96", "request an increase"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("check", "changes", "detail", "fix"),
    CASES,
    ids=["an image that does not exist", "a subnet that does not exist",
         "a zone without a subnet", "a zone outside the region",
         "a security group closed to the agent port",
         "instances that cannot reach each other", "a controller outside the VPC",
         "an instance type not offered", "a GPU quota too small"],
)  # fmt: skip
def test_a_broken_setup_fails_its_check_with_the_fix(
    moto: MotoServer,
    account: Account,
    aws_env: None,
    check: str,
    changes: dict[str, Any],
    detail: str,
    fix: str,
) -> None:
    if changes.get("security_groups") == ["closed"]:
        changes = changes | {"security_groups": [account.closed_group]}
    found = checks(moto, account, **changes)[check]
    assert found.result == "fail"
    assert detail in found.detail
    assert fix in found.fix
    assert instances(account) == []


def test_a_quota_the_endpoint_does_not_serve_is_skipped_on_an_emulated_pool(
    moto: MotoServer, account: Account, aws_env: None
) -> None:
    found = checks(moto, account, node_types=[{"name": "p5.48xlarge", "max_nodes": 1}])
    assert found["GPU quota"].result == "skip"
    assert "serves no EC2 quota L-417A185B" in found["GPU quota"].detail


def test_pools_check_prints_a_line_per_check_and_exits_1_on_a_failure(
    moto: MotoServer, account: Account, aws_env: None, cli: CliRunner, tmp_path: Path
) -> None:
    good = pool(moto, account).model_dump(exclude_defaults=True)
    bad = pool(moto, account, name="no-image", image="ami-0000000000000dead")
    doc = {"apiVersion": "meshctl/v1", "kind": "Mesh", "metadata": {"name": "m"},
           "spec": {"pools": [good, bad.model_dump(exclude_defaults=True)]}}  # fmt: skip
    mesh = tmp_path / "mesh.yaml"
    mesh.write_text(json.dumps(doc))
    passed = cli.invoke(app, ["--mesh", str(mesh), "pools", "check", "aws-burst", "-o", "json"])
    assert passed.exit_code == 0, passed.output
    [row] = json.loads(passed.stdout)
    assert (row["available"], row["reason"]) == (True, None)
    assert [c["result"] for c in row["checks"]] == ["pass"] * 7
    failed = cli.invoke(app, ["--mesh", str(mesh), "pools", "check"])
    assert failed.exit_code == 1
    assert "FAIL" in failed.stdout
    assert "copy the image" in failed.stdout
    assert failed.stderr.splitlines()[-1] == "error: 1 of 2 pools unavailable: no-image"
    unknown = cli.invoke(app, ["--mesh", str(mesh), "pools", "check", "nope"])
    assert unknown.exit_code == 2
    assert "pool 'nope': not in the mesh; pools: aws-burst, no-image" in unknown.stderr
    assert instances(account) == []


def test_a_launch_takes_the_pool_s_subnet_security_groups_and_instance_profile(
    moto: MotoServer, account: Account, aws_env: None
) -> None:
    setup = AwsSetup(account.image, account.subnets, (account.group,), account.profile)
    cloud = AwsCloud(REGION, moto.endpoint, setup=setup)
    request = LaunchRequest("m", "aws-burst", "g6.xlarge", 1, "r-setup", ("us-east-1b",))
    result = cloud.launch(request)
    assert result.ok, result.errors
    [raw] = [i for i in instances(account) if i["InstanceId"] == result.instances[0].id]
    assert raw["SubnetId"] == account.subnets[1]  # the pool's subnet in us-east-1b
    assert [g["GroupId"] for g in raw["SecurityGroups"]] == [account.group]
    assert raw["IamInstanceProfile"]["Arn"].endswith("/meshctl-node")
    assert raw["ImageId"] == account.image
    assert cloud.terminate([raw["InstanceId"]], "r-setup-down") == []
