"""Jobs: list, show, wait, cancel, submit and explain."""

from __future__ import annotations

from typing import Annotated, Any, Literal, NotRequired

from pydantic import with_config
from typing_extensions import TypedDict

from meshctl.app.shapes.base import DecisionData
from meshctl.jsontypes import STRICT, EventData, Timestamp

# --- jobs ---------------------------------------------------------------------------------


@with_config(STRICT)
class JobRow(TypedDict):
    id: str
    name: str
    team: str
    state: Annotated[str, "pending, admitted, dispatched, running, succeeded, failed, ..."]
    priority: int
    pool: Annotated[str | None, "where it runs or ran"]
    nodes: Annotated[list[str], "the nodes of its latest attempt"]
    attempt: Annotated[int, "its latest attempt's number; 0: none yet"]
    submitted_at: Timestamp
    updated_at: Timestamp
    age_s: Annotated[float, "seconds since it was submitted"]


@with_config(STRICT)
class OptionAsked(TypedDict):
    model: str
    gpus: Annotated[int, "devices of the model per node"]


@with_config(STRICT)
class AcceleratorAsked(TypedDict):
    vendor: NotRequired[str]
    any_of: list[str]
    equivalents: NotRequired[Annotated[int, "a fungible request: reference-model devices"]]
    topology: NotRequired[Annotated[str, "a TPU slice's shape"]]
    options: NotRequired[
        Annotated[list[OptionAsked], "a fungible request's options, fastest model first"]
    ]


@with_config(STRICT)
class TopologyAsked(TypedDict):
    domain: str
    mode: str


@with_config(STRICT)
class ResourcesAsked(TypedDict):
    gpus: Annotated[float, "per node"]
    gpu_memory_gib: NotRequired[float]
    accelerator: NotRequired[AcceleratorAsked]
    cpus: float
    memory_gib: float
    nic_gbps: float
    nodes: int
    topology: NotRequired[TopologyAsked]


@with_config(STRICT)
class ServiceData(TypedDict):
    app: Annotated[str, "module:attribute of its Serve application"]
    deployment: str | None
    url: Annotated[str | None, "where it answers (its pool's Serve port and route prefix)"]
    replicas_min: int
    replicas_max: int
    replicas_wanted: Annotated[int | None, "what its traffic asks for now"]
    replicas_placed: Annotated[int, "placed by meshctl on nodes"]
    replicas_running: Annotated[int | None, "running, as Serve last said"]
    status: Annotated[str | None, "Serve's: DEPLOYING, RUNNING, DEPLOY_FAILED, ..."]
    message: str | None
    in_flight: Annotated[float | None, "requests at its replicas and queued for them"]
    rps: float | None
    p50_ms: float | None
    p99_ms: float | None


@with_config(STRICT)
class LoanData(TypedDict):
    lender: str
    borrower: Annotated[str, "a job, or a service's replica (<job>/r<n>)"]
    pool: str
    node: str
    gpus: float
    opened_at: Timestamp
    closed_at: Annotated[Timestamp | None, "null: still lent"]
    gpu_hours: float
    lost_gpu_hours: Annotated[float, "the lender's work lost when it stopped to lend"]


@with_config(STRICT)
class TrainData(TypedDict):
    loop: Annotated[str, "module:function"]
    workers: int
    workers_per_node: int
    min_workers: int | None
    max_failures: int
    hang_timeout_s: float | None
    config: dict[str, Any]


@with_config(STRICT)
class AllocationData(TypedDict):
    node: str
    gpu_indices: list[int]
    gpu_share: Annotated[float, "per GPU held: 1.0, or the share of a shared GPU"]
    cpus: float
    memory_gib: float
    nic_gbps: float


@with_config(STRICT)
class AttemptData(TypedDict):
    number: int
    pool: str
    submission_id: Annotated[str, "the Ray job's submission id"]
    state: str
    nodes: list[str]
    started_at: Timestamp | None
    ended_at: Timestamp | None
    reason: Annotated[str | None, "why it ended, as Ray or meshctl said"]
    allocations: list[AllocationData]
    checkpoint_uri: str | None
    stop_at: Annotated[Timestamp | None, "when a preempted or evicted attempt is stopped"]
    preempted_for: Annotated[str | None, "the job it was preempted for"]


@with_config(STRICT)
class AttemptTrainingData(TypedDict):
    attempt: int
    resumed_from_step: Annotated[int | None, "null: from scratch"]
    restarts: Annotated[int, "worker-group restarts inside the attempt"]
    last_step: int | None
    checkpoints: int


@with_config(STRICT)
class RecoveryData(TypedDict):
    attempt: int
    cause: str
    last_step: int | None
    resumed_from_step: int | None
    steps_lost: int | None
    detect_s: float | None
    resume_s: float | None


