"""The mesh: status, pools, nodes, providers, gc and validate."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import with_config
from typing_extensions import TypedDict

from meshctl.cli.shapes.base import STRICT, EventData, Timestamp

# --- the mesh: status, pools, nodes, providers ----------------------------------------------


@with_config(STRICT)
class ControllerData(TypedDict):
    pid: Annotated[int | None, "null: not running"]
    last_cycle_at: Timestamp | None
    last_cycle_age_s: float | None
    cycle_s: Annotated[float | None, "how long its last cycle took"]
    errors: list[str]
    policy_hash: Annotated[str | None, "the policy set it enforces (null: none runs)"]
    policy_commit: Annotated[str | None, "the git commit of the policy folder, if in git"]
    policies: Annotated[str | None, "the policy folder it enforces"]
    policy_error: Annotated[str | None, "a change of files it refused (the set above runs on)"]


@with_config(STRICT)
class StatusPool(TypedDict):
    pool: str
    provider: str
    state: Annotated[str, "as the controller last saw it, with its reason"]
    nodes: int | None
    gpus: int | None
    gpus_used: float
    available: Annotated[bool, "the pool can be used now"]
    reason: Annotated[str | None, "why not: not up, no credentials, ..."]


@with_config(STRICT)
class QueueRow(TypedDict):
    priority_class: str | None
    priority: int
    queued: Annotated[int, "jobs waiting"]
    oldest_wait_s: float


@with_config(STRICT)
class StatusEvent(EventData):
    job_id: str | None


@with_config(STRICT)
class Status(TypedDict):
    mesh: str
    controller: ControllerData
    pools: list[StatusPool]
    jobs: Annotated[dict[str, int], "jobs per state"]
    queue: Annotated[list[QueueRow], "by priority class, highest first"]
    events: Annotated[list[StatusEvent], "the latest ten"]


@with_config(STRICT)
class PoolRow(TypedDict):
    pool: str
    provider: Literal["local", "ray", "aws", "gcp"]
    location: Annotated[str, "this machine, a Ray address, a region, project/region"]
    nodes: Annotated[int, "on-prem: its nodes; cloud: the most it may launch"]
    gpus: Annotated[int, "on those nodes"]
    accelerators: list[str]
    usd_per_gpu_hour: Annotated[float | None, "on-prem: amortised; cloud: cheapest on-demand"]
    spot_usd_per_gpu_hour: float | None
    price_uncertain: Annotated[bool, "a price shown is one the catalog marks uncertain"]
    state: Annotated[str | None, "as the controller last saw it; null: never seen"]
    gpus_in_use: Annotated[float | None, "null: nothing recorded here"]
    spend_usd_month: Annotated[float | None, "cloud spend this month; null: none recorded"]


@with_config(STRICT)
class PoolCheckRow(TypedDict):
    pool: str
    provider: Literal["local", "ray", "aws", "gcp"]
    available: Annotated[bool, "the pool can be used now"]
    reason: Annotated[str | None, "why not: not up, no credentials, ..."]


@with_config(STRICT)
class PriceData(TypedDict):
    node_type: str
    on_demand_usd_per_hour: Annotated[float | None, "after the pool's discount"]
    spot_usd_per_hour: Annotated[float | None, "null: spot not allowed or not priced"]
    price_uncertain: bool


@with_config(STRICT)
class PoolShowExtra(TypedDict):
    prices: Annotated[list[PriceData], "a cloud pool's node types in its region; on-prem: []"]


@with_config(STRICT)
class NodeRow(TypedDict):
    node: Annotated[str, "pool/node"]
    pool: str
    state: Annotated[str, "ready, cordoned, draining, drained, unhealthy, ..."]
    reason: Annotated[str | None, "why it is unhealthy"]
    deadline_at: Annotated[Timestamp | None, "a draining node's deadline"]
    alive: bool
    gpus: int | None
    gpus_used: float
    accelerator: str | None
    jobs: Annotated[list[str], "ids of the jobs on it"]
    labels: dict[str, str]


@with_config(STRICT)
class ProviderType(TypedDict):
    provider: Literal["aws", "gcp"]
    node_type: str
    gpus: int
    accelerator: str
    gpu_memory_gib: float
    vcpus: float
    memory_gib: float
    nic_gbps: float
    regions: Annotated[list[str], "regions with a list price"]
    price_uncertain: Annotated[bool, "some region's price is marked uncertain"]
    uncertain_fields: Annotated[list[str], "shape figures marked uncertain (nic_gbps)"]


@with_config(STRICT)
class ProviderPrice(TypedDict):
    provider: Literal["aws", "gcp"]
    region: str
    node_type: str
    gpus: int
    accelerator: str
    on_demand_usd_per_hour: float
    spot_usd_per_hour: float | None
    on_demand_usd_per_gpu_hour: float
    price_uncertain: bool


@with_config(STRICT)
class LeakedInstance(TypedDict):
    pool: str
    instance: Annotated[str, "the cloud's instance id"]
    node_type: str
    zone: str | None
    state: str
    request: Annotated[str | None, "the launch request id it was tagged with"]
    action: Literal["would_terminate", "terminated", "terminate_failed"]


@with_config(STRICT)
class ValidatedFile(TypedDict):
    file: str
    line: Annotated[int, "where the document starts"]
    kind: str
    name: str


@with_config(STRICT)
class ReloadResult(TypedDict):
    outcome: Annotated[Literal["reloaded", "unchanged"], "what the controller did"]
    old_policy_hash: Annotated[str | None, "the set it enforced before"]
    policy_hash: Annotated[str | None, "the set it enforces now"]
    policies: Annotated[str, "the policy folder it enforces now"]
    notes: Annotated[list[str], "what a reload cannot do alone (a new local pool needs up)"]
