"""GCP Compute Engine through google-cloud-compute (REST transport).

Credentials come the way every Google tool takes them (application default credentials),
or a service-account file per pool (``credentials_file``); an ``endpoint_url`` without a
credentials file is an emulator and gets anonymous credentials. The SDK is imported when a
pool is first used, never at start-up.

- Idempotency: every insert and delete carries a ``requestId`` (a UUID derived from the
  request id, so a retry is the same request), instance names derive from the request id
  (a second insert of one is ``alreadyExists``, taken as done), and instances labelled with
  the request are looked up before launching.
- Spot: ``scheduling.provisioningModel = SPOT`` with ``instanceTerminationAction = STOP``, so
  a preempted instance stays listed (``TERMINATED``, reported ``preempted``) until the
  controller deletes it. A spot instance ``STOPPING`` is being preempted (Compute Engine
  gives about 30 s): reported ``interrupting``; meshctl itself never stops instances.
- Labels ``meshctl-mesh``, ``meshctl-pool``, ``meshctl-request``, ``meshctl-job``.
- Errors as data: ``ZONE_RESOURCE_POOL_EXHAUSTED*`` (a stock-out, surfaced by the operation)
  is ``capacity``, ``QUOTA_EXCEEDED`` ``quota``, HTTP 429 ``throttled`` after our backoff (the
  client does not retry 429 itself), a server error (5xx) or an API that does not answer (no
  connection, a timeout) ``unavailable``, 401/403 ``auth`` (as are credentials that cannot
  be found or refreshed), 400 ``invalid``.
- ``check``: one page of one instance of the project's aggregated list, with a 10 s timeout.
  ``list_instances`` and ``terminate`` (what the controller's cycle calls) are tried once:
  throttled or unanswered, they fail at once and the cycle asks again next time; launches
  (on the controller's worker thread) are backed off and retried.
- A pool's ``GcpSetup`` (mesh.yaml's image, network, subnetwork, network tags and service
  account) goes into every insert; bare names become the relative links GCE takes, so a pool
  may name a subnetwork once for all the zones of its region.
- An instance's id here is ``<zone>/<name>``: everything a delete needs.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

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

T = TypeVar("T")

LABEL = "meshctl-"
REQUEST_ITEM = "meshctl-request"  # metadata: the exact request id (labels hold no dots)
DEFAULT_IMAGE = "projects/deeplearning-platform-release/global/images/family/common-cu124-debian-11"
SCOPES = ["https://www.googleapis.com/auth/cloud-platform"]  # access is the account's IAM roles
STATES: dict[str, InstanceState] = {
    "PROVISIONING": "pending",
    "STAGING": "pending",
    "RUNNING": "running",
    "STOPPING": "stopping",
    "SUSPENDING": "stopping",
    "SUSPENDED": "stopping",
    "REPAIRING": "pending",
    "TERMINATED": "terminated",
}


@dataclass(frozen=True, slots=True)
class GcpSetup:
    """What a pool's instances launch with, from mesh.yaml (all optional: an emulator needs
    none). Names or links: ``network`` ``N`` or ``projects/P/global/networks/N`` (a shared
    VPC's host project), ``subnetwork`` ``S`` (in the launch zone's region) or
    ``regions/R/subnetworks/S``, ``image`` ``global/images/I`` or ``.../images/family/F``."""

    image: str | None = None
    network: str | None = None
    subnetwork: str | None = None
    network_tags: tuple[str, ...] = ()
    service_account: str | None = None  # an email


class GcpCloud:
    provider = "gcp"
    notice_s = 30.0

    def __init__(
        self,
        project: str,
        endpoint_url: str | None = None,
        credentials_file: str | None = None,
        setup: GcpSetup | None = None,
    ) -> None:
        kwargs = client_kwargs(endpoint_url, credentials_file)
        from google.cloud import compute_v1  # ~2 s to import: only once credentials exist

        self.project, self.setup = project, setup or GcpSetup()
        self.credentials, self.endpoint_url = kwargs["credentials"], endpoint_url
        self.compute = compute_v1
        self.instances: Any = compute_v1.InstancesClient(**kwargs)
        self.operations: Any = compute_v1.ZoneOperationsClient(**kwargs)

    def put_secret(self, name: str, value: str, labels: Mapping[str, str]) -> None:
        """The secret ``name`` in Secret Manager, created or given a new version."""
        from meshctl.clouds.gcp_secrets import put_secret

        put_secret(self.credentials, self.project, name, value, labels, self.endpoint_url)

    def startup_script(self, instance_id: str) -> str:
        """The instance's ``startup-script`` metadata item ("" when it has none)."""
        zone, name = instance_id.split("/", 1)
        found = self.instances.get(project=self.project, zone=zone, instance=name)
        items = found.metadata.items if found.metadata else []
        return next((i.value for i in items if i.key == "startup-script"), "")

    def check(self) -> CloudError | None:
        listing = self.compute.AggregatedListInstancesRequest(project=self.project, max_results=1)
        try:
            self.instances.aggregated_list(request=listing, timeout=10)
        except Exception as err:
            found = _error(err, None)
            return CloudError(found.kind, _reason(err))
        return None

    def list_instances(self, mesh: str) -> list[Instance]:
        listed = self._listed(f'labels.{LABEL}mesh = "{mesh}"', quick=True)
        return [i for i in listed if i.state != "terminated"]

    def launch(self, request: LaunchRequest) -> LaunchResult:
        try:
            done = self._listed(f'labels.{LABEL}request = "{_label(request.request_id)}"')
        except Exception as err:
            return LaunchResult((), (_error(err, None),))
        if done:
            return LaunchResult(tuple(done))
        return launch_in_zones(request, lambda zone: self._insert(request, zone))

    def terminate(self, ids: Sequence[str], request_id: str) -> list[CloudError]:
        from google.api_core import exceptions

        errors = []
        for instance_id in ids:
            zone, name = instance_id.split("/", 1)
            delete = self.compute.DeleteInstanceRequest(
                project=self.project,
                zone=zone,
                instance=name,
                request_id=_uuid(request_id, instance_id),
            )
            try:
                self.instances.delete(request=delete)  # the cycle's: tried once
            except exceptions.NotFound:
                continue  # gone already: terminating twice is fine
            except Exception as err:
                errors.append(_error(err, zone))
        return errors

    # --- inside -------------------------------------------------------------------------------

    def _insert(
        self, request: LaunchRequest, zone: str
    ) -> tuple[list[Instance], CloudError | None]:
        from google.api_core import exceptions

        made: list[Instance] = []
        for k in range(request.count):
            name = _name(request, zone, k)
            insert = self.compute.InsertInstanceRequest(
                project=self.project,
                zone=zone,
                instance_resource=self._resource(request, zone, name),
                request_id=_uuid(request.request_id, f"{zone}/{name}"),
            )
            try:
                operation = retried(lambda i=insert: self.instances.insert(request=i))
                retried(lambda o=operation: o.result(timeout=300))
            except exceptions.Conflict:
                pass  # made by an earlier try of this same request
            except Exception as err:
                if made:  # all or nothing: a gang needs every node; asking again starts over
                    self.terminate([i.id for i in made], f"{request.request_id}-partial")
                return [], _error(err, zone)
            got = retried(
                lambda n=name: self.instances.get(project=self.project, zone=zone, instance=n)
            )
            made.append(_instance(got, zone))
        return made, None

    def _resource(self, request: LaunchRequest, zone: str, name: str) -> Any:
        """The instance to insert: the request's shape, the pool's setup."""
        c, setup = self.compute, self.setup
        image = request.image or setup.image or DEFAULT_IMAGE
        return c.Instance(
            name=name,
            machine_type=f"zones/{zone}/machineTypes/{request.node_type}",
            labels={LABEL + key: _label(v) for key, v in labels_of(request).items()},
            disks=[
                c.AttachedDisk(
                    boot=True,
                    auto_delete=True,
                    initialize_params=c.AttachedDiskInitializeParams(
                        source_image=image_link(image), disk_size_gb=200
                    ),
                )
            ],
            network_interfaces=[c.NetworkInterface(**self._network(zone))],
            tags=c.Tags(items=list(setup.network_tags)),
            service_accounts=[c.ServiceAccount(email=setup.service_account, scopes=SCOPES)]
            if setup.service_account
            else [],
            scheduling=c.Scheduling(
                provisioning_model="SPOT" if request.spot else "STANDARD",
                instance_termination_action="STOP" if request.spot else None,
                on_host_maintenance="TERMINATE",
            ),
            metadata=c.Metadata(items=_items(c, request)),
        )

    def _network(self, zone: str) -> dict[str, str]:
        """The network interface's network and subnetwork: the project's default network when
        the pool names neither (GCE takes the network from a subnetwork alone)."""
        setup, found = self.setup, {}
        if setup.network:
            found["network"] = network_link(self.project, setup.network)
        if setup.subnetwork:
            owner = project_of(found.get("network", ""), self.project)
            found["subnetwork"] = subnetwork_link(owner, region_of(zone), setup.subnetwork)
        return found or {"network": "global/networks/default"}

    def _listed(self, filter_: str, quick: bool = False) -> list[Instance]:
        listing = self.compute.AggregatedListInstancesRequest(project=self.project, filter=filter_)

        def listed() -> list[Any]:
            return list(self.instances.aggregated_list(request=listing))

        found = []
        for scope, scoped in listed() if quick else retried(listed):
            zone = scope.removeprefix("zones/")
            found += [_instance(raw, zone) for raw in scoped.instances]
        return found


