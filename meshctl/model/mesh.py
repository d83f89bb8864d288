"""The mesh file: the pools meshctl routes work to, and what each pool may hold.

A pool is one Ray cluster. On-prem pools (``local``: the embedded default that ``meshctl up``
starts; ``ray``: an existing cluster) list their nodes; cloud pools (``aws``, ``gcp``) list the
node types meshctl may launch, which must exist in the provider catalog.
"""

from __future__ import annotations

import re
from typing import Annotated, Final, Literal

from pydantic import Field, field_validator, model_validator

from meshctl.model.accelerators import VendorName
from meshctl.model.base import (
    Count,
    Cpus,
    DocumentModel,
    DurationMinutes,
    DurationS,
    GpuMemoryGiB,
    Gpus,
    LabelKey,
    Labels,
    MemoryGiB,
    MemoryGiBTotal,
    Model,
    Name,
    NicGbps,
    Percent,
    UsdPerGiB,
    UsdPerHour,
)

TOPOLOGY_LABELS: Final = ("rack", "switch")
STORAGE_SCHEMES: Final = ("file", "s3", "gs")
AWS_REGION: Final = r"^[a-z]{2}(-gov)?-[a-z]+-\d$"
GCP_REGION: Final = r"^[a-z]+-[a-z]+\d$"
CIDR: Final = r"^\d{1,3}(\.\d{1,3}){3}/\d{1,2}$"
AGENT_PORT: Final = 9109  # ``meshctl agent run``'s default port
RAY_GCS_PORT: Final = 6379  # a cloud pool's head: what its workers join
RAY_DASHBOARD_PORT: Final = 8265  # a cloud pool's head: the dashboard and Jobs API
GCE_TAG: Final = r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$"


class Accelerator(Model):
    vendor: VendorName = Field(
        "nvidia", description="a vendor of the accelerator registry (providers/accelerators.yaml)"
    )
    model: Annotated[str, Field(min_length=1, examples=["H100", "A100"])]
    memory_gib: GpuMemoryGiB


class NodeGroup(Model):
    """``count`` identical on-prem nodes named ``name-0`` .. ``name-{count-1}`` (or ``name``)."""

    name: Name
    count: Count = 1
    gpus: Gpus = 0
    accelerator: Accelerator | None = None
    cpus: Cpus
    memory_gib: MemoryGiB
    nic_gbps: NicGbps = 0
    labels: Labels = Field(
        default_factory=dict,
        description="topology labels `rack` and `switch` place nodes for the scheduler",
    )
    cache_gib: MemoryGiBTotal = Field(
        0,
        description="each node's dataset cache (kept by its agent, on its local disk), GiB; "
        "0: none (jobs read their data from its source)",
    )

    @model_validator(mode="after")
    def _gpus_need_an_accelerator(self) -> NodeGroup:
        if self.gpus > 0 and self.accelerator is None:
            raise ValueError("a node with gpus needs `accelerator` (model and memory_gib)")
        if not float(self.gpus).is_integer():
            raise ValueError("a node has a whole number of GPUs; jobs may ask for a fraction")
        return self

    def node_names(self) -> list[str]:
        if self.count == 1:
            return [self.name]
        return [f"{self.name}-{i}" for i in range(self.count)]


class CostModel(Model):
    usd_per_gpu_hour: UsdPerHour | None = Field(
        None, description="amortised cost of one on-prem GPU hour (owned hardware)"
    )
    discount_pct: Annotated[Percent, Field(lt=100)] = Field(
        0, description="negotiated discount off the catalog's list prices (cloud pools)"
    )
    egress_usd_per_gib: UsdPerGiB = Field(
        0,
        description="what a GiB leaving the site costs (on-prem pools: transit; cloud pools "
        "pay their catalog's egress prices and ignore this)",
    )


class CheckpointStorage(Model):
    uri: Annotated[str, Field(min_length=1, examples=["s3://bucket/ckpt", "file:///shared/ckpt"])]
    endpoint_url: str | None = Field(None, description="S3-compatible endpoint override")
    region: str | None = None

    @field_validator("uri")
    @classmethod
    def _known_scheme(cls, uri: str) -> str:
        scheme = re.match(r"^([a-z0-9+.-]+)://", uri)
        if uri.startswith("/"):
            return f"file://{uri}"
        if scheme is None or scheme.group(1) not in STORAGE_SCHEMES:
            raise ValueError(
                f"expected an absolute path or a URI with scheme {', '.join(STORAGE_SCHEMES)}"
            )
        return uri


class Graces(Model):
    """How long a job of the pool has to checkpoint, once asked, before it is stopped: on a
    node found unhealthy (then evicted, to resume elsewhere) and when an elastic job grows
    back onto freed nodes (then resumed at its new size). A preemption's grace is its policy
    rule's (``grace_s``). Like Slurm's GraceTime per partition: a pool of large models whose
    checkpoints take minutes gives more."""

    unhealthy_s: DurationS = Field(
        30.0, description="a job on a node found unhealthy checkpoints this long, then is evicted"
    )
    grow_s: DurationS = Field(
        30.0, description="an elastic job growing back checkpoints this long, then restarts"
    )


