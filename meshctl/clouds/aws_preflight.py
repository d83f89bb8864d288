"""The preflight of an AWS pool (``meshctl pools check``): read-only EC2, STS and Service
Quotas calls, nothing launched. See ``meshctl.clouds.preflight`` for what a check says.

GPU quotas are vCPU quotas in AWS, one per instance family group and market: the need is
each node type's ``max_nodes`` (capped by the pool's) times its vCPUs, plus one head, summed
per quota code; the instance types' vCPUs come from ``DescribeInstanceTypes``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from meshctl.clouds.aws import AwsCloud, _code, _reason
from meshctl.clouds.preflight import (
    DASHBOARD_PORT,
    GCS_PORT,
    Check,
    failed,
    guarded,
    head_types,
    missing_ports,
    needed_per_quota,
    passed,
    settings,
    skipped,
)
from meshctl.model.mesh import AwsPool

# (on-demand, spot) quota codes of EC2's vCPU quotas, by instance family group
QUOTAS: dict[str, tuple[str, str]] = {
    "standard": ("L-1216C47A", "L-34B43A08"),  # A, C, D, H, I, M, R, T, Z
    "g": ("L-DB2E81BA", "L-3819A6DF"),  # G and VT
    "p": ("L-417A185B", "L-7212CCBC"),
}
QUOTA_NAMES = {
    "L-1216C47A": "Running On-Demand Standard instances",
    "L-34B43A08": "All Standard Spot Instance Requests",
    "L-DB2E81BA": "Running On-Demand G and VT instances",
    "L-3819A6DF": "All G and VT Spot Instance Requests",
    "L-417A185B": "Running On-Demand P instances",
    "L-7212CCBC": "All P Spot Instance Requests",
}
STANDARD = frozenset("acdhimrtz")


def quota_code(instance_type: str, spot: bool) -> str | None:
    """The vCPU quota an instance type counts against: g6.xlarge -> L-DB2E81BA (on demand);
    None for a family no quota here covers (inf, trn, f, x...)."""
    found = re.match(r"[a-z]+", instance_type)
    prefix = found.group(0) if found else ""
    group = "g" if prefix in ("g", "vt") else "p" if prefix == "p" else None
    if group is None and prefix in STANDARD:
        group = "standard"
    return QUOTAS[group][1 if spot else 0] if group else None


def preflight(pool: AwsPool, cloud: AwsCloud) -> list[Check]:
    """Every check of ``pool``, through ``cloud``'s session; nothing is launched."""
    found = settings(pool)
    identity = guarded("credentials", lambda: _credentials(cloud), _reason)
    found.append(identity)
    if not identity.ok:  # every other call would be refused the same way
        return found
    runs = Runs(pool, cloud)
    for name, check in runs.checks():
        found.append(guarded(name, check, _reason))
    return found


def _credentials(cloud: AwsCloud) -> Check:
    sts = cloud.session.client("sts", endpoint_url=cloud.endpoint_url)
    try:
        who = sts.get_caller_identity()
    except Exception as err:
        fix = "set AWS_PROFILE (or profile in mesh.yaml) to credentials of the account"
        return failed("credentials", _reason(err), fix)
    return passed("credentials", f"account {who.get('Account')} as {who.get('Arn')}")


