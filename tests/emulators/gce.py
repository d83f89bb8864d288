"""An in-memory Compute Engine v1 REST server for tests (no public GCE emulator exists).

    with GceEmulator() as gce:  # gce.endpoint == "http://127.0.0.1:PORT"
        client = compute_v1.InstancesClient(
            credentials=AnonymousCredentials(), transport="rest",
            client_options={"api_endpoint": gce.endpoint},  # keep http://, or it becomes https
        )

Served, under /compute/v1/projects/{project}/ (any other call answers 501 notImplemented):
  POST   zones/{z}/instances           insert. ?requestId= is idempotent (the same operation
                                       back, nothing created twice); an existing name answers
                                       409 alreadyExists at once; an unknown machineType 400.
  GET    zones/{z}/instances           list. ?filter= takes `labels.K = "V"`, `labels.K=V`,
                                       `status != X`..., clauses joined by AND or side by side,
                                       each optionally in parentheses; ?maxResults=, ?pageToken=.
  GET    zones/{z}/instances/{name}    get (404 notFound when missing).
  DELETE zones/{z}/instances/{name}    delete: the instance is gone at once from get and list;
                                       ?requestId= idempotent; 404 notFound when missing.
  GET    aggregated/instances          {"items": {"zones/{z}": {"instances": [...]}}}, only the
                                       zones holding matches; ?filter= as above; one page.
  GET    zones/{z}/operations[/{op}]   list (?filter=) / get; POST zones/{z}/operations/{op}/wait.
  GET    zones/{z}/machineTypes[/{m}]  the ``catalog``'s types offered in the zone (a type's
                                       ``zones``; none: every zone); get: 404 when not offered.
  GET    zones/{z}/acceleratorTypes    the catalog's accelerators.
  And the project's resources, read-only (``gce_resources``): the project, regions (with
  quotas), zones, images (and image families), networks, subnetworks, firewall rules.

An insert keeps what it was sent: ``disks``, ``tags`` (with a fingerprint), ``serviceAccounts``
and ``networkInterfaces``, whose links come back in full and whose network and subnetwork must
exist (404) and agree with the zone (400); naming neither is the project's default network.

Secret Manager's v1 calls meshctl makes are served on the same endpoint (``secrets``:
tests/emulators/secret_manager.py).

Operations are DONE when first returned. That matters: google-cloud-compute's
``ExtendedOperation.result()`` would poll an unfinished one through an internal
ZoneOperationsClient built WITHOUT the caller's client_options (so at compute.googleapis.com).

Faults, as methods; a zone's fault stays until ``heal(zone)``:
  fail_zone(zone, reason="ZONE_RESOURCE_POOL_EXHAUSTED")  inserts there return an operation that
      is DONE with error.errors[{code: reason, message}], httpErrorStatusCode 503 and
      httpErrorMessage "SERVICE UNAVAILABLE", as GCE reports a stock-out; no instance is made.
      The client raises google.api_core.exceptions.ServiceUnavailable from operation.result().
  quota_exceeded(zone, metric="NVIDIA_L4_GPUS", immediate=False)  likewise with QUOTA_EXCEEDED,
      403 "FORBIDDEN" (client: Forbidden). immediate=True rejects the insert call itself with
      HTTP 403 reason quotaExceeded instead, GCE's other way of refusing on quota.
  throttle(n, status=429)  the next n requests, of any kind, answer ``status`` rateLimitExceeded.
  deny(project)  every request for that project answers 403 forbidden ("Required
      permission for 'projects/P'"), as GCE answers credentials that may not use
      the project (client: Forbidden, a PermissionDenied); ``allow(project)`` ends it.
  preempt(name)  preempts a SPOT instance: with instanceTerminationAction DELETE it is removed,
      otherwise status becomes TERMINATED and lastStopTimestamp is set; a DONE zone operation of
      type "compute.instances.preempted" is recorded either way. Not SPOT: ValueError.
``instances()`` copies every live instance; ``requests`` logs (verb, path, query) of each call.
Resource links use GCE's own base, https://www.googleapis.com/compute/v1/.

Set up, as methods (``gce_resources.Resources`` says what a new project starts with):
  set_quota(project, region, metric, limit, usage=0)  region None: the project-wide quota.
  add_image(project, name, family=None), add_network(project, name, auto=False),
  add_subnetwork(project, region, name, network, cidr), add_firewall(project, name, **fields)
  with GCE's JSON fields (network, direction, allowed [{IPProtocol, ports}], sourceRanges,
  sourceTags, targetTags, ...).
"""