class PoolBase(Model):
    name: Name
    labels: Labels = Field(default_factory=dict)
    cost: CostModel = Field(default_factory=CostModel)
    checkpoint_storage: CheckpointStorage | None = None
    graces: Graces = Field(default_factory=Graces)


class Network(Model):
    """The fabric between a pool's nodes, for the simulator's slowdown of multi-node jobs.

    fat-tree: nodes under one leaf switch (label ``rack``) talk at full rate; leaf uplinks are
    oversubscribed ``oversubscription:1``. dragonfly+: groups (label ``switch``) are
    non-blocking inside and joined by global links tapered ``oversubscription:1``."""

    topology: Literal["fat-tree", "dragonfly+"] = "fat-tree"
    oversubscription: Annotated[float, Field(ge=1, le=64)] = 1.0


class NodeAgents(Model):
    """Each node's meshctl agent (``meshctl agent run``), pulled by the controller every cycle:
    a node whose agent stops answering is suspect (no new work) after ``suspect_after_s`` and
    dead (its jobs moved) after ``dead_after_s``, whatever Ray says of it."""

    port: Annotated[int, Field(ge=1, le=65535)] | None = Field(
        None,
        description=(
            "the port every node's agent listens on, at the node's address (an existing "
            "cluster); a node labelled meshctl.io/agent-port says its own"
        ),
    )
    suspect_after_s: DurationS = 10.0
    dead_after_s: DurationS = 30.0
    interval_s: DurationS = Field(
        2.0, description="how often the embedded pool's agents probe their node"
    )
    min_free_gib: MemoryGiBTotal = Field(
        1.0, description="the embedded pool's agents: free GiB its state folder needs"
    )

    @model_validator(mode="after")
    def _dead_after_suspect(self) -> NodeAgents:
        if self.dead_after_s <= self.suspect_after_s:
            raise ValueError("dead_after_s must be longer than suspect_after_s")
        if self.interval_s < 0.1:
            raise ValueError("interval_s must be at least 0.1 s")
        return self


class OnPremPoolBase(PoolBase):
    network: Network | None = Field(None, description="the fabric, for the simulator")
    agents: NodeAgents = Field(default_factory=NodeAgents)


class LocalPool(OnPremPoolBase):
    """The embedded default: a Ray cluster on this machine, GPUs declared with --num-gpus."""

    provider: Literal["local"]
    nodes: Annotated[list[NodeGroup], Field(min_length=1)]


class RayAuth(Model):
    token_env: str | None = Field("RAY_AUTH_TOKEN", description="environment variable with it")
    token_file: str | None = None


class RayPool(OnPremPoolBase):
    """An existing Ray cluster, reached over HTTP at its dashboard address."""

    provider: Literal["ray"]
    address: Annotated[str, Field(pattern=r"^https?://[^\s/]+(:\d+)?/?$")]
    auth: RayAuth = Field(default_factory=RayAuth)
    nodes: list[NodeGroup] = Field(default_factory=list)
    node_labels: dict[LabelKey, LabelKey] = Field(
        default_factory=dict,
        description=(
            "meshctl's node labels read from labels the cluster's nodes already carry: "
            "{rack: topology.example.com/rack, switch: topology.example.com/leaf}"
        ),
    )


class CloudNodeType(Model):
    name: Annotated[str, Field(min_length=1, examples=["p5.48xlarge", "a3-highgpu-8g"])]
    max_nodes: Count
    spot: bool = Field(False, description="spot / preemptible capacity may be used")