class Runs:
    """The checks after the credentials, sharing what they look up (subnets, the VPC)."""

    def __init__(self, pool: AwsPool, cloud: AwsCloud) -> None:
        self.pool, self.cloud, self.ec2 = pool, cloud, cloud.ec2
        self.zones = list(pool.zones) or [f"{pool.region}a"]
        self._subnets: list[dict[str, Any]] | None = None

    def checks(self) -> list[tuple[str, Callable[[], Check]]]:
        return [
            ("zones", self.zones_check),
            ("image", self.image),
            ("subnets", self.subnets),
            ("security groups", self.security_groups),
            ("instance types", self.instance_types),
            ("GPU quota", self.quota),
        ]

    def zones_check(self) -> Check:
        reply = self.ec2.describe_availability_zones()
        have = {z["ZoneName"]: z.get("State", "available") for z in reply["AvailabilityZones"]}
        bad = [z for z in self.zones if have.get(z) != "available"]
        if bad:
            offered = ", ".join(sorted(have)) or "none"
            return failed(
                "zones",
                f"{', '.join(bad)} not available in {self.pool.region}",
                f"set zones to some of: {offered}",
            )
        return passed("zones", f"{', '.join(self.zones)} in {self.pool.region}")

    def image(self) -> Check:
        image = self.pool.image
        if image is None:
            return passed("image", "not set: the newest Amazon image is looked up at launch")
        try:
            reply = self.ec2.describe_images(ImageIds=[image])
        except Exception as err:
            if _code(err).startswith("InvalidAMIID"):
                return failed(
                    "image",
                    f"{image}: not found or not readable in {self.pool.region}",
                    "copy the image into the region or share it with the account, "
                    "then set image to its id",
                )
            raise
        if not reply["Images"]:
            return failed("image", f"{image}: not found", "set image to an AMI id of the region")
        raw = reply["Images"][0]
        state = raw.get("State", "available")
        if state != "available":
            return failed("image", f"{image} is {state}", "set image to an available AMI")
        return passed("image", f"{image} ({raw.get('Name', '')}, {raw.get('Architecture', '')})")

    def subnet_rows(self) -> list[dict[str, Any]]:
        if self._subnets is None:
            subnets = list(self.pool.subnets)
            reply = self.ec2.describe_subnets(SubnetIds=subnets) if subnets else {"Subnets": []}
            self._subnets = list(reply["Subnets"])
        return self._subnets

    def subnets(self) -> Check:
        if not self.pool.subnets:
            return _unset("subnets", self.pool, "the account's default subnet of each zone")
        try:
            rows = self.subnet_rows()
        except Exception as err:
            if _code(err).startswith("InvalidSubnet"):
                return failed("subnets", _reason(err), "set subnets to existing subnet ids")
            raise
        zones = {r["AvailabilityZone"] for r in rows}
        uncovered = [z for z in self.zones if z not in zones]
        if uncovered:
            return failed(
                "subnets",
                f"no subnet in {', '.join(uncovered)}",
                "add a subnet of each zone to subnets, or drop the zone",
            )
        vpcs = {r["VpcId"] for r in rows}
        if len(vpcs) > 1:
            return failed("subnets", f"in {len(vpcs)} VPCs", "use subnets of one VPC")
        return passed(
            "subnets",
            ", ".join(f"{r['SubnetId']} ({r['AvailabilityZone']}, {r['CidrBlock']})" for r in rows),
        )

    def vpc_range(self) -> str | None:
        """The CIDR of the one VPC the pool's subnets are in (None: not one VPC)."""
        vpcs = {r["VpcId"] for r in self.subnet_rows()}
        if len(vpcs) != 1:
            return None
        reply = self.ec2.describe_vpcs(VpcIds=list(vpcs))
        return str(reply["Vpcs"][0]["CidrBlock"])

    def security_groups(self) -> Check:
        if not self.pool.security_groups:
            return _unset("security groups", self.pool, "the VPC's default security group")
        try:
            reply = self.ec2.describe_security_groups(GroupIds=list(self.pool.security_groups))
        except Exception as err:
            if _code(err).startswith("InvalidGroup"):
                return failed(
                    "security groups", _reason(err), "set security_groups to existing group ids"
                )
            raise
        groups = reply["SecurityGroups"]
        vpc = self.vpc_range()
        source = self.pool.controller_cidr or vpc
        if source is None:
            return failed(
                "security groups",
                "no single VPC to take the controller's range from",
                "set controller_cidr in mesh.yaml",
            )
        return _ports(self.pool, groups, source, vpc)

    def instance_types(self) -> Check:
        types = sorted({t.name for t in self.pool.node_types} | head_types(self.pool))
        reply = self.ec2.describe_instance_type_offerings(
            LocationType="availability-zone",
            Filters=[
                {"Name": "instance-type", "Values": types},
                {"Name": "location", "Values": self.zones},
            ],
        )
        offered = {o["InstanceType"] for o in reply["InstanceTypeOfferings"]}
        missing = [t for t in types if t not in offered]
        if missing:
            return failed(
                "instance types",
                f"{', '.join(missing)} not offered in {', '.join(self.zones)}",
                "pick other types or zones (aws ec2 describe-instance-type-offerings)",
            )
        return passed("instance types", f"{', '.join(types)} offered in {', '.join(self.zones)}")

    def quota(self) -> Check:
        wants = self.vcpus_wanted()
        needed = needed_per_quota(wants)
        quotas = self.cloud.session.client("service-quotas", endpoint_url=self.cloud.endpoint_url)
        short, seen = [], []
        for code, vcpus in sorted(needed.items()):
            try:
                value = float(
                    quotas.get_service_quota(ServiceCode="ec2", QuotaCode=code)["Quota"]["Value"]
                )
            except Exception as err:
                if self.pool.emulated and _code(err) == "NoSuchResourceException":
                    return skipped("GPU quota", f"the endpoint serves no EC2 quota {code}")
                raise
            seen.append(f"{code} {vcpus}/{value:g} vCPUs")
            if value < vcpus:
                short.append(f"{QUOTA_NAMES[code]} ({code}) is {value:g} vCPUs, needs {vcpus}")
        if short:
            return failed(
                "GPU quota",
                "; ".join(short),
                "request an increase in Service Quotas (EC2), or lower max_nodes",
            )
        return passed("GPU quota", ", ".join(seen) or "no quota limits these types")

    def vcpus_wanted(self) -> list[tuple[str | None, int]]:
        types = sorted({t.name for t in self.pool.node_types} | head_types(self.pool))
        reply = self.ec2.describe_instance_types(InstanceTypes=types)
        vcpus = {
            t["InstanceType"]: int(t["VCpuInfo"]["DefaultVCpus"]) for t in reply["InstanceTypes"]
        }
        wants = [
            (quota_code(t.name, t.spot), min(t.max_nodes, self.pool.max_nodes) * vcpus[t.name])
            for t in self.pool.node_types
        ]
        for head in head_types(self.pool):
            wants.append((quota_code(head, False), vcpus[head]))
        return wants


