"""AWS EC2 through boto3.

Credentials and endpoints come the way every AWS tool takes them (``AWS_PROFILE``,
``AWS_ENDPOINT_URL``, the shared config files, instance roles), overridable per pool in
mesh.yaml (``profile``, ``endpoint_url``). boto3 is imported when a pool is first used, never
at start-up.

- Idempotency: ``ClientToken`` = the request id (EC2 honours it), and before launching the
  instances tagged with that request are looked up (emulators that ignore the token still
  never launch twice).
- Spot: ``InstanceMarketOptions`` one-time spot, terminated on interruption. The two-minute
  notice is read from the instance's spot request (``marked-for-termination``, the same
  signal as the instance's ``spot/instance-action`` metadata): listed ``interrupting``.
- Tags ``meshctl:mesh``, ``meshctl:pool``, ``meshctl:request``, ``meshctl:job``.
- Errors as data: ``InsufficientInstanceCapacity`` and friends are ``capacity``,
  ``*LimitExceeded`` ``quota``, ``RequestLimitExceeded`` ``throttled`` (after botocore's own
  standard-mode retries and ours), an endpoint that does not answer (no connection, a
  timeout) or answers a server error (``InternalError``, ``Unavailable``, HTTP 5xx)
  ``unavailable``, ``AuthFailure`` / ``UnauthorizedOperation`` ``auth``, and so are
  credentials botocore cannot find.
- ``check``, ``list_instances`` and ``terminate`` (what the controller's cycle calls) go
  through a client with short timeouts and one retry, none of ours: a throttled or silent
  endpoint fails them in seconds, and the cycle asks again next time, rather than holding
  every pool's work up for a minute of retries. Launches (on the controller's worker thread)
  retry patiently.
"""

from __future__ import annotations

import base64
import datetime as dt
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from meshctl.clouds.base import (
    CloudError,
    ErrorKind,
    Instance,
    InstanceState,
    LaunchRequest,
    LaunchResult,
    Unavailable,
    labels_of,
    launch_in_zones,
    with_backoff,
)

TAG = "meshctl:"
CAPACITY = frozenset(
    {
        "InsufficientInstanceCapacity",
        "InsufficientCapacity",
        "InsufficientHostCapacity",
        "Unsupported",  # the type is not offered in that zone
    }
)
QUOTA = frozenset(
    {
        "InstanceLimitExceeded",
        "VcpuLimitExceeded",
        "MaxSpotInstanceCountExceeded",
        "SpotMaxPriceTooLow",
    }
)
THROTTLED = frozenset({"RequestLimitExceeded", "Throttling", "ThrottlingException"})
NOTICE = frozenset({"marked-for-termination", "marked-for-stop", "marked-for-hibernation"})
AUTH = frozenset({"AuthFailure", "UnauthorizedOperation", "InvalidClientTokenId"})
SERVER = frozenset({"InternalError", "InternalFailure", "ServiceUnavailable", "Unavailable"})
STATES: dict[str, InstanceState] = {
    "pending": "pending",
    "running": "running",
    "stopping": "stopping",
    "stopped": "stopping",
    "shutting-down": "stopping",
    "terminated": "terminated",
}


@dataclass(frozen=True, slots=True)
class AwsSetup:
    """What a pool's instances launch with, from mesh.yaml (all optional: an emulator needs
    none). A launch in a zone takes the pool's subnet in that zone."""

    image: str | None = None
    subnets: tuple[str, ...] = ()
    security_groups: tuple[str, ...] = ()
    instance_profile: str | None = None  # a name, or an ARN