class CloudPoolBase(PoolBase):
    region: str
    zones: list[str] = Field(default_factory=list)
    node_types: Annotated[list[CloudNodeType], Field(min_length=1)]
    max_nodes: Count = Field(16, description="all node types together")
    idle_minutes: Annotated[DurationMinutes, Field(le=7 * 24 * 60)] = 10
    provision_timeout_s: DurationS = 900.0
    endpoint_url: str | None = Field(None, description="API endpoint override (emulators)")
    image: str | None = Field(
        None, description="the pinned image instances boot (AMI id; GCE image or image family)"
    )
    head_node_type: str | None = Field(
        None,
        description=(
            "a small on-demand CPU instance type for the pool's Ray head, so a reclaimed "
            "spot worker never takes the cluster down"
        ),
    )
    controller_cidr: str | None = Field(
        None,
        pattern=CIDR,
        description=(
            "where the controller reaches the instances from (their Ray dashboard and agent "
            "ports); default: the network's own range"
        ),
    )
    agents: NodeAgents = Field(
        default_factory=NodeAgents,
        description="each instance's meshctl agent: its port (default 9109) and timeouts",
    )

    @property
    def agent_port(self) -> int:
        """The port every instance's agent listens on."""
        return self.agents.port or AGENT_PORT

    @property
    def emulated(self) -> bool:
        """Whether an emulator's endpoint stands in for the provider (it needs no image,
        network or identity settings)."""
        return self.endpoint_url is not None

    def real_account_gaps(self) -> list[tuple[str, str]]:
        """(field, what to set) for each setting a real account needs and this pool lacks;
        none for an emulated pool."""
        if self.emulated:
            return []
        return [(name, want) for name, want in self._needs() if not getattr(self, name)]

    def _needs(self) -> list[tuple[str, str]]:
        return [
            ("image", "a pinned image id the instances boot"),
            ("head_node_type", "a small on-demand CPU instance type for the pool's Ray head"),
        ]

    @model_validator(mode="after")
    def _zones_in_region(self) -> CloudPoolBase:
        outside = [
            zone
            for zone in self.zones
            if not zone.startswith(f"{self.region}-")
            and not (zone.startswith(self.region) and zone[len(self.region) :].isalpha())
        ]
        if outside:
            raise ValueError(f"zones {', '.join(outside)} are not in region {self.region}")
        return self


class AwsPool(CloudPoolBase):
    provider: Literal["aws"]
    region: Annotated[str, Field(pattern=AWS_REGION, examples=["us-east-1"])]
    profile: str | None = Field(None, description="AWS profile (shared config files)")
    image: Annotated[str, Field(pattern=r"^ami-[0-9a-f]{8,17}$")] | None = Field(
        None, description="the pinned AMI id the instances boot", examples=["ami-0abcdef1234567890"]
    )
    subnets: list[Annotated[str, Field(pattern=r"^subnet-[0-9a-f]{8,17}$")]] = Field(
        default_factory=list, description="one subnet per zone the pool launches in"
    )
    security_groups: list[Annotated[str, Field(pattern=r"^sg-[0-9a-f]{8,17}$")]] = Field(
        default_factory=list, description="security group ids every instance gets"
    )
    instance_profile: str | None = Field(
        None, description="the IAM instance profile (name or ARN) whose role reads the token"
    )

    def _needs(self) -> list[tuple[str, str]]:
        return [
            *super()._needs(),
            ("subnets", "a subnet id (subnet-...) in each zone"),
            ("security_groups", "a security group id (sg-...)"),
            ("instance_profile", "an IAM instance profile that may read the cluster token"),
        ]


class GcpPool(CloudPoolBase):
    provider: Literal["gcp"]
    project: Annotated[str, Field(pattern=r"^[a-z][-a-z0-9]{4,28}[a-z0-9]$")]
    region: Annotated[str, Field(pattern=GCP_REGION, examples=["us-central1"])]
    credentials_file: str | None = Field(None, description="default: application credentials")
    network: str | None = Field(None, description="the VPC network (name or self link)")
    subnetwork: str | None = Field(None, description="the subnetwork in the pool's region")
    network_tags: list[Annotated[str, Field(pattern=GCE_TAG)]] = Field(
        default_factory=list, description="tags the firewall rules for Ray and the agent name"
    )
    service_account: str | None = Field(
        None, description="the instances' service account (its email); it reads the token"
    )

    def _needs(self) -> list[tuple[str, str]]:
        return [
            *super()._needs(),
            ("network", "the VPC network"),
            ("subnetwork", "a subnetwork in the pool's region"),
            ("network_tags", "the network tags your firewall rules name"),
            ("service_account", "a service account that may read the cluster token"),
        ]


Pool = Annotated[LocalPool | RayPool | AwsPool | GcpPool, Field(discriminator="provider")]
CloudPool = AwsPool | GcpPool


class MeshSpec(Model):
    pools: Annotated[list[Pool], Field(min_length=1)]

    @field_validator("pools")
    @classmethod
    def _unique_names(cls, pools: list[Pool]) -> list[Pool]:
        seen: set[str] = set()
        for pool in pools:
            if pool.name in seen:
                raise ValueError(f"pool name {pool.name!r} is used twice; names must be unique")
            seen.add(pool.name)
        return pools


class Mesh(DocumentModel):
    kind: Literal["Mesh"] = "Mesh"
    spec: MeshSpec

    def pool(self, name: str) -> Pool | None:
        return next((pool for pool in self.spec.pools if pool.name == name), None)

    def graces(self, pool: str) -> Graces:
        """The pool's graces (the defaults for a pool the mesh no longer has)."""
        found = self.pool(pool)
        return found.graces if found is not None else Graces()

    def grow_graces(self) -> dict[str, float]:
        """Each pool's grow grace, as ``lifecycle.effects.of_plan`` takes them."""
        return {pool.name: pool.graces.grow_s for pool in self.spec.pools}
