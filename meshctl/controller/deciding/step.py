"""What one decision step says to do: plain frozen values that ``decide`` (pure) returns and
the loop (``loop.py``) applies, and ``Rules``, what decide needs besides the world. A launch
is the lifecycle's own (``meshctl.lifecycle.Launch``), with its request id."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from meshctl.lifecycle import BudgetCrossed
from meshctl.lifecycle import Launch as Launch  # a step's launch: the lifecycle's
from meshctl.lifecycle.serving import Scaling
from meshctl.model.accelerators import Accelerators, AcceleratorsSpec
from meshctl.model.catalog import Catalog
from meshctl.model.mesh import Mesh
from meshctl.policy.compiled import PolicySet
from meshctl.policy.tenancy import BudgetStanding
from meshctl.pools.observed import Submission
from meshctl.scheduler import Plan, SchedulerConfig
from meshctl.state.records import AttemptRecord, Held, JobState, LoanRecord


@dataclass(frozen=True, slots=True)
class Transition:
    job_id: str
    to: JobState
    reason: str
    pool: str | None = None


@dataclass(frozen=True, slots=True)
class AttemptChange:
    attempt_id: str
    state: str | None  # None: unchanged
    reason: str = ""
    started_at_s: float | None = None
    ended_at_s: float | None = None
    stop_at_s: float | None = None
    for_job: str | None = None  # the preemptor its GPUs are freed for
    failures: int | None = None  # the job's failures once this attempt has ended
    lent: tuple[tuple[str, str], ...] = ()  # resized: (node, borrower) per node it lends
    grows_onto: tuple[str, ...] = ()  # resized: the free nodes held for it


@dataclass(frozen=True, slots=True)
class Replacement:
    """A train job's dead nodes replaced inside its attempt (``lifecycle.replacing``): the
    attempt records its new allocations and Ray node ids, then its run is told its new pins
    (``meshctl.workload.train.nominations``, beside its checkpoints)."""

    job_id: str
    attempt_id: str
    attempt: int
    pool: str
    allocations: tuple[Held, ...]
    ray_node_ids: tuple[str, ...]
    uri: str
    endpoint_url: str | None
    reason: str

    def onto(self, attempt: AttemptRecord) -> AttemptRecord:
        """The attempt on its new nodes."""
        detail = replace(
            attempt.detail,
            allocations=self.allocations,
            ray_node_ids=self.ray_node_ids,
            replaced=attempt.detail.replaced + 1,
        )
        return replace(attempt, detail=detail)


@dataclass(frozen=True, slots=True)
class ServiceChange:
    """A service's replicas and scaling, as its attempt records them from now on."""

    job_id: str
    pool: str
    allocations: tuple[Held, ...]
    replica_ids: tuple[str, ...]
    wanted: int
    scaling: Scaling
    next_replica: int
    why: str = ""  # what changed, for the service's events ("scaled out to 4: ...")
    serving: Mapping[str, Any] = field(default_factory=dict)  # what Serve last said


@dataclass(frozen=True, slots=True)
class Dispatch:
    """Record the attempt (state submitting), admit the job, submit, mark it dispatched."""

    job_id: str
    attempt: AttemptRecord
    submission: Submission
    reason: str


@dataclass(frozen=True, slots=True)
class Resubmit:
    """An attempt recorded as submitting that its pool does not know: submit it (again)."""

    job_id: str
    attempt_id: str
    pool: str
    submission: Submission


@dataclass(frozen=True, slots=True)
class Stop:
    job_id: str
    pool: str
    submission_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class CheckpointRequest:
    """Ask a running job to checkpoint now: it will be stopped at ``deadline_s`` (its spot
    instance was given notice, or it was preempted and has its grace). Written where the job
    keeps its checkpoints (``meshctl.workload``); a job with no checkpoint storage
    (``uri`` None) cannot be asked, and the event says so."""

    job_id: str
    attempt: int
    uri: str | None
    endpoint_url: str | None
    reason: str
    deadline_s: float