class AwsCloud:
    provider = "aws"
    notice_s = 120.0

    def __init__(
        self,
        region: str,
        endpoint_url: str | None = None,
        profile: str | None = None,
        setup: AwsSetup | None = None,
    ) -> None:
        import boto3
        from botocore.config import Config
        from botocore.exceptions import ProfileNotFound

        try:
            session = boto3.Session(profile_name=profile, region_name=region)
        except ProfileNotFound as err:
            raise Unavailable(f"no credentials: {err}") from None
        self.region, self.setup, self.session = region, setup or AwsSetup(), session
        self.endpoint_url = endpoint_url
        self._subnet_zones: dict[str, str] | None = None  # subnet id -> its zone
        self.ec2: Any = session.client(
            "ec2",
            endpoint_url=endpoint_url,
            config=Config(retries={"mode": "standard", "max_attempts": 5}),
        )
        # for what a caller must not wait on (check, and the controller's cycle: listing,
        # terminating): short timeouts, one retry, none of ours; a throttled or silent API
        # fails the call in seconds and the cycle asks again next time
        self._quick: Any = session.client(
            "ec2",
            endpoint_url=endpoint_url,
            config=Config(
                connect_timeout=5, read_timeout=10, retries={"mode": "standard", "max_attempts": 2}
            ),
        )

    def check(self) -> CloudError | None:
        try:
            self._quick.describe_availability_zones()
        except Exception as err:
            found = self._error(err, None)
            return CloudError(found.kind, _reason(err))
        return None

    def list_instances(self, mesh: str) -> list[Instance]:
        found = self._described([{"Name": f"tag:{TAG}mesh", "Values": [mesh]}], quick=True)
        spot = [i.id for i in found if i.spot and i.state == "running"]
        if not spot:
            return found
        noticed = self._noticed(spot)
        return [replace(i, state="interrupting") if i.id in noticed else i for i in found]

    def launch(self, request: LaunchRequest) -> LaunchResult:
        try:
            done = self._described([{"Name": f"tag:{TAG}request", "Values": [request.request_id]}])
            image = request.image or self.setup.image or self._default_image()
        except Exception as err:
            return LaunchResult((), (self._error(err, None),))
        if done:
            return LaunchResult(tuple(done))
        return launch_in_zones(request, lambda zone: self._run(request, zone, image))

    def terminate(self, ids: Sequence[str], request_id: str) -> list[CloudError]:
        errors = []
        for instance_id in ids:  # one by one: EC2 fails a whole batch on one unknown id
            try:
                self._quick.terminate_instances(InstanceIds=[instance_id])
            except Exception as err:
                if _code(err) != "InvalidInstanceID.NotFound":  # gone already is fine
                    errors.append(self._error(err, None))
        return errors

    def put_secret(self, name: str, value: str, labels: Mapping[str, str]) -> None:
        """The secret ``name`` in Secrets Manager, created or given a new version; tagged."""
        client = self.session.client("secretsmanager", endpoint_url=self.endpoint_url)
        tags = [{"Key": TAG + k, "Value": v} for k, v in labels.items()]
        try:
            self._call(lambda: client.create_secret(Name=name, SecretString=value, Tags=tags))
        except Exception as err:
            if _code(err) != "ResourceExistsException":
                raise
            self._call(lambda: client.put_secret_value(SecretId=name, SecretString=value))

    def startup_script(self, instance_id: str) -> str:
        """The instance's user data (``DescribeInstanceAttribute``), decoded."""
        reply = self._call(
            lambda: self.ec2.describe_instance_attribute(
                InstanceId=instance_id, Attribute="userData"
            )
        )
        return base64.b64decode(reply.get("UserData", {}).get("Value", "")).decode()

    # --- inside -------------------------------------------------------------------------------

    def _run(
        self, request: LaunchRequest, zone: str, image: str
    ) -> tuple[list[Instance], CloudError | None]:
        tags = [{"Key": TAG + k, "Value": v} for k, v in labels_of(request).items()]
        kwargs: dict[str, Any] = {
            "ImageId": image,
            "InstanceType": request.node_type,
            "MinCount": request.count,
            "MaxCount": request.count,
            "ClientToken": uuid.uuid5(uuid.NAMESPACE_URL, f"{request.request_id}/{zone}").hex,
            "Placement": {"AvailabilityZone": zone},
            "InstanceInitiatedShutdownBehavior": "terminate",  # a stopped one would bill unseen
            "TagSpecifications": [{"ResourceType": "instance", "Tags": tags}],
        }
        if request.startup_script:
            kwargs["UserData"] = request.startup_script
        try:
            kwargs |= self._network(zone)
        except Exception as err:
            return [], self._error(err, zone)
        if request.spot:
            kwargs["InstanceMarketOptions"] = {
                "MarketType": "spot",
                "SpotOptions": {
                    "SpotInstanceType": "one-time",
                    "InstanceInterruptionBehavior": "terminate",
                },
            }
        try:
            reply = self._call(lambda: self.ec2.run_instances(**kwargs))
        except Exception as err:
            return [], self._error(err, zone)
        return [_instance(raw, request.pool) for raw in reply["Instances"]], None

    def _network(self, zone: str) -> dict[str, Any]:
        """RunInstances' network and identity arguments for a launch in ``zone``."""
        found: dict[str, Any] = {}
        setup = self.setup
        if setup.subnets:
            if self._subnet_zones is None:
                reply = self._call(lambda: self.ec2.describe_subnets(SubnetIds=list(setup.subnets)))
                self._subnet_zones = {
                    s["SubnetId"]: s["AvailabilityZone"] for s in reply["Subnets"]
                }
            subnet = next((s for s, z in self._subnet_zones.items() if z == zone), None)
            if subnet is None:
                raise LookupError(f"none of the pool's subnets is in {zone}")
            found["SubnetId"] = subnet
        if setup.security_groups:
            found["SecurityGroupIds"] = list(setup.security_groups)
        if setup.instance_profile:
            key = "Arn" if setup.instance_profile.startswith("arn:") else "Name"
            found["IamInstanceProfile"] = {key: setup.instance_profile}
        return found

    def _described(self, filters: list[dict[str, Any]], quick: bool = False) -> list[Instance]:
        alive = {"Name": "instance-state-name", "Values": ["pending", "running", "stopping"]}
        paginator = (self._quick if quick else self.ec2).get_paginator("describe_instances")

        def listed() -> list[Any]:
            return list(paginator.paginate(Filters=[*filters, alive]))

        found = []
        for page in listed() if quick else self._call(listed):
            for reservation in page["Reservations"]:
                for raw in reservation["Instances"]:
                    pool = _tags(raw).get(TAG + "pool", "")
                    found.append(_instance(raw, pool))
        return found

    def _noticed(self, instance_ids: list[str]) -> set[str]:
        """The spot instances AWS has given notice to (their spot request is marked)."""
        found: set[str] = set()
        for start in range(0, len(instance_ids), 200):  # a filter takes 200 values
            chunk = instance_ids[start : start + 200]
            reply = self._quick.describe_spot_instance_requests(
                Filters=[{"Name": "instance-id", "Values": chunk}]
            )
            for request in reply.get("SpotInstanceRequests", []):
                if request.get("Status", {}).get("Code") in NOTICE:
                    found.add(str(request.get("InstanceId", "")))
        return found

    def _default_image(self) -> str:
        """The newest AWS Deep Learning AMI (drivers, CUDA); else the newest Amazon image
        (emulators carry no DLAMI). Set ``image`` in mesh.yaml to choose your own."""
        for pattern in ("Deep Learning Base*GPU*", "*"):
            reply = self._call(
                lambda p=pattern: self.ec2.describe_images(
                    Owners=["amazon"], Filters=[{"Name": "name", "Values": [p]}]
                )
            )
            images = sorted(reply["Images"], key=lambda i: i.get("CreationDate", ""))
            if images:
                return str(images[-1]["ImageId"])
        raise LookupError(f"no Amazon image found in {self.region}; set image in mesh.yaml")

    def _call(self, call: Any) -> Any:
        return with_backoff(call, lambda err: _code(err) in THROTTLED)

    @staticmethod
    def _error(err: Exception, zone: str | None) -> CloudError:
        code = _code(err)
        kind: ErrorKind = "other"
        if code in CAPACITY:
            kind = "capacity"
        elif code in QUOTA:
            kind = "quota"
        elif code in THROTTLED:
            kind = "throttled"
        elif code in SERVER or _server_error(err) or _unreachable(err):
            kind = "unavailable"
        elif code in AUTH or _no_credentials(err):
            kind = "auth"
        elif isinstance(err, LookupError) or code.startswith("Invalid"):
            kind = "invalid"
        message = str(err).splitlines()[0] if str(err) else type(err).__name__
        if kind == "auth":  # the pool's reason for being unavailable: short
            message = _reason(err)
        return CloudError(kind, message, zone)