def _unset(name: str, pool: AwsPool, default: str) -> Check:
    if pool.emulated:
        return skipped(name, f"not set: {default} (an emulated endpoint)")
    return failed(name, "not set", f"set {name.replace(' ', '_')} in mesh.yaml")


def _ports(pool: AwsPool, groups: list[dict[str, Any]], source: str, vpc: str | None) -> Check:
    """The controller reaches the dashboard and agent ports from ``source``; the pool's
    instances reach each other on every TCP port (Ray's GCS, raylets, object managers): a
    rule from one of the pool's groups, or from the VPC's range, for all ports."""
    ids = {g["GroupId"] for g in groups}
    opened, between = [], False
    for rule in (r for g in groups for r in g.get("IpPermissions", [])):
        if rule.get("IpProtocol") not in ("tcp", "-1"):
            continue
        every = rule["IpProtocol"] == "-1" or (rule["FromPort"] <= 1 and rule["ToPort"] >= 65535)
        low, high = (0, 65535) if rule["IpProtocol"] == "-1" else (rule["FromPort"], rule["ToPort"])
        ranges = [r["CidrIp"] for r in rule.get("IpRanges", [])]
        opened += [(low, high, cidr) for cidr in ranges]
        peers = {p.get("GroupId") for p in rule.get("UserIdGroupPairs", [])}
        inside = vpc is not None and not missing_ports(
            [(0, 65535, c) for c in ranges], [GCS_PORT], vpc
        )
        between = between or (every and (bool(peers & ids) or inside))
    closed = missing_ports(opened, [DASHBOARD_PORT, pool.agent_port], source)
    group = sorted(ids)[0]
    if closed:
        ports = ", ".join(str(p) for p in closed)
        return failed(
            "security groups",
            f"tcp {ports} not open to {source}",
            f"aws ec2 authorize-security-group-ingress --group-id {group} --protocol tcp "
            f"--port {closed[0]} --cidr {source}",
        )
    if not between:
        return failed(
            "security groups",
            "the pool's instances cannot reach each other",
            f"aws ec2 authorize-security-group-ingress --group-id {group} "
            f"--protocol -1 --source-group {group}",
        )
    return passed(
        "security groups",
        f"tcp {DASHBOARD_PORT}, {pool.agent_port} open to {source}; "
        "all TCP between the pool's instances",
    )