def client_kwargs(endpoint_url: str | None, credentials_file: str | None) -> dict[str, Any]:
    """What every compute_v1 client of a pool is built with (REST, the pool's credentials,
    the emulator's endpoint); ``Unavailable`` when there are no credentials."""
    credentials = _credentials(credentials_file, endpoint_url)  # before the big import
    return {
        "credentials": credentials,
        "client_options": {"api_endpoint": endpoint_url} if endpoint_url else None,
        "transport": "rest",
    }


def retried(call: Callable[..., T]) -> T:
    """``call()``, backed off and retried while it is throttled (the client does not retry a
    429 itself)."""
    from google.api_core import exceptions

    return with_backoff(
        call,
        lambda err: (
            isinstance(err, exceptions.TooManyRequests)
            or "rateLimitExceeded" in " ".join(_codes(err))
        ),
    )


def region_of(zone: str) -> str:
    return zone.rsplit("-", 1)[0]  # us-central1-a -> us-central1


def project_of(link: str, default: str) -> str:
    """The project a ``projects/P/...`` link names (a shared VPC's host), else ``default``."""
    found = re.search(r"(?:^|/)projects/([^/]+)/", link)
    return found.group(1) if found else default


def network_link(project: str, network: str) -> str:
    """A bare network name as ``projects/P/global/networks/N``; a link as given."""
    return network if "/" in network else f"projects/{project}/global/networks/{network}"


