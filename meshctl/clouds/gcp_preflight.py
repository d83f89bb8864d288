"""The preflight of a GCP pool (``meshctl pools check``): read-only Compute Engine calls,
nothing launched. See ``meshctl.clouds.preflight`` for what a check says.

- The network: the pool's (``default`` when unset, as a launch takes), and its subnetwork in
  the pool's region (unset: the one named after the network, as an auto-mode network has);
  the subnetwork's range is where the controller is taken to be unless ``controller_cidr``
  says otherwise.
- The ports: firewall rules are read as GCE's allow rules only (ingress, enabled, on that
  network, for all instances or the pool's tags or service account). A deny rule of higher
  priority that shadows one is not weighed: listing it would take the whole rule order.
- GPU quotas are regional, one metric per GPU model and market (NVIDIA_L4_GPUS,
  PREEMPTIBLE_NVIDIA_L4_GPUS); the need is each node type's ``max_nodes`` (capped by the
  pool's) times its GPUs from the catalog, plus one head. The project's GPUS_ALL_REGIONS, a
  new project's usual stumbling block (often 0), is checked against the total.
- A call an emulator does not serve (501) is a ``skip`` for an emulated pool, a failure for
  a real account. google-cloud-compute is imported when a preflight runs, never at start-up.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from meshctl.clouds.base import Unavailable
from meshctl.clouds.gcp import (
    _codes,
    _reason,
    client_kwargs,
    image_link,
    network_link,
    retried,
    subnetwork_link,
)
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
from meshctl.model.catalog import Catalog
from meshctl.model.mesh import GcpPool

CREDENTIALS, ZONES, IMAGE, NETWORK = "credentials", "zones", "image", "network"
PORTS, TYPES, QUOTA = "ports", "instance types", "GPU quota"
TIMEOUT_S = 20.0
QUOTA_METRICS = {  # catalog accelerator model -> GCE's regional quota metric
    "L4": "NVIDIA_L4_GPUS",
    "T4": "NVIDIA_T4_GPUS",
    "V100": "NVIDIA_V100_GPUS",
    "A100": "NVIDIA_A100_GPUS",
    "H100": "NVIDIA_H100_GPUS",
}
A100_80GB = "NVIDIA_A100_80GB_GPUS"  # A100 80 GB cards have a quota of their own
ALL_REGIONS = "GPUS_ALL_REGIONS"
ROLES = (
    "roles/compute.viewer (to check) and roles/compute.instanceAdmin.v1 with "
    "roles/iam.serviceAccountUser (to launch)"
)
_API = re.compile(r"^https://[^/]+/compute/v1/")


def quota_metric(model: str, memory_gib: float, spot: bool) -> str | None:
    """The regional quota a GPU counts against: L4 -> NVIDIA_L4_GPUS, an A100 of 80 GiB ->
    NVIDIA_A100_80GB_GPUS, spot -> PREEMPTIBLE_...; None for a model with no known metric."""
    key = model.upper().removeprefix("NVIDIA").strip(" -")
    metric = QUOTA_METRICS.get(key)
    if metric is None:
        return None
    if key == "A100" and memory_gib >= 80:
        metric = A100_80GB
    return f"PREEMPTIBLE_{metric}" if spot else metric


def gpus_wanted(pool: GcpPool, catalog: Catalog) -> list[tuple[str | None, int]]:
    """(quota metric, GPUs) per node type the catalog knows, and one head; types without a
    known metric come as (None, GPUs)."""
    nodes = [(t.name, min(t.max_nodes, pool.max_nodes), t.spot) for t in pool.node_types]
    if pool.head_node_type:
        nodes.append((pool.head_node_type, 1, False))  # the head is never spot
    wants = []
    for name, count, spot in nodes:
        found = catalog.instance_type(name)
        if found is not None:
            card = found.accelerator
            wants.append((quota_metric(card.model, card.memory_gib, spot), count * card.count))
    return wants


@dataclass(frozen=True, slots=True)
class ImageRef:
    project: str
    name: str  # an image's, or a family's
    family: bool


def image_ref(image: str, project: str) -> ImageRef | None:
    """Where an image setting points: ``projects/P/global/images/[family/]N``, a full URL of
    one, ``global/images/...`` or a bare name (the pool's project); None when it is neither."""
    link = _API.sub("", image_link(image))
    found = re.fullmatch(r"(?:projects/([^/]+)/)?global/images/(family/)?([^/]+)", link)
    if found is None:
        return None
    return ImageRef(found.group(1) or project, found.group(3), found.group(2) is not None)


def network_ref(network: str | None, project: str) -> tuple[str, str] | None:
    """(project, name) of the pool's network: ``default`` when unset, as a launch takes."""
    link = _API.sub("", network_link(project, network or "default"))
    found = re.fullmatch(r"(?:projects/([^/]+)/)?global/networks/([^/]+)", link)
    return (found.group(1) or project, found.group(2)) if found else None


def subnetwork_ref(
    subnetwork: str | None, project: str, region: str, network: str
) -> tuple[str, str, str] | None:
    """(project, region, name) of the pool's subnetwork; unset: the one named after the
    network (an auto-mode network's). ``project`` is the network's (a shared VPC's host)."""
    link = _API.sub("", subnetwork_link(project, region, subnetwork or network))
    found = re.fullmatch(r"(?:projects/([^/]+)/)?regions/([^/]+)/subnetworks/([^/]+)", link)
    return (found.group(1) or project, found.group(2), found.group(3)) if found else None


@dataclass(frozen=True, slots=True)
class Rule:
    """A firewall rule as the ports check reads it: what TCP it lets in, from where, to whom."""

    name: str
    network: str  # projects/P/global/networks/N
    tcp: tuple[tuple[int, int], ...]  # port ranges; a rule allowing every protocol: (0, 65535)
    source_ranges: tuple[str, ...] = ()
    source_tags: tuple[str, ...] = ()
    target_tags: tuple[str, ...] = ()
    target_accounts: tuple[str, ...] = ()

    def applies(self, tags: Iterable[str], account: str | None) -> bool:
        """Whether it reaches instances with these tags and this service account."""
        if not self.target_tags and not self.target_accounts:
            return True
        return bool(set(self.target_tags) & set(tags)) or account in self.target_accounts


def tcp_ranges(allowed: Iterable[tuple[str, Sequence[str]]]) -> list[tuple[int, int]]:
    """The TCP port ranges of a rule's ``allowed`` (protocol, ports): no ports is all."""
    found = []
    for protocol, ports in allowed:
        if protocol.lower() not in ("tcp", "all", "6"):
            continue
        if not ports:
            found.append((0, 65535))
        for port in ports:
            low, _, high = port.partition("-")
            found.append((int(low), int(high or low)))
    return found


def rule_of(raw: Any) -> Rule | None:
    """A google-cloud-compute ``Firewall`` as a ``Rule``; None for one that lets nothing in
    (disabled, egress, or a deny rule)."""
    if raw.disabled or (raw.direction or "INGRESS") != "INGRESS" or not raw.allowed:
        return None
    return Rule(
        raw.name,
        _API.sub("", raw.network),
        tuple(tcp_ranges((a.I_p_protocol, list(a.ports)) for a in raw.allowed)),
        tuple(raw.source_ranges),
        tuple(raw.source_tags),
        tuple(raw.target_tags),
        tuple(raw.target_service_accounts),
    )


def closed_to(rules: Iterable[Rule], ports: Sequence[int], source: str) -> list[int]:
    """The ``ports`` no rule opens to ``source`` (a CIDR)."""
    opened = [(low, high, cidr) for r in rules for low, high in r.tcp for cidr in r.source_ranges]
    return missing_ports(opened, ports, source)


def connected(rules: Iterable[Rule], tags: Iterable[str], subnet_range: str | None) -> bool:
    """Whether some rule lets the pool's instances reach each other on every TCP port (Ray's
    GCS, raylets and object managers pick theirs): from the pool's tags or the subnetwork."""
    for rule in rules:
        if not any(low <= 1 and high >= 65535 for low, high in rule.tcp):
            continue
        if set(rule.source_tags) & set(tags):
            return True
        every = [(0, 65535, cidr) for cidr in rule.source_ranges]
        if subnet_range and not missing_ports(every, [GCS_PORT], subnet_range):
            return True
    return False


def preflight(pool: GcpPool, catalog: Catalog | None) -> list[Check]:
    """Every check of ``pool``, in the order an operator fixes them; nothing is launched.
    After refused credentials nothing else is asked: every call would be refused alike."""
    found = settings(pool)
    try:
        probe = Probe(pool, catalog, client_kwargs(pool.endpoint_url, pool.credentials_file))
    except Unavailable as err:
        return [*found, failed(CREDENTIALS, str(err), _credentials_fix(pool))]
    for name, check in probe.checks():
        found.append(probe.run(name, check))
        if name == CREDENTIALS and not found[-1].ok:
            break
    return found


class Probe:
    """The checks after the settings, sharing what they look up once (the project, the
    region, the subnetwork's range)."""

    def __init__(self, pool: GcpPool, catalog: Catalog | None, kwargs: dict[str, Any]) -> None:
        from google.cloud import compute_v1 as c  # ~2 s to import: only when a check runs

        self.pool, self.catalog, self.who = pool, catalog, kwargs["credentials"]
        self.zones = list(pool.zones) or [f"{pool.region}-a"]  # as a launch takes them
        self.net = network_ref(pool.network, pool.project)
        self.subnet_range: str | None = None  # known once the network check passed
        self.clients: dict[str, Any] = {
            "projects": c.ProjectsClient(**kwargs),
            "regions": c.RegionsClient(**kwargs),
            "zones": c.ZonesClient(**kwargs),
            "images": c.ImagesClient(**kwargs),
            "networks": c.NetworksClient(**kwargs),
            "subnetworks": c.SubnetworksClient(**kwargs),
            "firewalls": c.FirewallsClient(**kwargs),
            "types": c.MachineTypesClient(**kwargs),
        }
        self._project: Any = None
        self._region: Any = None

    def checks(self) -> list[tuple[str, Callable[[], Check]]]:
        return [
            (CREDENTIALS, self.credentials),
            (ZONES, self.zones_check),
            (IMAGE, self.image),
            (NETWORK, self.network),
            (PORTS, self.ports),
            (TYPES, self.instance_types),
            (QUOTA, self.quota),
        ]

    def run(self, name: str, check: Callable[[], Check]) -> Check:
        """``check()``; an API the emulator does not serve is a skip for an emulated pool."""

        def judged() -> Check:
            try:
                return check()
            except Exception as err:
                if self.pool.emulated and _unserved(err):
                    return skipped(name, f"the emulator does not serve it: {_reason(err)}")
                raise

        return guarded(name, judged, _reason)

    def call(self, client: str, method: str, **kwargs: Any) -> Any:
        serve = getattr(self.clients[client], method)
        return retried(lambda: serve(timeout=TIMEOUT_S, **kwargs))

    def found(self, client: str, method: str, **kwargs: Any) -> Any:
        """The resource, or None where it does not exist (404)."""
        from google.api_core import exceptions

        try:
            return self.call(client, method, **kwargs)
        except exceptions.NotFound:
            return None

    def project(self) -> Any:
        if self._project is None:
            self._project = self.call("projects", "get", project=self.pool.project)
        return self._project

    def region(self) -> Any:
        if self._region is None:
            pool = self.pool
            self._region = self.found("regions", "get", project=pool.project, region=pool.region)
        return self._region

    def credentials(self) -> Check:
        from google.api_core import exceptions
        from google.auth.exceptions import GoogleAuthError

        project = self.pool.project
        try:
            self.project()
        except (exceptions.Forbidden, exceptions.Unauthorized, GoogleAuthError) as err:
            if "accessNotConfigured" in _codes(err):
                fix = f"gcloud services enable compute.googleapis.com --project {project}"
                return failed(CREDENTIALS, f"Compute Engine API not enabled: {_reason(err)}", fix)
            detail = f"credentials refused: {_reason(err)}"
            return failed(CREDENTIALS, detail, _credentials_fix(self.pool))
        except exceptions.NotFound:
            fix = "set project in mesh.yaml to the project's id (gcloud projects list)"
            return failed(CREDENTIALS, f"project {project} not found", fix)
        who = getattr(self.who, "service_account_email", None)
        return passed(CREDENTIALS, f"project {project} readable" + (f" as {who}" if who else ""))

    def zones_check(self) -> Check:
        project, region = self.pool.project, self.pool.region
        if self.region() is None:
            fix = "set region to a Compute Engine region (gcloud compute regions list)"
            return failed(ZONES, f"region {region} not found", fix)
        found = {z: self.found("zones", "get", project=project, zone=z) for z in self.zones}
        missing = [z for z, got in found.items() if got is None]
        elsewhere = [z for z, got in found.items() if got and _last(got.region) != region]
        if missing or elsewhere:
            said = [f"{', '.join(missing)} not found"] if missing else []
            said += [f"{', '.join(elsewhere)} not in {region}"] if elsewhere else []
            offered = ", ".join(sorted(_last(z) for z in self.region().zones))
            return failed(ZONES, "; ".join(said), f"set zones to some of: {offered}")
        return passed(ZONES, f"{', '.join(self.zones)} in {region}")

    def image(self) -> Check:
        image, pool = self.pool.image, self.pool
        if image is None:
            if pool.emulated:
                return passed(IMAGE, "not set: the default image")
            return skipped(IMAGE, "not set (see setting image)")
        ref = image_ref(image, pool.project)
        fix = (
            "set image to projects/P/global/images/NAME or projects/P/global/images/family/F "
            f"(gcloud compute images list --project {ref.project if ref else pool.project})"
        )
        if ref is None:
            return failed(IMAGE, f"{image}: not an image or image family link", fix)
        method, key = ("get_from_family", "family") if ref.family else ("get", "image")
        found = self.found("images", method, project=ref.project, **{key: ref.name})
        if found is None:
            return failed(IMAGE, f"{image}: not found", fix)
        state = found.deprecated.state if found.deprecated else ""
        if found.status != "READY" or state in ("OBSOLETE", "DELETED"):
            return failed(IMAGE, f"{image}: {found.name} is {state or found.status}", fix)
        family = f" (family {found.family})" if found.family else ""
        return passed(IMAGE, f"{image}: {found.name}{family}")

    def network(self) -> Check:
        pool = self.pool
        if self.net is None:
            fix = "set network to a name or projects/P/global/networks/N"
            return failed(NETWORK, f"{pool.network}: not a network link", fix)
        project, name = self.net
        if self.found("networks", "get", project=project, network=name) is None:
            fix = f"set network to a VPC network (gcloud compute networks list --project {project})"
            return failed(NETWORK, f"network {name} not found in project {project}", fix)
        sub = subnetwork_ref(pool.subnetwork, project, pool.region, name)
        if sub is None or sub[1] != pool.region:
            fix = f"set subnetwork to a subnetwork of {name} in {pool.region}"
            return failed(NETWORK, f"subnetwork {pool.subnetwork}: not in {pool.region}", fix)
        project, region, subnet = sub
        found = self.found("subnetworks", "get", project=project, region=region, subnetwork=subnet)
        if found is None:
            create = (
                f"gcloud compute networks subnets create {subnet} --project {project} "
                f"--network {name} --region {region} --range 10.0.0.0/20"
            )
            fix = f"{create}, or set subnetwork to an existing one"
            return failed(NETWORK, f"subnetwork {subnet} not found in {region}", fix)
        if _last(found.network) != name:
            detail = f"subnetwork {subnet} is in network {_last(found.network)}, not {name}"
            return failed(NETWORK, detail, "set network and subnetwork to match")
        self.subnet_range = found.ip_cidr_range
        return passed(NETWORK, f"network {name}, subnetwork {subnet} ({found.ip_cidr_range})")

    def ports(self) -> Check:
        pool, subnet_range = self.pool, self.subnet_range
        if self.net is None or subnet_range is None:
            return skipped(PORTS, "not judged: see the network check")
        project, name = self.net
        link = f"projects/{project}/global/networks/{name}"
        rules = [
            r
            for r in map(rule_of, self.call("firewalls", "list", project=project))
            if r is not None and r.network == link
            if r.applies(pool.network_tags, pool.service_account)
        ]
        source = pool.controller_cidr or subnet_range
        closed = closed_to(rules, [DASHBOARD_PORT, pool.agent_port], source)
        said, fixes = [], []
        if closed:
            said.append(f"tcp {', '.join(map(str, closed))} not open to {source}")
            fixes.append(_open_fix(pool, project, name, closed, source))
        if not connected(rules, pool.network_tags, subnet_range):
            said.append(
                f"the pool's instances cannot reach each other on every TCP port "
                f"(Ray's GCS {GCS_PORT} and its nodes' ports)"
            )
            fixes.append(_internal_fix(pool, project, name, subnet_range))
        if said:
            return failed(PORTS, f"network {name}: " + "; ".join(said), "; ".join(fixes))
        opened = f"tcp {DASHBOARD_PORT}, {pool.agent_port} open to {source}"
        return passed(PORTS, f"{opened}; every TCP port between the pool's instances")

    def instance_types(self) -> Check:
        types = sorted({t.name for t in self.pool.node_types} | head_types(self.pool))
        offered = {t: [z for z in self.zones if self._offered(t, z)] for t in types}
        missing = [t for t in types if not offered[t]]
        if missing:
            zones = ", ".join(self.zones)
            listing = f'gcloud compute machine-types list --filter="name:({",".join(missing)})"'
            fix = f"pick other types or zones ({listing})"
            return failed(TYPES, f"{', '.join(missing)} not offered in {zones}", fix)
        return passed(TYPES, "; ".join(f"{t} in {', '.join(offered[t])}" for t in types))

    def _offered(self, machine_type: str, zone: str) -> bool:
        project = self.pool.project
        got = self.found("types", "get", project=project, zone=zone, machine_type=machine_type)
        return got is not None

    def quota(self) -> Check:
        if self.catalog is None:
            return skipped(QUOTA, "no GCP catalog to count the node types' GPUs from")
        needed = needed_per_quota(gpus_wanted(self.pool, self.catalog))
        if not needed:
            return passed(QUOTA, "no GPU quota limits these types")
        if self.region() is None:
            return skipped(QUOTA, "not judged: see the zones check")
        left = {q.metric: (q.limit - q.usage, q.limit) for q in self.region().quotas}
        short, seen = [], []
        for metric, gpus in sorted(needed.items()):
            room, limit = left.get(metric, (0.0, 0.0))
            seen.append(f"{metric} needs {gpus}, {room:g} left")
            if room < gpus:
                where = f"(limit {limit:g}) in {self.pool.region}"
                short.append(f"{metric} needs {gpus}, {room:g} left {where}")
        short += self._all_regions(sum(needed.values()))
        if short:
            fix = (
                "request a quota increase in the console (IAM & Admin > Quotas, the metric "
                "and region above), or lower max_nodes"
            )
            return failed(QUOTA, "; ".join(short), fix)
        return passed(QUOTA, ", ".join(seen))

    def _all_regions(self, gpus: int) -> list[str]:
        """The project's GPUS_ALL_REGIONS, when it reports one, against every GPU needed."""
        for q in self.project().quotas:
            if q.metric == ALL_REGIONS and q.limit - q.usage < gpus:
                room = q.limit - q.usage
                return [f"{ALL_REGIONS} needs {gpus}, {room:g} left (limit {q.limit:g})"]
        return []


def _credentials_fix(pool: GcpPool) -> str:
    where = "GOOGLE_APPLICATION_CREDENTIALS (or credentials_file in mesh.yaml)"
    if pool.credentials_file:
        where = "credentials_file in mesh.yaml"
    return f"set {where} to a key of a service account with, on {pool.project}, {ROLES}"


def _open_fix(pool: GcpPool, project: str, network: str, ports: list[int], source: str) -> str:
    allow = ",".join(f"tcp:{p}" for p in ports)
    return (
        f"gcloud compute firewall-rules create {_stem(pool)}-controller --project {project} "
        f"--network {network} --direction INGRESS --allow {allow} --source-ranges {source}"
        + _targets(pool)
    )


def _internal_fix(pool: GcpPool, project: str, network: str, subnet_range: str) -> str:
    tags = ",".join(pool.network_tags)
    sources = f"--source-tags {tags}" if tags else f"--source-ranges {subnet_range}"
    return (
        f"gcloud compute firewall-rules create {_stem(pool)}-internal --project {project} "
        f"--network {network} --direction INGRESS --allow tcp {sources}" + _targets(pool)
    )


def _targets(pool: GcpPool) -> str:
    return f" --target-tags {','.join(pool.network_tags)}" if pool.network_tags else ""


def _stem(pool: GcpPool) -> str:
    return ("meshctl-" + re.sub(r"[^a-z0-9-]", "-", pool.name.lower())).rstrip("-")[:50]


def _last(link: str) -> str:
    return link.rstrip("/").rsplit("/", 1)[-1]


def _unserved(err: Exception) -> bool:
    from google.api_core import exceptions

    return isinstance(err, exceptions.MethodNotImplemented) or "notImplemented" in _codes(err)
