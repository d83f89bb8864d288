"""The GCE emulator's world around its instances: projects, regions and zones with quotas,
images, networks, subnetworks and firewall rules; read-only over REST, set up by methods.

Every project exists and, when first touched, gets what Compute Engine gives a new project:
the auto-mode ``default`` network with a ``default`` subnetwork per region (GCE's own ranges,
10.128.0.0/20 in us-central1), the rules ``default-allow-internal`` (all TCP, UDP and ICMP
from 10.128.0.0/9) and ``default-allow-ssh``, and ``DEFAULT_QUOTAS`` in every region: a
generous limit for every GPU the catalogs hold, on-demand and preemptible. The image family
meshctl boots by default (deeplearning-platform-release, common-cu124-debian-11) exists.

Served, under /compute/v1/projects/{project} (``ROUTES``, joined to the emulator's):
  GET  (the project)                    with its project-wide quotas (GPUS_ALL_REGIONS, ...)
  GET  regions/{r}                      with ``quotas`` [{metric, limit, usage}] and ``zones``
  GET  zones/{z}
  GET  global/images/{i}                404 notFound when missing
  GET  global/images/family/{f}         the family's newest image that is not deprecated
  GET  global/networks/{n}, regions/{r}/subnetworks/{s}
  GET  global/firewalls                 every rule of the project (no ?filter=: 501)

The shared vocabulary of both halves of the emulator lives here too: ``ApiError`` (Google's
JSON error shape), ``LINK`` (resource links' base) and the small helpers around them.
"""

from __future__ import annotations

import itertools
import zlib
from datetime import UTC, datetime
from typing import Any

LINK = "https://www.googleapis.com/compute/v1/"
Json = dict[str, Any]

REGIONS: dict[str, tuple[str, ...]] = {  # region -> its zones' suffixes
    "us-central1": ("a", "b", "c", "f"),
    "us-east1": ("b", "c", "d"),
    "us-east4": ("a", "b", "c"),
    "us-west1": ("a", "b", "c"),
    "europe-west4": ("a", "b", "c"),
    "asia-southeast1": ("a", "b", "c"),
}
AUTO_RANGES = {  # the default network's subnetwork of each region, as GCE allocates them
    "us-central1": "10.128.0.0/20",
    "us-east1": "10.142.0.0/20",
    "us-east4": "10.150.0.0/20",
    "us-west1": "10.138.0.0/20",
    "europe-west4": "10.164.0.0/20",
    "asia-southeast1": "10.148.0.0/20",
}
GPUS = ("NVIDIA_L4_GPUS", "NVIDIA_T4_GPUS", "NVIDIA_V100_GPUS", "NVIDIA_A100_GPUS",
        "NVIDIA_A100_80GB_GPUS", "NVIDIA_H100_GPUS")  # fmt: skip
DEFAULT_QUOTAS: dict[str, float] = {
    "CPUS": 2400.0,
    **dict.fromkeys(GPUS, 256.0),
    **{f"PREEMPTIBLE_{metric}": 256.0 for metric in GPUS},
}
PROJECT_QUOTAS: dict[str, float] = {"CPUS_ALL_REGIONS": 10000.0, "GPUS_ALL_REGIONS": 1024.0}
DEFAULT_IMAGE = ("deeplearning-platform-release", "common-cu124-debian-11-v20240611",
                 "common-cu124-debian-11")  # fmt: skip
FIREWALL_FIELDS = frozenset({
    "network", "direction", "priority", "allowed", "denied", "sourceRanges", "sourceTags",
    "targetTags", "targetServiceAccounts", "sourceServiceAccounts", "disabled", "description",
})  # fmt: skip


class ApiError(Exception):
    """An HTTP error in Google's JSON error format."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status, self.reason, self.message = status, reason, message

    def body(self) -> Json:
        domain = "usageLimits" if self.reason == "rateLimitExceeded" else "global"
        error = {"message": self.message, "domain": domain, "reason": self.reason}
        return {"error": {"code": self.status, "message": self.message, "errors": [error]}}


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def last(url: str) -> str:
    return url.rstrip("/").rsplit("/", 1)[-1]


def not_found(path: str) -> ApiError:
    return ApiError(404, "notFound", f"The resource '{path}' was not found")


def full_link(project: str, link: str) -> str:
    """A link as GCE writes it back: ``https://.../projects/P/...`` from a relative one."""
    if link.startswith("https://"):
        return link
    if link.startswith("projects/"):
        return LINK + link
    return f"{LINK}projects/{project}/{link.lstrip('/')}"