def subnetwork_link(project: str, region: str, subnetwork: str) -> str:
    """A bare subnetwork name as ``projects/P/regions/R/subnetworks/S``; a link as given."""
    bare = "/" not in subnetwork
    return f"projects/{project}/regions/{region}/subnetworks/{subnetwork}" if bare else subnetwork


def image_link(image: str) -> str:
    """A bare image name as ``global/images/I`` (the project's own); a link as given."""
    return image if "/" in image else f"global/images/{image}"


def _credentials(credentials_file: str | None, endpoint_url: str | None) -> Any:
    """A service account's key file; anonymous for an emulator; else application default
    credentials. ``Unavailable`` when there are none to be had."""
    from google.auth.exceptions import GoogleAuthError

    if credentials_file:
        from google.oauth2 import service_account

        load: Any = service_account.Credentials.from_service_account_file
        try:
            return load(credentials_file)
        except (OSError, ValueError) as err:  # missing, unreadable, not a key file
            why = err.strerror if isinstance(err, OSError) else str(err).splitlines()[0]
            raise Unavailable(f"no credentials: {credentials_file}: {why}") from None
    if endpoint_url:
        from google.auth.credentials import AnonymousCredentials

        anonymous: Any = AnonymousCredentials  # not annotated by the library
        return anonymous()
    import google.auth

    try:
        found, _ = google.auth.default(scopes=["https://www.googleapis.com/auth/cloud-platform"])
    except GoogleAuthError:
        raise Unavailable("no credentials (no application default credentials found)") from None
    return found


def _error(err: Exception, zone: str | None) -> CloudError:
    from google.api_core import exceptions

    codes = " ".join(_codes(err))
    kind: ErrorKind = "other"
    if "ZONE_RESOURCE_POOL_EXHAUSTED" in codes or "resourcePoolExhausted" in codes:
        kind = "capacity"
    elif "QUOTA_EXCEEDED" in codes or "quotaExceeded" in codes:
        kind = "quota"
    elif isinstance(err, exceptions.TooManyRequests) or "rateLimitExceeded" in codes:
        kind = "throttled"
    elif isinstance(err, exceptions.ServerError | exceptions.RetryError) or _unreachable(err):
        kind = "unavailable"
    elif _refused(err):
        kind = "auth"
    elif isinstance(err, exceptions.BadRequest):
        kind = "invalid"
    message = str(err).splitlines()[0] if str(err) else type(err).__name__
    if kind == "auth":  # the pool's reason for being unavailable: short
        message = _reason(err)
    return CloudError(kind, message, zone)