@with_config(STRICT)
class TrainingData(TypedDict):
    attempts: list[AttemptTrainingData]
    recoveries: list[RecoveryData]


@with_config(STRICT)
class ExportCheck(TypedDict):
    runtime: Annotated[str, "what ran the exported file: onnxruntime and its version"]
    samples: Annotated[int, "the example batch's size"]
    max_abs_diff: Annotated[float, "the largest difference from PyTorch's outputs"]
    rtol: float
    atol: float


@with_config(STRICT)
class ExportData(TypedDict):
    attempt: int
    format: Annotated[str, "onnx"]
    path: Annotated[str | None, "the exported file, beside the checkpoints; None: it failed"]
    bytes: int | None
    checked: Annotated[ExportCheck | None, "the runtime's outputs against PyTorch's"]
    error: Annotated[str | None, "why the export failed (the training stands)"]
    exported_at: str | None


@with_config(STRICT)
class JobShow(JobRow):
    kind: str
    priority_class: str | None
    entrypoint: str | None
    resources: ResourcesAsked
    train: TrainData | None
    attempts: list[AttemptData]
    events: list[EventData]
    decision: Annotated[str | None, "the scheduler's latest word on it"]
    policy_hash: Annotated[str | None, "the policy set its latest decision was made under"]
    training: NotRequired[Annotated[TrainingData, "a train job's recoveries, when recorded"]]
    export: NotRequired[Annotated[ExportData, "a train job's export (train.export), when made"]]
    service: NotRequired[Annotated[ServiceData, "a service (a serve section): its replicas"]]
    loans: NotRequired[Annotated[list[LoanData], "GPUs it lent, or borrowed, and when"]]


@with_config(STRICT)
class WaitRow(TypedDict):
    id: str
    state: str


@with_config(STRICT)
class CancelRow(TypedDict):
    id: str
    state: Annotated[str, "after the command"]
    previous_state: str
    cancelled: Annotated[bool, "false: it had already finished"]


@with_config(STRICT)
class Submitted(TypedDict):
    id: Annotated[str | None, "the job's id; null for a dry run"]
    name: str
    state: Annotated[str | None, "pending; null for a dry run"]
    priority: int
    priority_class: str | None
    decision: Annotated[DecisionData | None, "the plan on the idle mesh (--dry-run, --explain)"]


@with_config(STRICT)
class OfferTried(TypedDict):
    tried_at: Timestamp
    pool: str
    zone: Annotated[str | None, "null: refused before any zone was tried"]
    node_type: str
    spot: bool
    outcome: Literal[
        "launched", "stock-out", "quota", "permission", "invalid request", "throttled", "other"
    ]
    message: Annotated[str, "the provider's words, or what was launched"]


@with_config(STRICT)
class ExplainStored(TypedDict):
    id: str
    state: str
    pool: str | None
    nodes: list[str]
    attempt: int
    attempt_state: Annotated[str | None, "its last attempt's state; null: none yet"]
    last_event: EventData | None
    decision: Annotated[DecisionData | None, "null: the controller has not decided yet"]
    policy_hash: Annotated[str | None, "the policy set that decision was made under"]
    policy_hash_enforced: Annotated[str | None, "the policy set enforced now; null: none runs"]
    offers_tried: Annotated[list[OfferTried], "every cloud launch for it, in order, and outcome"]


@with_config(STRICT)
class PlaceAction(TypedDict):
    action: Literal["place"]
    job_id: str
    pool: str
    allocations: list[AllocationData]
    score: float
    backfill: bool  # placed around a reservation held for a job ahead of it


@with_config(STRICT)
class PreemptAction(TypedDict):
    action: Literal["preempt"]
    victim_job_id: str
    for_job_id: str
    grace_s: float
    rule: str | None


@with_config(STRICT)
class ProvisionAction(TypedDict):
    action: Literal["provision"]
    job_id: str
    pool: str
    node_type: str
    count: int
    spot: bool
    usd_per_hour: float
    price_uncertain: Annotated[bool, "the catalog marks this price uncertain"]


@with_config(STRICT)
class EvictAction(TypedDict):
    action: Literal["evict"]
    job_id: str
    reason: str


Action = Annotated[
    PlaceAction | PreemptAction | ProvisionAction | EvictAction, "one of, by its `action`"
]


@with_config(STRICT)
class ExplainPlan(TypedDict):
    job: Annotated[str, "the job file's name"]
    planned_against: Annotated[
        Literal["live", "idle", "moment"],
        "live: the mesh as the running controller last recorded it (what its jobs hold, each "
        "node's state); idle: no controller runs, every node free; moment: --mesh STATE.yaml",
    ]
    decision: DecisionData
    actions: Annotated[list[Action], "what the cycle would do"]