@dataclass(frozen=True, slots=True)
class NodeChange:
    """A node's state changed: ``unhealthy`` (out of service), ``ready`` (healthy again), or
    ``drained`` (its drain deadline passed)."""

    node: str  # "pool/node"
    state: str
    reason: str


@dataclass(frozen=True, slots=True)
class Teardown:
    """Terminate idle cloud instances of a pool, in this order (workers first, its head
    last: ``meshctl.lifecycle.teardown``)."""

    pool: str
    instance_ids: tuple[str, ...]
    reason: str


@dataclass(frozen=True, slots=True)
class RuleError:
    """A policy rule that failed at run time for a job (it fails closed: the verdict is the
    narrower one); the loop raises a ``policy.error`` event once per job and failure."""

    job_id: str
    rule: str
    origin: str  # file:line
    part: str  # when, to, victims ...
    pool: str | None  # the pools a selector failed for (comma-separated); None for `when`
    message: str


@dataclass(frozen=True, slots=True)
class DecisionNote:
    job_id: str
    outcome: str
    summary: str
    explanation: Mapping[str, Any]


@dataclass
class Step:
    transitions: list[Transition] = field(default_factory=list)
    attempts: list[AttemptChange] = field(default_factory=list)
    replacements: list[Replacement] = field(default_factory=list)
    dispatches: list[Dispatch] = field(default_factory=list)
    resubmits: list[Resubmit] = field(default_factory=list)
    stops: list[Stop] = field(default_factory=list)
    checkpoints: list[CheckpointRequest] = field(default_factory=list)
    nodes: list[NodeChange] = field(default_factory=list)
    launches: list[Launch] = field(default_factory=list)
    teardowns: list[Teardown] = field(default_factory=list)
    decisions: list[DecisionNote] = field(default_factory=list)
    rule_errors: list[RuleError] = field(default_factory=list)
    budgets: list[BudgetCrossed] = field(default_factory=list)
    standings: tuple[BudgetStanding, ...] = ()  # each budget this month, for the heartbeat
    # (team, job name, runtime s) of the jobs seen succeed: what runtime estimates learn
    successes: list[tuple[str, str, float]] = field(default_factory=list)
    loans: list[LoanRecord] = field(default_factory=list)  # opened (version 0) or closed
    services: list[ServiceChange] = field(default_factory=list)
    plan: Plan | None = None


@dataclass(frozen=True, slots=True)
class Rules:
    """What decide needs besides the world: the mesh, its catalogs and its policies."""

    mesh: Mesh
    catalogs: Mapping[str, Catalog]
    policies: PolicySet | None
    config: SchedulerConfig = field(default_factory=SchedulerConfig)
    accelerators: Accelerators | None = None  # the registry: a train job's backend

    @property
    def registry(self) -> AcceleratorsSpec | None:
        """The accelerator registry's entries (None: not loaded, every device a GPU)."""
        return self.accelerators.spec if self.accelerators is not None else None


def submission_id(job_id: str, number: int) -> str:
    return f"meshctl-{job_id}-{number}"


def launch_request_id(job_id: str, number: int) -> str:
    """The cloud request of a job's attempt: asking again launches nothing more."""
    return f"burst-{job_id}-{number}"


# The parts of one launch request, by the suffix of their request ids (after a generation's
# ``.<n>``): a pool's own head starting its cluster, and the workers launched once it runs.
HEAD_PART, WORKERS_PART = ".h", ".w"


def own_head(request_id: str) -> bool:
    """Whether an instance of this request id is a pool's own head (no GPUs, no work)."""
    return request_id.endswith(HEAD_PART)


def workers_part(request_id: str) -> bool:
    """Whether the request id is of a request's second half: the workers after its head (of
    any generation: ``.w``, ``.w.1``, ...)."""
    stem, _, number = request_id.rpartition(".")
    return request_id.endswith(WORKERS_PART) or (number.isdigit() and stem.endswith(WORKERS_PART))


def of_request(request_id: str, base: str) -> bool:
    """Whether a recorded request id is ``base`` or one of its parts or later generations."""
    return request_id == base or request_id.startswith(base + ".")
