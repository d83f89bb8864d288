"""What a pool reports and what it is sent: plain data shared by the adapters and the pure
controller core (``meshctl.controller.deciding.decide``), so neither depends on the other.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

NODE_LABEL = "meshctl.io/node"  # the Ray node label that names a node the way mesh.yaml does
# Ray's own label, set on every node (Ray 2.60): what jobs and their workers are pinned by, so
# a cluster started without meshctl's labels works as it is
RAY_NODE_ID_LABEL = "ray.io/node-id"
# Ray custom resources a node may declare, which meshctl's jobs then claim: its GPUs' memory
# (all of them together) and its NIC bandwidth. The embedded pool declares both.
GPU_MEMORY_RESOURCE = "gpu_memory_gib"
NIC_RESOURCE = "nic_gbps"
CLAIMED_RESOURCES = (GPU_MEMORY_RESOURCE, NIC_RESOURCE)
AGENT_PORT_LABEL = "meshctl.io/agent-port"  # where the node's agent answers (agent/watch.py)
AGENT_HOST_LABEL = "meshctl.io/agent-host"  # its address, when not the node's own
NODE_TYPE_LABEL = "meshctl.io/node-type"  # a cloud node's instance type
ROLE_LABEL = "meshctl.io/role"  # "head" on a head node that takes no work


def node_name(instance_id: str) -> str:
    """The node a cloud instance becomes, named for a Ray label value (GCP ids hold the zone
    and a slash)."""
    return re.sub(r"[^A-Za-z0-9_.-]", "-", instance_id)[:63]


# Ray Jobs statuses (ray.job_submission.JobStatus values).
RAY_ACTIVE = frozenset({"PENDING", "RUNNING"})
RAY_TERMINAL = frozenset({"SUCCEEDED", "FAILED", "STOPPED"})
# Ray error types that say the infrastructure failed, not the job's own command: the job is
# evicted and requeued rather than failed.
INFRA_ERRORS = frozenset(
    {
        "JOB_SUPERVISOR_ACTOR_DIED",
        "JOB_SUPERVISOR_ACTOR_START_TIMEOUT",
        "JOB_SUPERVISOR_ACTOR_UNKNOWN_FAILURE",
        "JOB_SUPERVISOR_ACTOR_UNSCHEDULABLE",  # e.g. its label-selected node died
        "JOB_SUPERVISOR_ACTOR_START_FAILURE",
    }
)


@dataclass(frozen=True, slots=True)
class ObservedNode:
    """A Ray node as its cluster reports it."""

    name: str  # the meshctl.io/node label, else its host's name or address (pools/ray.py)
    ray_node_id: str
    alive: bool
    gpus: int
    cpus: float
    memory_gib: float
    accelerator: str | None = None  # from an ``accelerator_type:<model>`` resource
    labels: Mapping[str, str] = field(default_factory=dict)
    head: bool = False
    address: str = ""  # the node's IP address, as Ray reports it
    gpus_in_use: float | None = None  # GPUs Ray counts as taken by any work (None: unknown)
    claimable: Mapping[str, float] = field(default_factory=dict)  # CLAIMED_RESOURCES it has
    # what it declares of the Ray resources devices may be counted in, other than GPU (TPU,
    # neuron_cores ...: the accelerator registry says which is whose)
    devices: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ObservedJob:
    """A Ray job (by submission id) as its cluster reports it."""

    submission_id: str
    status: str  # PENDING, RUNNING, STOPPED, SUCCEEDED, FAILED
    message: str = ""
    error_type: str | None = None
    start_s: float | None = None
    end_s: float | None = None


@dataclass(frozen=True, slots=True)
class PoolObservation:
    pool: str
    reachable: bool
    error: str = ""
    nodes: tuple[ObservedNode, ...] = ()
    jobs: Mapping[str, ObservedJob] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Submission:
    """One Ray Jobs submission, everything the adapter sends."""

    submission_id: str
    entrypoint: str
    runtime_env: Mapping[str, Any]
    metadata: Mapping[str, str]
    label_selector: Mapping[str, str]
    num_cpus: float | None = None
    num_gpus: float | None = None
    memory_bytes: int | None = None
    resources: Mapping[str, float] = field(default_factory=dict)  # custom, for the entrypoint