from __future__ import annotations

import copy
import itertools
import json
import operator
import re
import threading
import time
import uuid
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.emulators import gce_resources, secret_manager
from tests.emulators.gce_resources import LINK, ApiError, Json, Resources
from tests.emulators.gce_resources import last as _last
from tests.emulators.gce_resources import not_found as _not_found
from tests.emulators.gce_resources import now as _now
from tests.emulators.secret_manager import SecretManager


@dataclass(frozen=True)
class MachineType:
    name: str
    guest_cpus: int
    memory_mb: int
    accelerator: str | None = None
    accelerator_count: int = 0
    zones: tuple[str, ...] = ()  # where it is offered; none: every zone

    def offered(self, zone: str) -> bool:
        return not self.zones or zone in self.zones


DEFAULT_CATALOG = (
    MachineType("g2-standard-8", 8, 32768, "nvidia-l4", 1),
    MachineType("a2-highgpu-1g", 12, 87040, "nvidia-tesla-a100", 1),
    MachineType("a3-highgpu-8g", 208, 1904640, "nvidia-h100-80gb", 8),
    MachineType("n2-standard-4", 4, 16384),  # a CPU type, for a pool's Ray head
    # GCE offers A100 80GB in few zones
    MachineType("a2-ultragpu-1g", 12, 174080, "nvidia-a100-80gb", 1, ("us-central1-a",)),
)


@dataclass(frozen=True)
class _Fault:
    code: str  # the operation's error code, e.g. ZONE_RESOURCE_POOL_EXHAUSTED
    http: int
    http_message: str
    message: str  # may name {project} and {zone}
    immediate: bool = False  # refuse the insert call rather than fail its operation


_CLAUSE = re.compile(r'\s*(?:AND\s+)?\(?\s*([\w.-]+)\s*(!=|=)\s*("[^"]*"|[^\s()"]+)\s*\)?')


def _parse_filter(text: str) -> list[tuple[str, str, str]]:
    clauses, pos, text = [], 0, text.strip()
    while pos < len(text):
        m = _CLAUSE.match(text, pos)
        if not m:
            raise ApiError(400, "invalid", f"Invalid value for field 'filter': '{text}'.")
        clauses.append((m[1], m[2], m[3].strip('"')))
        pos = m.end()
    return clauses


def _matches(resource: Json, clauses: list[tuple[str, str, str]]) -> bool:
    for field, op, want in clauses:
        value: Any = resource
        for part in field.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        if (value is not None and str(value) == want) != (op == "="):
            return False
    return True


_P = r"/compute/v1/projects/(?P<project>[^/]+)"
_Z = _P + r"/zones/(?P<zone>[^/]+)"
ROUTES = [
    ("POST", _Z + r"/instances", "_insert"),
    ("GET", _Z + r"/instances", "_list"),
    ("GET", _Z + r"/instances/(?P<name>[^/]+)", "_get"),
    ("DELETE", _Z + r"/instances/(?P<name>[^/]+)", "_delete"),
    ("GET", _P + r"/aggregated/instances", "_aggregated"),
    ("GET", _Z + r"/operations", "_list_operations"),
    ("GET", _Z + r"/operations/(?P<op>[^/]+)", "_get_operation"),
    ("POST", _Z + r"/operations/(?P<op>[^/]+)/wait", "_get_operation"),
    ("GET", _Z + r"/machineTypes", "_machine_types"),
    ("GET", _Z + r"/machineTypes/(?P<name>[^/]+)", "_machine_type"),
    ("GET", _Z + r"/acceleratorTypes", "_accelerator_types"),
    *[(verb, path, f"resources.{name}") for verb, path, name in gce_resources.ROUTES],
    *[(verb, path, f"secrets.{name}") for verb, path, name in secret_manager.ROUTES],
]


