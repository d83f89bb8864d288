"""The job file: what a researcher submits.

Resources are per node: a gang job of ``nodes: 4`` with ``gpus: 8`` asks for four whole
8-GPU nodes at once. A fraction of one GPU (``gpus: 0.25``) is for single-node work only.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from meshctl.model.accelerators import SliceShape, VendorName
from meshctl.model.base import (
    Count,
    Cpus,
    DocumentModel,
    DurationS,
    GpuMemoryGiB,
    Gpus,
    MemoryGiB,
    Model,
    Name,
    NicGbps,
    UsdPerHour,
)

JobKind = Literal["train", "inference", "batch", "interactive"]
Reserve = Literal["entrypoint", "workers"]
Criticality = Literal["critical", "standard", "best-effort"]
LOOP = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_]*")
ROUTE = re.compile(r"/[A-Za-z0-9_./-]*")


class AcceleratorOption(Model):
    """One way to meet a fungible request: this many devices of this model per node."""

    model: Annotated[str, Field(min_length=1)]
    gpus: Annotated[int, Field(ge=1, le=1024)]


class AcceleratorSelector(Model):
    vendor: VendorName | None = Field(
        None, description="a vendor of the accelerator registry (providers/accelerators.yaml)"
    )
    any_of: list[Annotated[str, Field(min_length=1)]] = Field(
        default_factory=list, description="accelerator models the job can use, e.g. [H100, H200]"
    )
    equivalents: Annotated[int, Field(ge=1, le=1024)] | None = Field(
        None,
        description="fungible: devices per node in units of the registry's reference model "
        "(8: eight H100-equivalents), met by any model of the class (any_of, vendor) with a "
        "throughput factor, in as many devices as its factor needs",
    )
    topology: SliceShape | None = Field(
        None,
        description="a TPU slice's shape (4x4, 2x2x2): the job's workers come in whole "
        "slices of the hosts the registry gives it",
    )
    options: list[AcceleratorOption] = Field(
        default_factory=list,
        description="the models and counts a fungible request may be met with, fastest first: "
        "worked out by meshctl from `equivalents` and the registry at submit",
    )


class Topology(Model):
    domain: Literal["rack", "switch"] = Field(description="keep the gang's nodes in one of these")
    mode: Literal["required", "preferred"] = "preferred"


class Resources(Model):
    gpus: Gpus = 0
    gpu_memory_gib: GpuMemoryGiB | None = Field(None, description="at least this much per GPU")
    accelerator: AcceleratorSelector | None = None
    cpus: Cpus = 1.0
    memory_gib: MemoryGiB = 4.0
    nic_gbps: NicGbps = 0
    nodes: Count = 1
    topology: Topology | None = None

    @model_validator(mode="before")
    @classmethod
    def _equivalents_are_gpus(cls, data: Any) -> Any:
        """A fungible request counts its GPUs in reference-model devices: ``gpus`` defaults to
        ``accelerator.equivalents`` (what quotas and policies count it as)."""
        if not isinstance(data, dict):
            return data
        acc = data.get("accelerator")
        count = acc.get("equivalents") if isinstance(acc, dict) else None
        if isinstance(count, int) and "gpus" not in data:
            return {**data, "gpus": count}
        return data

    @model_validator(mode="after")
    def _consistent(self) -> Resources:
        acc = self.accelerator
        if acc is not None and acc.equivalents is not None and self.gpus != acc.equivalents:
            raise ValueError(
                "a fungible request counts in accelerator.equivalents: leave gpus out"
                f" (gpus {self.gpus:g}, equivalents {acc.equivalents})"
            )
        if acc is not None and acc.options and acc.equivalents is None:
            raise ValueError("accelerator.options meet a fungible request: give equivalents")
        if 0 < self.gpus < 1 and self.nodes > 1:
            raise ValueError("a fraction of a GPU is for single-node jobs; use whole GPUs")
        if self.gpus == 0 and (self.gpu_memory_gib is not None or self.accelerator is not None):
            raise ValueError("gpu_memory_gib and accelerator need gpus > 0")
        if self.topology is not None and self.nodes == 1:
            raise ValueError("topology applies to gang jobs (nodes > 1)")
        return self

    @property
    def total_gpus(self) -> float:
        return self.gpus * self.nodes


class RuntimeEnv(Model):
    """The Ray runtime_env keys meshctl passes through unchanged."""

    pip: list[str] | str | None = None
    uv: list[str] | str | None = None
    conda: dict[str, Any] | str | None = None
    env_vars: dict[str, str] = Field(default_factory=dict)
    py_modules: list[str] | None = None
    excludes: list[str] | None = None
    py_executable: str | None = None
    image_uri: str | None = None
    config: dict[str, Any] | None = None


class Dataset(Model):
    name: Name
    location: Annotated[str, Field(min_length=1, examples=["s3://corpus/v3", "onprem:/data/x"])]
    residency: str | None = Field(None, description="where the data must stay, e.g. eu, onprem")
    tags: list[str] = Field(default_factory=list, description="e.g. pii")
    size_gib: MemoryGiB | None = None
    endpoint_url: str | None = Field(None, description="S3-compatible endpoint override")


class Checkpoint(Model):
    storage: str | None = Field(None, description="default: the pool's checkpoint storage")
    interval: DurationS | Literal["auto"] = Field(
        "auto", description="a duration, or auto (Young/Daly from checkpoint cost and MTBF)"
    )
    keep: Annotated[int, Field(ge=1, le=1000)] = 3


class WorkerRange(Model):
    """An elastic train job's workers: it runs with ``max`` and lends GPUs to services (or
    higher-priority work) down to ``min``, then grows back when they are returned."""

    min: Annotated[int, Field(ge=1, le=4096)]
    max: Annotated[int, Field(ge=1, le=4096)]

    @model_validator(mode="after")
    def _ordered(self) -> WorkerRange:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) is more than max ({self.max})")
        return self


class ReplicaRange(Model):
    min: Annotated[int, Field(ge=0, le=4096)] = 1
    max: Annotated[int, Field(ge=1, le=4096)]

    @model_validator(mode="after")
    def _ordered(self) -> ReplicaRange:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) is more than max ({self.max})")
        return self


class Serve(Model):
    """A Ray Serve application: meshctl deploys it on its pool's cluster through Serve's REST
    API and owns its replica count. Each replica holds the job's ``resources`` (one node's
    worth) and is placed like any other request; the count follows the traffic Serve reports
    (ongoing requests per replica against ``target_ongoing_requests``)."""

    app: str = Field(
        description="module:attribute of the bound Serve application in the working directory",
        examples=["app:app"],
    )
    route_prefix: str = Field("/", description="the HTTP path it answers under")
    deployment: Annotated[str, Field(min_length=1)] | None = Field(
        None,
        description="the deployment whose replicas meshctl scales (default: the app's ingress, "
        "read when it is submitted)",
    )
    replicas: ReplicaRange
    target_ongoing_requests: Annotated[float, Field(gt=0, le=100_000)] = Field(
        2.0, description="requests in flight per replica the count aims at"
    )
    max_ongoing_requests: Annotated[int, Field(ge=1, le=100_000)] = Field(
        5, description="a replica takes at most this many at once; more wait in Serve's queue"
    )
    upscale_delay: DurationS = Field(30.0, description="above target this long: scale out")
    downscale_delay: DurationS = Field(600.0, description="below target this long: scale in")

    @field_validator("app")
    @classmethod
    def _module_attribute(cls, value: str) -> str:
        if not LOOP.fullmatch(value):
            raise ValueError(f"expected module:attribute, e.g. app:app, got {value!r}")
        return value

    @field_validator("route_prefix")
    @classmethod
    def _route(cls, value: str) -> str:
        if not ROUTE.fullmatch(value):
            raise ValueError(f"expected a path starting with /, e.g. /classify, got {value!r}")
        return value


class Train(Model):
    """A Ray Train job: meshctl builds the ``TorchTrainer`` around the job's train loop (a
    function written the normal Ray Train V2 way) with a stable run name and the job's
    checkpoint storage, so every attempt resumes from the latest checkpoint.

    Workers: ``workers_per_node`` on each of the job's ``resources.nodes``, each holding its
    share of the node's resources (``gpus: 8`` with ``workers_per_node: 8``: one GPU each)."""

    loop: str = Field(
        description="module:function in the working directory", examples=["model:train_loop"]
    )
    workers_per_node: Annotated[int, Field(ge=1, le=64)] = 1
    min_workers: Annotated[int, Field(ge=1)] | None = Field(
        None, description="elastic: run with as few as this many workers when nodes are lost"
    )
    workers: WorkerRange | None = Field(
        None,
        description=(
            "elastic: one worker per node, each with the job's resources; runs with max, "
            "lends down to min (resources.nodes is max)"
        ),
    )
    max_failures: Annotated[int, Field(ge=-1, le=10_000)] = Field(
        3, description="worker or node failures Ray Train recovers from inside one attempt"
    )
    hang_timeout: DurationS | None = Field(
        None, description="no progress report for this long: restarted from its checkpoint"
    )
    config: dict[str, Any] = Field(default_factory=dict, description="the loop's config")
    export: Literal["onnx"] | None = Field(
        None,
        description="onnx: the model rank 0's loop returns ({'model': module, 'example': "
        "inputs}) is exported to ONNX beside the last checkpoint and checked with onnxruntime",
    )

    @field_validator("loop")
    @classmethod
    def _module_function(cls, value: str) -> str:
        if not LOOP.fullmatch(value):
            raise ValueError(f"expected module:function, e.g. model:train_loop, got {value!r}")
        return value