def _unreachable(err: Exception) -> bool:
    """No answer: no connection, or a timeout (the REST transport's, or refreshing a token)."""
    import requests
    from google.auth.exceptions import TransportError

    return isinstance(err, requests.ConnectionError | requests.Timeout | TransportError)


def _refused(err: Exception) -> bool:
    """Credentials missing, refused, or not allowed this project (quota 403s are told apart
    before this is asked)."""
    from google.api_core import exceptions
    from google.auth.exceptions import GoogleAuthError

    return isinstance(err, exceptions.Unauthorized | exceptions.Forbidden | GoogleAuthError)


def _reason(err: Exception) -> str:
    """Why a pool cannot be used, briefly: "Forbidden: Required permission ..."."""
    from google.auth.exceptions import DefaultCredentialsError

    if isinstance(err, DefaultCredentialsError):
        return "no credentials"
    said = [e.get("message") for e in getattr(err, "errors", None) or [] if isinstance(e, dict)]
    message = (said[0] if said else None) or getattr(err, "message", None) or str(err)
    first = str(message).splitlines()[0] if str(message) else ""  # without the URL
    return f"{type(err).__name__}: {first}" if first else type(err).__name__


def _codes(err: Exception) -> list[str]:
    """Error codes from either shape the client uses: operation errors (objects with
    ``.code``) and HTTP errors (dicts with ``reason``)."""
    found = []
    for item in getattr(err, "errors", None) or []:
        if isinstance(item, dict):
            found.append(str(item.get("reason", "")))
        else:
            found.append(str(getattr(item, "code", "")))
    return found


def _label(value: str) -> str:
    """GCE label values: lowercase letters, digits, _ and -, at most 63 characters; a longer
    value keeps its start and a hash of the whole, so two long values never collide."""
    clean = re.sub(r"[^a-z0-9_-]", "-", value.lower())
    if len(clean) <= 63:
        return clean
    return f"{clean[:50]}-{uuid.uuid5(uuid.NAMESPACE_URL, value).hex[:12]}"


def _name(request: LaunchRequest, zone: str, k: int) -> str:
    digest = uuid.uuid5(uuid.NAMESPACE_URL, f"{request.request_id}/{zone}").hex[:10]
    stem = re.sub(r"[^a-z0-9-]", "-", request.pool.lower()).strip("-")[:40] or "pool"
    return f"{stem}-{digest}-{k}"


def _items(c: Any, request: LaunchRequest) -> list[Any]:
    """The instance's metadata: its exact request id (a label turns its dots into dashes),
    and its startup script."""
    items = [c.Items(key=REQUEST_ITEM, value=request.request_id)]
    if request.startup_script:
        items.append(c.Items(key="startup-script", value=request.startup_script))
    return items


def _uuid(request_id: str, what: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"meshctl/{request_id}/{what}"))


def _instance(raw: Any, zone: str) -> Instance:
    labels = {k.removeprefix(LABEL): v for k, v in raw.labels.items() if k.startswith(LABEL)}
    spot = raw.scheduling.provisioning_model == "SPOT"
    state = STATES.get(raw.status, "pending")
    if state == "terminated" and spot:
        state = "preempted"  # a spot instance stopped by Compute Engine
    elif raw.status == "STOPPING" and spot:
        state = "interrupting"  # being preempted: about 30 s left
    created = raw.creation_timestamp
    interfaces = list(raw.network_interfaces)
    items = raw.metadata.items if raw.metadata else []
    request = next((i.value for i in items if i.key == REQUEST_ITEM), labels.get("request", ""))
    return Instance(
        id=f"{zone}/{raw.name}",
        pool=labels.get("pool", ""),
        node_type=raw.machine_type.rsplit("/", 1)[-1],
        zone=zone,
        state=state,
        spot=spot,
        request_id=request,
        launched_at_s=datetime.fromisoformat(created).timestamp() if created else None,
        address=interfaces[0].network_i_p if interfaces else "",
        labels=labels,
    )