def relative(link: str) -> str:
    """``projects/P/...`` of a full link."""
    return link.removeprefix(LINK)


_P = r"/compute/v1/projects/(?P<project>[^/]+)"
ROUTES = [
    ("GET", _P, "get_project"),
    ("GET", _P + r"/regions/(?P<region>[^/]+)", "get_region"),
    ("GET", _P + r"/zones/(?P<zone>[^/]+)", "get_zone"),
    ("GET", _P + r"/global/images/family/(?P<family>[^/]+)", "get_image_from_family"),
    ("GET", _P + r"/global/images/(?P<image>[^/]+)", "get_image"),
    ("GET", _P + r"/global/networks/(?P<network>[^/]+)", "get_network"),
    ("GET", _P + r"/regions/(?P<region>[^/]+)/subnetworks/(?P<subnetwork>[^/]+)", "get_subnetwork"),
    ("GET", _P + r"/global/firewalls", "list_firewalls"),
]


class Resources:
    """The state behind ``ROUTES``; the emulator holds its lock around every call here."""

    def __init__(self) -> None:
        self.quotas: dict[tuple[str, str | None], dict[str, list[float]]] = {}  # [limit, usage]
        self.images: dict[tuple[str, str], Json] = {}  # (project, name)
        self.networks: dict[tuple[str, str], Json] = {}
        self.subnetworks: dict[tuple[str, str, str], Json] = {}  # (project, region, name)
        self.firewalls: dict[tuple[str, str], Json] = {}
        self._seeded: set[str] = set()
        self._ids = itertools.count(7_000_000_000_000_000_003, 7919)
        self.add_image(*DEFAULT_IMAGE)

    # --- set up -------------------------------------------------------------------------------

    def set_quota(
        self, project: str, region: str | None, metric: str, limit: float, usage: float = 0
    ) -> None:
        """A region's quota; ``region=None``: the project's, across regions."""
        self.seed(project)
        self.quotas.setdefault((project, region), {})[metric] = [float(limit), float(usage)]

    def add_image(self, project: str, name: str, family: str | None = None) -> Json:
        link = f"{LINK}projects/{project}/global/images/{name}"
        image = {
            "kind": "compute#image", "id": str(next(self._ids)), "name": name, "status": "READY",
            "creationTimestamp": now(), "diskSizeGb": "50", "architecture": "X86_64",
            "selfLink": link, **({"family": family} if family else {}),
        }  # fmt: skip
        self.images[(project, name)] = image
        return image

    def add_network(self, project: str, name: str, auto: bool = False) -> Json:
        self.seed(project)
        network = {
            "kind": "compute#network", "id": str(next(self._ids)), "name": name,
            "autoCreateSubnetworks": auto, "subnetworks": [], "creationTimestamp": now(),
            "selfLink": f"{LINK}projects/{project}/global/networks/{name}",
        }  # fmt: skip
        self.networks[(project, name)] = network
        return network

    def add_subnetwork(self, project: str, region: str, name: str, network: str, cidr: str) -> Json:
        """A subnetwork of ``network`` (a name, or a link into another project: a shared VPC)."""
        self.seed(project)
        if region not in REGIONS:
            raise KeyError(f"no region {region}")
        net_link = full_link(project, network if "/" in network else f"global/networks/{network}")
        owner = self._network_at(net_link)
        region_link = f"{LINK}projects/{project}/regions/{region}"
        subnet = {
            "kind": "compute#subnetwork", "id": str(next(self._ids)), "name": name,
            "network": net_link, "ipCidrRange": cidr, "region": region_link,
            "gatewayAddress": cidr.split("/")[0].rsplit(".", 1)[0] + ".1",
            "selfLink": f"{region_link}/subnetworks/{name}",
        }  # fmt: skip
        self.subnetworks[(project, region, name)] = subnet
        owner["subnetworks"].append(subnet["selfLink"])
        return subnet

    def add_firewall(self, project: str, name: str, **fields: Any) -> Json:
        """A rule in GCE's JSON fields: ``network`` (a name or link), ``direction`` (INGRESS),
        ``allowed`` [{IPProtocol, ports}], ``sourceRanges``, ``sourceTags``, ``targetTags``..."""
        self.seed(project)
        unknown = set(fields) - FIREWALL_FIELDS
        if unknown:
            raise TypeError(f"not a firewall field: {', '.join(sorted(unknown))}")
        network = str(fields.pop("network", "default"))
        net_link = full_link(project, network if "/" in network else f"global/networks/{network}")
        self._network_at(net_link)
        rule = {
            "kind": "compute#firewall", "id": str(next(self._ids)), "name": name,
            "network": net_link, "direction": "INGRESS", "priority": 1000, "disabled": False,
            "creationTimestamp": now(), **fields,
            "selfLink": f"{LINK}projects/{project}/global/firewalls/{name}",
        }  # fmt: skip
        if (
            "sourceRanges" not in rule
            and "sourceTags" not in rule
            and rule["direction"] == "INGRESS"
        ):
            rule["sourceRanges"] = ["0.0.0.0/0"]  # GCE's default for an ingress rule
        self.firewalls[(project, name)] = rule
        return rule

    def seed(self, project: str) -> None:
        """What Compute Engine gives a new project, once."""
        if project in self._seeded:
            return
        self._seeded.add(project)
        for region in REGIONS:
            self.quotas.setdefault((project, region), {})
            for metric, limit in DEFAULT_QUOTAS.items():
                self.quotas[(project, region)].setdefault(metric, [limit, 0.0])
        for metric, limit in PROJECT_QUOTAS.items():
            self.quotas.setdefault((project, None), {}).setdefault(metric, [limit, 0.0])
        if (project, "default") in self.networks:
            return
        self.add_network(project, "default", auto=True)
        for region, cidr in AUTO_RANGES.items():
            self.add_subnetwork(project, region, "default", "default", cidr)
        everything = [{"IPProtocol": p, "ports": ["0-65535"]} for p in ("tcp", "udp")]
        internal = [*everything, {"IPProtocol": "icmp"}]
        ssh = [{"IPProtocol": "tcp", "ports": ["22"]}]
        for name, allowed, source in [("internal", internal, "10.128.0.0/9"),
                                      ("ssh", ssh, "0.0.0.0/0")]:  # fmt: skip
            self.add_firewall(project, f"default-allow-{name}", sourceRanges=[source],
                              allowed=allowed, priority=65534)  # fmt: skip

    # --- for inserts --------------------------------------------------------------------------

    def interface(self, project: str, zone: str, sent: Json, address_n: int) -> Json:
        """A network interface as sent to an insert, with full links and an address in its
        subnetwork (the network's own in the zone's region when only a network is named, the
        default network when neither is); a network or subnetwork that is missing is a 404."""
        self.seed(project)
        region, network = zone.rsplit("-", 1)[0], None
        if sent.get("network") or not sent.get("subnetwork"):
            link = sent.get("network") or "global/networks/default"
            network = self._network_at(full_link(project, link))
        if sent.get("subnetwork"):
            subnet = self._subnetwork_at(full_link(project, sent["subnetwork"]))
            if last(subnet["region"]) != region:
                raise ApiError(400, "invalid", f"Subnetwork {subnet['name']} is not in {region}")
        else:
            assert network is not None
            subnet = self._auto_subnetwork(network, region)
        if network is not None and subnet["network"] != network["selfLink"]:
            why = f"Subnetwork {subnet['name']} is not in network {network['name']}"
            raise ApiError(400, "invalid", why)
        return {**sent, "kind": "compute#networkInterface", "network": subnet["network"],
                "subnetwork": subnet["selfLink"],
                "networkIP": _address(subnet["ipCidrRange"], address_n)}  # fmt: skip

    # --- handlers -----------------------------------------------------------------------------

    def get_project(self, project: str, **_: Any) -> Json:
        self.seed(project)
        number = zlib.crc32(project.encode())  # the same project, the same number
        return {
            "kind": "compute#project", "id": str(number), "name": project,
            "defaultServiceAccount": f"{number}-compute@developer.gserviceaccount.com",
            "quotas": self._quotas(project, None),
            "selfLink": f"{LINK}projects/{project}",
        }  # fmt: skip

    def get_region(self, project: str, region: str, **_: Any) -> Json:
        self.seed(project)
        if region not in REGIONS:
            raise not_found(f"projects/{project}/regions/{region}")
        link = f"{LINK}projects/{project}/regions/{region}"
        zones = [f"{LINK}projects/{project}/zones/{region}-{z}" for z in REGIONS[region]]
        return {
            "kind": "compute#region", "id": str(1000 + list(REGIONS).index(region)),
            "name": region, "status": "UP", "zones": zones,
            "quotas": self._quotas(project, region), "selfLink": link,
        }  # fmt: skip

    def get_zone(self, project: str, zone: str, **_: Any) -> Json:
        region, _dash, suffix = zone.rpartition("-")
        if suffix not in REGIONS.get(region, ()):
            raise not_found(f"projects/{project}/zones/{zone}")
        return {
            "kind": "compute#zone", "name": zone, "status": "UP",
            "region": f"{LINK}projects/{project}/regions/{region}",
            "selfLink": f"{LINK}projects/{project}/zones/{zone}",
        }  # fmt: skip

    def get_image(self, project: str, image: str, **_: Any) -> Json:
        found = self.images.get((project, image))
        if found is None:
            raise not_found(f"projects/{project}/global/images/{image}")
        return found

    def get_image_from_family(self, project: str, family: str, **_: Any) -> Json:
        members = [
            i for (p, _n), i in self.images.items()
            if p == project and i.get("family") == family and "deprecated" not in i
        ]  # fmt: skip
        if not members:
            raise not_found(f"projects/{project}/global/images/family/{family}")
        return members[-1]  # the newest: images are kept in the order they were made

    def get_network(self, project: str, network: str, **_: Any) -> Json:
        self.seed(project)
        found = self.networks.get((project, network))
        if found is None:
            raise not_found(f"projects/{project}/global/networks/{network}")
        return found

    def get_subnetwork(self, project: str, region: str, subnetwork: str, **_: Any) -> Json:
        self.seed(project)
        found = self.subnetworks.get((project, region, subnetwork))
        if found is None:
            raise not_found(f"projects/{project}/regions/{region}/subnetworks/{subnetwork}")
        return found

    def list_firewalls(self, project: str, query: dict[str, str], **_: Any) -> Json:
        self.seed(project)
        if query.get("filter"):
            raise ApiError(501, "notImplemented", "GceEmulator does not filter firewalls")
        items = [rule for (p, _n), rule in sorted(self.firewalls.items()) if p == project]
        return {"kind": "compute#firewallList", "items": items}

    # --- inside -------------------------------------------------------------------------------

    def _quotas(self, project: str, region: str | None) -> list[Json]:
        held = self.quotas.get((project, region), {})
        return [{"metric": m, "limit": lim, "usage": use} for m, (lim, use) in held.items()]

    def _network_at(self, link: str) -> Json:
        parts = relative(link).split("/")  # projects/P/global/networks/N
        if len(parts) != 5 or parts[2:4] != ["global", "networks"]:
            raise ApiError(400, "invalid", f"Invalid value for field 'network': '{link}'")
        self.seed(parts[1])
        found = self.networks.get((parts[1], parts[4]))
        if found is None:
            raise not_found(relative(link))
        return found

    def _subnetwork_at(self, link: str) -> Json:
        parts = relative(link).split("/")  # projects/P/regions/R/subnetworks/S
        if len(parts) != 6 or parts[2] != "regions" or parts[4] != "subnetworks":
            raise ApiError(400, "invalid", f"Invalid value for field 'subnetwork': '{link}'")
        self.seed(parts[1])
        found = self.subnetworks.get((parts[1], parts[3], parts[5]))
        if found is None:
            raise not_found(relative(link))
        return found

    def _auto_subnetwork(self, network: Json, region: str) -> Json:
        """The subnetwork an interface naming only its network lands in: the network's one
        subnetwork in the region (an auto-mode network has exactly one)."""
        mine = [s for s in self.subnetworks.values()
                if s["network"] == network["selfLink"] and last(s["region"]) == region]  # fmt: skip
        if len(mine) != 1:
            why = f"network {network['name']} has {len(mine)} subnetworks in {region}"
            raise ApiError(400, "invalid", f"Invalid value for field 'subnetwork': {why}")
        return mine[0]


def _address(cidr: str, n: int) -> str:
    import ipaddress

    net = ipaddress.ip_network(cidr)
    return str(net[2 + n % max(net.num_addresses - 4, 1)])
