"""The mesh: pools, nodes, providers, gc and validate.

``meshctl status``'s shape is built outside the CLI, with its document, in
``meshctl/controller/status.py``.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import with_config
from typing_extensions import TypedDict

from meshctl.jsontypes import STRICT, Timestamp

# --- the mesh: pools, nodes, providers ------------------------------------------------------


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
    state: Annotated[
        str | None,
        "as the controller last saw it: up; degraded (it answers, but could not take its last "
        "submission: its head's job agent away); down; idle; not up; unavailable while the "
        "controller holds it so",
    ]
    gpus_in_use: Annotated[float | None, "null: nothing recorded here"]
    spend_usd_month: Annotated[float | None, "cloud spend this month; null: none recorded"]


@with_config(STRICT)
class PreflightCheck(TypedDict):
    check: Annotated[str, "credentials, zones, image, subnets, security groups, ..."]
    result: Literal["pass", "fail", "skip"]
    detail: Annotated[str, "what was found"]
    fix: Annotated[str | None, "what to do, when it failed; else null"]


@with_config(STRICT)
class PoolCheckRow(TypedDict):
    pool: str
    provider: Literal["local", "ray", "aws", "gcp"]
    available: Annotated[bool, "the pool can be used now, and no check failed"]
    reason: Annotated[str | None, "why not: not up, no credentials, the first failed check"]
    checks: Annotated[
        list[PreflightCheck],
        "a cloud pool's preflight (nothing launched); a local or Ray pool: one, reachable",
    ]


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
class NodeAgentData(TypedDict):
    url: str
    verdict: Annotated[str, "healthy, degraded, unhealthy; suspect or dead when silent; unknown"]
    reasons: list[str]
    probed_at: Annotated[Timestamp | None, "its last fresh probe"]
    error: Annotated[str | None, "why the controller's last pull failed"]


@with_config(STRICT)
class NodeRow(TypedDict):
    node: Annotated[str, "pool/node"]
    pool: str
    state: Annotated[
        str, "ready, cordoned, draining, drained, unhealthy; dead when Ray lists it dead"
    ]
    reason: Annotated[str | None, "why it is unhealthy or dead"]
    deadline_at: Annotated[Timestamp | None, "a draining node's deadline"]
    alive: bool
    gpus: int | None
    gpus_used: float
    accelerator: str | None
    devices: Annotated[
        dict[str, float], "what it declares in Ray resources other than GPU: TPU, neuron_cores"
    ]
    jobs: Annotated[list[str], "ids of the jobs on it"]
    labels: dict[str, str]
    agent: Annotated[NodeAgentData | None, "its meshctl agent, as the controller last heard it"]


@with_config(STRICT)
class CacheEntryData(TypedDict):
    key: Annotated[str, "its folder in the cache: the location's tail and a digest"]
    location: str
    version: Annotated[str, "a digest of its files' paths, sizes and times at the source"]
    size_bytes: Annotated[int, "whole"]
    fetched_bytes: Annotated[int | None, "written so far (its size once complete); null: not said"]
    complete: bool
    pinned: Annotated[bool, "a job on the node reads it: never evicted"]
    fetched_from: Annotated[str | None, "source, or the URL of the peer's agent; null: fetching"]
    peer: Annotated[str | None, "pool/node of that peer, where the controller knows its agent"]
    last_used_at: Annotated[Timestamp | None, "fetched, or last handed to a job; null: fetching"]


@with_config(STRICT)
class NodeCacheData(TypedDict):
    root: Annotated[str, "the cache folder on the node"]
    capacity_bytes: int
    used_bytes: Annotated[int, "its entries, one being fetched at its whole size"]
    used_pct: Annotated[float | None, "of its capacity; null: no capacity"]
    entries: list[CacheEntryData]
    source_bytes: Annotated[int, "read from central storage since its agent started"]
    peer_bytes: Annotated[int, "read from other nodes' agents since its agent started"]
    hits: Annotated[int, "asked for a dataset it held whole"]
    misses: int
    refetched: Annotated[int, "found truncated or corrupt, and fetched again"]
    errors: Annotated[list[str], "its latest errors, newest last"]
    failed: Annotated[dict[str, str], "why the last fetch of a location failed, by location"]


@with_config(STRICT)
class NodeShow(NodeRow):
    cache: Annotated[
        NodeCacheData | None, "its data cache, as its agent last said; null: none, or no report"
    ]


@with_config(STRICT)
class ProviderType(TypedDict):
    provider: Literal["aws", "gcp"]
    node_type: str
    gpus: Annotated[int, "accelerator devices (GPUs, TPU chips, Neuron chips, Gaudi cards)"]
    vendor: Annotated[str, "a vendor of the accelerator registry"]
    accelerator: str
    gpu_memory_gib: float
    vcpus: float
    memory_gib: float
    nic_gbps: float
    regions: Annotated[list[str], "regions with a list price"]
    price_uncertain: Annotated[bool, "some region's price is marked uncertain"]
    uncertain_fields: Annotated[list[str], "shape figures marked uncertain (nic_gbps)"]


@with_config(STRICT)
class ProviderAccelerator(TypedDict):
    vendor: str
    model: str
    memory_gib: Annotated[float, "per device"]
    interconnect: str
    ray_resource: Annotated[str, "the Ray resource a device is counted in"]
    ray_units: Annotated[int, "units of it one device counts as (NeuronCores per chip)"]
    visibility: Annotated[str, "the variable that makes the job's devices visible to it"]
    visible_by: Literal["index", "uuid"]
    torch_backend: str
    chips_per_host: Annotated[int | None, "a slice's devices per host (TPUs)"]
    throughput: Annotated[float | None, "relative to the registry's reference model"]
    reference: Annotated[bool, "the model fungible requests count in"]
    uncertain_fields: Annotated[list[str], "figures marked uncertain"]


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
class HeadPrice(TypedDict):
    region: str
    on_demand_usd_per_hour: float
    price_uncertain: bool


@with_config(STRICT)
class ProviderHead(TypedDict):
    provider: Literal["aws", "gcp"]
    node_type: Annotated[str, "a CPU type a cloud pool's own Ray head may run on"]
    vcpus: float
    memory_gib: float
    prices: Annotated[list[HeadPrice], "by region"]


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
class RuleChange(TypedDict):
    part: Annotated[Literal["mesh", "policies", "catalogs"], "the part of the rule set"]
    old_hash: str
    new_hash: str


@with_config(STRICT)
class RuleHashes(TypedDict):
    mesh: str
    policies: str
    catalogs: str


@with_config(STRICT)
class ReloadResult(TypedDict):
    outcome: Annotated[Literal["reloaded", "unchanged"], "what the controller did"]
    old_policy_hash: Annotated[str | None, "the set it enforced before"]
    policy_hash: Annotated[str | None, "the set it enforces now"]
    policies: Annotated[str, "the policy folder it enforces now"]
    changes: Annotated[list[RuleChange], "each part of the rule set it took anew"]
    hashes: Annotated[RuleHashes, "each part's hash, as it runs now"]
    notes: Annotated[list[str], "what a reload cannot do alone (a new local pool needs up)"]