class Limits(Model):
    max_usd_per_hour: UsdPerHour | None = None
    deadline: dt.datetime | None = None
    max_restarts: Annotated[int, Field(ge=0, le=10_000)] = 3
    max_runtime_s: DurationS | None = None


class JobSpec(Model):
    kind: JobKind
    entrypoint: Annotated[str, Field(min_length=1, examples=["python train.py"])] | None = Field(
        None, description="the command to run; a train job with a `train` section has none"
    )
    working_dir: str = "."
    runtime_env: RuntimeEnv = Field(default_factory=RuntimeEnv)
    resources: Resources = Field(default_factory=Resources)
    priority_class: Name | None = Field(None, description="default: the policy's for this kind")
    criticality: Criticality = "standard"
    team: Name = "default"
    data: list[Dataset] = Field(default_factory=list)
    checkpoint: Checkpoint | None = None
    train: Train | None = None
    serve: Serve | None = None
    limits: Limits = Field(default_factory=Limits)
    reserve: Reserve | None = Field(
        None,
        description=(
            "who holds the job's resources in Ray: `entrypoint` (the entrypoint process holds "
            "them; Ray sets CUDA_VISIBLE_DEVICES for it) or `workers` (the entrypoint holds "
            "nothing; the job's own tasks, actors or Ray Train workers claim them on the nodes "
            "meshctl chose, named in MESHCTL_NODES). Default: entrypoint for one node, workers "
            "for a gang."
        ),
    )

    @model_validator(mode="before")
    @classmethod
    def _elastic_nodes(cls, data: Any) -> Any:
        """An elastic train job's nodes are its most workers: ``resources.nodes`` defaults to
        ``train.workers.max`` (one worker per node)."""
        if not isinstance(data, dict):
            return data
        train, resources = data.get("train"), data.get("resources", {})
        workers = train.get("workers") if isinstance(train, dict) else None
        most = workers.get("max") if isinstance(workers, dict) else None
        if isinstance(most, int) and isinstance(resources, dict) and "nodes" not in resources:
            return {**data, "resources": {**resources, "nodes": most}}
        return data

    @model_validator(mode="after")
    def _gang_reserves_for_workers(self) -> JobSpec:
        if self.reserve == "entrypoint" and self.resources.nodes > 1:
            raise ValueError(
                "a gang job (nodes > 1) reserves for its workers: use reserve: workers"
            )
        return self

    @model_validator(mode="after")
    def _one_way_to_run(self) -> JobSpec:
        if self.entrypoint is None and self.train is None and self.serve is None:
            raise ValueError(
                "needs an entrypoint (the command to run), a train section or a serve section"
            )
        if self.entrypoint is not None and self.train is not None:
            raise ValueError("give an entrypoint or a train section, not both")
        if self.train is not None:
            if self.kind != "train":
                raise ValueError("a train section is for kind: train")
            if self.reserve == "entrypoint":
                raise ValueError("a train job's workers hold its resources: use reserve: workers")
            if self.train.min_workers is not None and self.train.min_workers > self.workers:
                raise ValueError(f"train.min_workers is more than the {self.workers} workers")
            if self.train.workers is not None:
                if self.train.min_workers is not None:
                    raise ValueError("give train.workers (elastic) or train.min_workers, not both")
                if self.train.workers_per_node != 1:
                    raise ValueError("an elastic train job (train.workers) runs one worker a node")
                if self.resources.nodes != self.train.workers.max:
                    raise ValueError(
                        f"resources.nodes ({self.resources.nodes}) must be train.workers.max "
                        f"({self.train.workers.max}), or left out"
                    )
        return self

    @model_validator(mode="after")
    def _service(self) -> JobSpec:
        if self.serve is None:
            return self
        if self.kind != "inference":
            raise ValueError("a serve section is for kind: inference")
        if self.entrypoint is not None or self.train is not None:
            raise ValueError("a service runs its serve section: give no entrypoint or train")
        if self.resources.nodes != 1:
            raise ValueError("resources are per replica: a service's resources.nodes is 1")
        return self

    @property
    def workers(self) -> int:
        """Ray Train workers (a train job), one per node otherwise."""
        per_node = self.train.workers_per_node if self.train else 1
        return self.resources.nodes * per_node

    @property
    def elastic(self) -> WorkerRange | None:
        """The worker range of an elastic train job; None for any other job."""
        return self.train.workers if self.train is not None else None

    @property
    def reserves_for(self) -> Reserve:
        if self.reserve is not None:
            return self.reserve
        if self.train is not None:
            return "workers"
        return "entrypoint" if self.resources.nodes == 1 else "workers"


class Job(DocumentModel):
    kind: Literal["Job"] = "Job"
    spec: JobSpec