def _server_error(err: Exception) -> bool:
    """An HTTP 5xx answer, whatever its code says."""
    response = getattr(err, "response", None)  # a ClientError's, a dict
    meta = response.get("ResponseMetadata", {}) if isinstance(response, dict) else {}
    status = meta.get("HTTPStatusCode")
    return isinstance(status, int) and status >= 500


def _unreachable(err: Exception) -> bool:
    """No answer: no connection, or a timeout (after botocore's own retries)."""
    from botocore.exceptions import ConnectionError as NoConnection
    from botocore.exceptions import HTTPClientError

    return isinstance(err, NoConnection | HTTPClientError)


def _no_credentials(err: Exception) -> bool:
    from botocore.exceptions import NoCredentialsError, PartialCredentialsError

    return isinstance(err, NoCredentialsError | PartialCredentialsError)


def _reason(err: Exception) -> str:
    """Why a pool cannot be used, briefly: "no credentials", "AuthFailure: <EC2's words>"."""
    if _no_credentials(err):
        return "no credentials"
    code, response = _code(err), getattr(err, "response", None)
    if code and isinstance(response, dict):
        return f"{code}: {response.get('Error', {}).get('Message', '')}".rstrip(": ")
    first = str(err).splitlines()[0] if str(err) else ""
    return f"{type(err).__name__}: {first}" if first else type(err).__name__


def _code(err: Exception) -> str:
    response = getattr(err, "response", None)
    if isinstance(response, dict):
        return str(response.get("Error", {}).get("Code", ""))
    return ""


def _tags(raw: dict[str, Any]) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in raw.get("Tags", [])}


def _instance(raw: dict[str, Any], pool: str) -> Instance:
    tags = _tags(raw)
    launched = raw.get("LaunchTime")
    return Instance(
        id=raw["InstanceId"],
        pool=pool or tags.get(TAG + "pool", ""),
        node_type=raw["InstanceType"],
        zone=raw.get("Placement", {}).get("AvailabilityZone", ""),
        state=STATES.get(raw.get("State", {}).get("Name", ""), "pending"),
        spot=raw.get("InstanceLifecycle") == "spot",
        request_id=tags.get(TAG + "request", ""),
        launched_at_s=launched.timestamp() if isinstance(launched, dt.datetime) else None,
        address=raw.get("PrivateIpAddress", ""),
        labels={k.removeprefix(TAG): v for k, v in tags.items() if k.startswith(TAG)},
    )