class GceEmulator:
    def __init__(self, catalog: tuple[MachineType, ...] = DEFAULT_CATALOG) -> None:
        self.catalog = {m.name: m for m in catalog}
        self.resources = Resources()
        self.secrets = SecretManager()  # Secret Manager's API, on the same endpoint
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self.endpoint, self.port = "", 0
        self._lock = threading.Lock()
        self._instances: dict[tuple[str, str, str], Json] = {}  # (project, zone, name)
        self._ops: dict[tuple[str, str, str], Json] = {}  # (project, zone, operation)
        self._by_request_id: dict[tuple[str, str], Json] = {}  # (project, requestId) -> op
        self._faults: dict[str, _Fault] = {}
        self._throttle = (0, 429)  # (requests left to refuse, status)
        self._denied: set[str] = set()  # projects the caller may not use
        self._ids = itertools.count(4_000_000_000_000_000_001, 7919)
        self._hosts = itertools.count(2)
        self._server: ThreadingHTTPServer | None = None

    def start(self) -> GceEmulator:
        handler = type("Handler", (_Handler,), {"emulator": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.port = self._server.server_address[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> GceEmulator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def fail_zone(self, zone: str, reason: str = "ZONE_RESOURCE_POOL_EXHAUSTED") -> None:
        message = (
            "The zone 'projects/{project}/zones/{zone}' does not have enough resources "
            "available to fulfill the request.  Try a different zone, or try again later."
        )
        with self._lock:
            self._faults[zone] = _Fault(reason, 503, "SERVICE UNAVAILABLE", message)

    def quota_exceeded(
        self, zone: str, metric: str = "NVIDIA_L4_GPUS", immediate: bool = False
    ) -> None:
        message = f"Quota '{metric}' exceeded.  Limit: 0.0 in region {zone.rsplit('-', 1)[0]}."
        with self._lock:
            self._faults[zone] = _Fault("QUOTA_EXCEEDED", 403, "FORBIDDEN", message, immediate)

    def heal(self, zone: str) -> None:
        with self._lock:
            self._faults.pop(zone, None)

    def throttle(self, n: int, status: int = 429) -> None:
        with self._lock:
            self._throttle = (n, status)

    def deny(self, project: str) -> None:
        with self._lock:
            self._denied.add(project)

    def allow(self, project: str) -> None:
        with self._lock:
            self._denied.discard(project)

    def set_quota(
        self, project: str, region: str | None, metric: str, limit: float, usage: float = 0
    ) -> None:
        with self._lock:
            self.resources.set_quota(project, region, metric, limit, usage)

    def add_image(self, project: str, name: str, family: str | None = None) -> Json:
        with self._lock:
            return copy.deepcopy(self.resources.add_image(project, name, family))

    def add_network(self, project: str, name: str, auto: bool = False) -> Json:
        with self._lock:
            return copy.deepcopy(self.resources.add_network(project, name, auto))

    def add_subnetwork(self, project: str, region: str, name: str, network: str, cidr: str) -> Json:
        with self._lock:
            return copy.deepcopy(
                self.resources.add_subnetwork(project, region, name, network, cidr)
            )

    def add_firewall(self, project: str, name: str, **fields: Any) -> Json:
        with self._lock:
            return copy.deepcopy(self.resources.add_firewall(project, name, **fields))

    def preempt(self, name: str, notice: bool = False) -> Json:
        """Preempt the SPOT instance ``name`` (in whichever zone it is); returns its last state.
        ``notice=True`` only begins it: the instance is ``STOPPING``, as in the ~30 s Compute
        Engine gives a preempted instance; a second call finishes it."""
        with self._lock:
            keys = [k for k in self._instances if k[2] == name]
            if len(keys) != 1:
                raise KeyError(f"{len(keys)} instances are named {name!r}")
            inst = self._instances[keys[0]]
            if inst["scheduling"].get("provisioningModel") != "SPOT":
                raise ValueError(f"{name} is not a SPOT instance")
            if notice:
                inst.update(status="STOPPING")
                return copy.deepcopy(inst)
            if inst["scheduling"].get("instanceTerminationAction") == "DELETE":
                del self._instances[keys[0]]
            else:
                inst.update(status="TERMINATED", lastStopTimestamp=_now())
            op = self._operation(keys[0][0], keys[0][1], "compute.instances.preempted", inst, None)
            op["statusMessage"] = "Instance was preempted."
            return copy.deepcopy(inst)

    def instances(self) -> list[Json]:
        with self._lock:
            return copy.deepcopy(list(self._instances.values()))

    def dispatch(self, verb: str, path: str, query: dict[str, str], body: Json) -> tuple[int, Json]:
        with self._lock:
            self.requests.append((verb, path, dict(query)))
            try:
                left, status = self._throttle
                if left > 0:
                    self._throttle = (left - 1, status)
                    raise ApiError(status, "rateLimitExceeded", "Rate Limit Exceeded")
                for method, pattern, handler in ROUTES:
                    m = re.fullmatch(pattern, path)
                    if m and m["project"] in self._denied:
                        what = f"projects/{m['project']}"
                        raise ApiError(403, "forbidden", f"Required permission for '{what}'")
                    if m and method == verb:  # copy: the handler thread serializes it unlocked
                        serve = operator.attrgetter(handler)(self)
                        reply = serve(query=query, body=body, **m.groupdict())
                        return 200, copy.deepcopy(reply)
                raise ApiError(501, "notImplemented", f"GceEmulator does not serve {verb} {path}")
            except ApiError as err:
                return err.status, err.body()

    def _operation(self, project: str, zone: str, kind: str, target: Json, rid: str | None) -> Json:
        name, now = f"operation-{int(time.time() * 1000)}-{uuid.uuid4().hex[:12]}", _now()
        zone_link = f"{LINK}projects/{project}/zones/{zone}"
        op = {
            "kind": "compute#operation", "id": str(next(self._ids)), "name": name,
            "zone": zone_link, "operationType": kind, "targetLink": target["selfLink"],
            "targetId": target["id"], "status": "DONE", "progress": 100, "user": "emulator",
            "insertTime": now, "startTime": now, "endTime": now,
            "selfLink": f"{zone_link}/operations/{name}",
        }  # fmt: skip
        if rid:
            op["clientOperationId"] = rid
            self._by_request_id[(project, rid)] = op
        self._ops[(project, zone, name)] = op
        return op

    def _insert(self, project: str, zone: str, query: dict[str, str], body: Json) -> Json:
        rid = query.get("requestId")
        if rid and (project, rid) in self._by_request_id:
            return self._by_request_id[(project, rid)]
        name, machine_link = body.get("name", ""), body.get("machineType", "")
        if not re.fullmatch(r"[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?", name):
            raise ApiError(400, "invalid", f"Invalid value for field 'resource.name': '{name}'.")
        machine = self.catalog.get(_last(machine_link))
        if machine is None or not machine.offered(zone):
            where = f"Machine type '{_last(machine_link)}' does not exist in zone '{zone}'."
            raise ApiError(
                400, "invalid", f"Invalid value for field 'resource.machineType': {where}"
            )
        if (project, zone, name) in self._instances:
            where = f"projects/{project}/zones/{zone}/instances/{name}"
            raise ApiError(409, "alreadyExists", f"The resource '{where}' already exists")
        fault = self._faults.get(zone)
        if fault and fault.immediate:
            raise ApiError(fault.http, "quotaExceeded", fault.message)
        # Accelerator-optimized types (g2, a2, a3) carry their GPUs without guestAccelerators.
        accelerators = body.get("guestAccelerators") or ([{
            "acceleratorType": machine.accelerator, "acceleratorCount": machine.accelerator_count,
        }] if machine.accelerator else [])  # fmt: skip
        scheduling = {"provisioningModel": "STANDARD", **body.get("scheduling", {})}
        if scheduling["provisioningModel"] == "SPOT":
            scheduling.setdefault("instanceTerminationAction", "STOP")
        zone_link, now, host = f"{LINK}projects/{project}/zones/{zone}", _now(), next(self._hosts)
        inst = {
            "kind": "compute#instance", "id": str(next(self._ids)), "name": name,
            "zone": zone_link, "machineType": f"{zone_link}/machineTypes/{machine.name}",
            "status": "RUNNING", "labels": dict(body.get("labels", {})), "scheduling": scheduling,
            "guestAccelerators": [{
                "acceleratorType": f"{zone_link}/acceleratorTypes/{_last(a['acceleratorType'])}",
                "acceleratorCount": int(a.get("acceleratorCount", 1))} for a in accelerators],
            "metadata": {"kind": "compute#metadata", **body.get("metadata", {})},
            "creationTimestamp": now, "lastStartTimestamp": now,
            "selfLink": f"{zone_link}/instances/{name}", **self._sent(project, zone, body, host),
        }  # fmt: skip
        op = self._operation(project, zone, "insert", inst, rid)
        if fault:
            message = fault.message.format(project=project, zone=zone)
            op["error"] = {"errors": [{"code": fault.code, "message": message}]}
            op["httpErrorStatusCode"], op["httpErrorMessage"] = fault.http, fault.http_message
        else:
            self._instances[(project, zone, name)] = inst
        return op

    def _sent(self, project: str, zone: str, body: Json, host: int) -> Json:
        """What an instance keeps as it was sent: its disks, tags, service accounts and network
        interfaces (these with full links and an address)."""
        sent = body.get("networkInterfaces") or [{}]
        interfaces = [
            {"name": f"nic{n}", **self.resources.interface(project, zone, nic, host)}
            for n, nic in enumerate(sent)
        ]
        tags = {"fingerprint": uuid.uuid5(uuid.NAMESPACE_URL, str(body.get("tags"))).hex[:16]}
        return {
            "networkInterfaces": interfaces,
            "tags": {**body.get("tags", {}), **tags},
            "serviceAccounts": list(body.get("serviceAccounts", [])),
            "disks": [{"kind": "compute#attachedDisk", **d} for d in body.get("disks", [])],
        }

    def _get(self, project: str, zone: str, name: str, **_: Any) -> Json:
        inst = self._instances.get((project, zone, name))
        if inst is None:
            raise _not_found(f"projects/{project}/zones/{zone}/instances/{name}")
        return inst

    def _select(self, query: dict[str, str], rows: list[Json], key: str = "name") -> list[Json]:
        clauses = _parse_filter(query.get("filter", ""))
        return sorted((r for r in rows if _matches(r, clauses)), key=lambda r: str(r[key]))

    def _list(self, project: str, zone: str, query: dict[str, str], **_: Any) -> Json:
        rows = [i for k, i in self._instances.items() if k[:2] == (project, zone)]
        rows = self._select(query, rows)
        token = query.get("pageToken") or "0"
        if not token.isdigit():
            raise ApiError(400, "invalid", f"Invalid value for field 'pageToken': '{token}'.")
        start, size = int(token), min(int(query.get("maxResults") or 500), 500)
        page: Json = {"kind": "compute#instanceList", "items": rows[start : start + size]}
        if start + size < len(rows):
            page["nextPageToken"] = str(start + size)
        return page

    def _aggregated(self, project: str, query: dict[str, str], **_: Any) -> Json:
        items: dict[str, Json] = {}
        for inst in self._select(query, [i for k, i in self._instances.items() if k[0] == project]):
            items.setdefault(f"zones/{_last(inst['zone'])}", {"instances": []})
            items[f"zones/{_last(inst['zone'])}"]["instances"].append(inst)
        return {"kind": "compute#instanceAggregatedList", "items": items}

    def _delete(self, project: str, zone: str, name: str, query: dict[str, str], **_: Any) -> Json:
        rid = query.get("requestId")
        if rid and (project, rid) in self._by_request_id:
            return self._by_request_id[(project, rid)]
        inst = self._get(project, zone, name)
        del self._instances[(project, zone, name)]
        return self._operation(project, zone, "delete", inst, rid)

    def _get_operation(self, project: str, zone: str, op: str, **_: Any) -> Json:
        found = self._ops.get((project, zone, op))
        if found is None:
            raise _not_found(f"projects/{project}/zones/{zone}/operations/{op}")
        return found

    def _list_operations(self, project: str, zone: str, query: dict[str, str], **_: Any) -> Json:
        rows = [o for k, o in self._ops.items() if k[:2] == (project, zone)]
        return {"kind": "compute#operationList", "items": self._select(query, rows, "insertTime")}

    def _machine_type(self, project: str, zone: str, name: str, **_: Any) -> Json:
        self.resources.get_zone(project, zone)  # 404 for a zone that does not exist
        found = self.catalog.get(name)
        if found is None or not found.offered(zone):
            raise _not_found(f"projects/{project}/zones/{zone}/machineTypes/{name}")
        items: list[Json] = self._machine_types(project, zone)["items"]
        return next(i for i in items if i["name"] == name)

    def _machine_types(self, project: str, zone: str, **_: Any) -> Json:
        items = [{
            "kind": "compute#machineType", "id": str(1000 + n), "name": m.name, "zone": zone,
            "description": f"{m.guest_cpus} vCPUs, {m.memory_mb // 1024} GB RAM",
            "guestCpus": m.guest_cpus, "memoryMb": m.memory_mb,
            "accelerators": [{"guestAcceleratorType": m.accelerator,
                              "guestAcceleratorCount": m.accelerator_count}][: m.accelerator_count],
            "selfLink": f"{LINK}projects/{project}/zones/{zone}/machineTypes/{m.name}",
        } for n, m in enumerate(self.catalog.values()) if m.offered(zone)]  # fmt: skip
        return {"kind": "compute#machineTypeList", "items": items}

    def _accelerator_types(self, project: str, zone: str, **_: Any) -> Json:
        cards: dict[str, int] = {}
        for m in self.catalog.values():
            if m.accelerator and m.offered(zone):
                cards[m.accelerator] = max(cards.get(m.accelerator, 0), m.accelerator_count)
        zone_link = f"{LINK}projects/{project}/zones/{zone}"
        items = [{
            "kind": "compute#acceleratorType", "name": name, "description": name,
            "zone": zone_link, "maximumCardsPerInstance": most,
            "selfLink": f"{zone_link}/acceleratorTypes/{name}",
        } for name, most in cards.items()]  # fmt: skip
        return {"kind": "compute#acceleratorTypeList", "items": items}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    emulator: GceEmulator

    def log_message(self, *args: Any) -> None:
        pass

    def _serve(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        try:
            body = json.loads(raw) if raw.strip() else {}
        except ValueError:
            status, payload = 400, ApiError(400, "parseError", "Parse Error").body()
        else:
            status, payload = self.emulator.dispatch(self.command, url.path, query, body)
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=UTF-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_DELETE = do_PUT = do_PATCH = _serve
