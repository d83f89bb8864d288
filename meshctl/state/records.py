"""Record types kept by the state store.

Every record is a frozen, slotted dataclass. Mutable records (jobs, attempts, pools, nodes,
instances) carry a ``version`` that the store sets: 1 on create, +1 on every update. The
append-only log entries (events, decisions) carry a ``seq`` that the store assigns.

The store never reads the clock: every timestamp is a float of UNIX seconds set by the caller,
in a field whose name ends in ``_s``. Payload mappings must be JSON-able; they are stored as
JSON text, so they come back as plain ``dict``/``list`` values. The details of attempts and
nodes are typed (``AttemptDetail``, ``NodeDetail``), stored as the same JSON objects.

The state fields of attempts, nodes and instances stay ``str``: the enums here
(``AttemptState``, ``NodeState``, ``InstanceState``) are the names the code writes and compares
with (a ``StrEnum`` member equals its string), and a record stored with another value (an
older meshctl's, a test's) still reads back.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import MISSING, Field, dataclass, field, fields
from enum import Enum, StrEnum
from typing import Any, Final, Self, TypeAlias


class JobState(StrEnum):
    """Where a job stands in its lifecycle."""

    PENDING = "pending"
    ADMITTED = "admitted"
    DISPATCHED = "dispatched"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    PREEMPTED = "preempted"
    EVICTED = "evicted"
    REQUEUED = "requeued"


@dataclass(frozen=True, slots=True)
class JobRecord:
    """A submitted job; ``spec`` is the job file's validated content."""

    id: str
    name: str
    team: str
    state: JobState
    priority: int
    spec: Mapping[str, Any]
    pool: str | None
    submitted_at_s: float
    updated_at_s: float
    version: int = 0
    owner: str = ""  # the user who submitted it (shared mode); "" for a local submission


class AttemptState(StrEnum):
    """Where one attempt stands: ``submitting`` (recorded; Ray may not know it yet), then Ray's
    own status lowercased, or ``lost`` (its pool no longer knows it), or ``abandoned`` (never
    submitted: its job was cancelled first)."""

    SUBMITTING = "submitting"
    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    STOPPED = "stopped"
    LOST = "lost"
    ABANDONED = "abandoned"


ACTIVE_ATTEMPT = frozenset({AttemptState.SUBMITTING, AttemptState.PENDING, AttemptState.RUNNING})
"""The attempt states in which an attempt holds what it was placed on."""

QUEUED = frozenset({JobState.PENDING, JobState.REQUEUED})
"""The job states that wait for a place."""
FINISHED = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED})
"""The job states a job never leaves."""


class Unrecorded(Enum):
    """A detail an older record does not have, told apart from one recorded as None."""

    UNRECORDED = "unrecorded"


UNRECORDED: Final = Unrecorded.UNRECORDED


_FIELDS: dict[type[Any], tuple[Field[Any], ...]] = {}  # dataclasses.fields, once per type


def _fields(kind: type[Any]) -> tuple[Field[Any], ...]:
    found = _FIELDS.get(kind)
    if found is None:
        found = _FIELDS[kind] = fields(kind)
    return found


_NAMES: dict[type[Any], frozenset[str]] = {}  # the same, less ``extra``: read for every row


def _names(kind: type[Any]) -> frozenset[str]:
    found = _NAMES.get(kind)
    if found is None:
        found = _NAMES[kind] = frozenset(f.name for f in _fields(kind)) - {"extra"}
    return found


def _split(kind: type[Any], data: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The keys of ``data`` that are fields of ``kind``, and the others (kept as ``extra``)."""
    names = _names(kind)
    known = {k: v for k, v in data.items() if k in names}
    return known, {k: v for k, v in data.items() if k not in names}


def _set(detail: AttemptDetail | NodeDetail) -> dict[str, Any]:
    """The unknown keys a detail was read with, then each field that is not its default."""
    out = dict(detail.extra)
    for f in _fields(type(detail)):
        value = getattr(detail, f.name)
        unset = value == f.default or (f.default_factory is not MISSING and not value)
        if f.name != "extra" and not unset:
            out[f.name] = dict(value) if isinstance(value, Mapping) else value
    return out


@dataclass(frozen=True, slots=True)
class Held:
    """What an attempt holds on one node, as it was placed: the fields of the scheduler's
    ``Allocation`` (a test holds the two the same). Its own type, because importing the
    scheduler here would bring the job models and CEL into every reader of the store."""

    node: str
    gpu_indices: tuple[int, ...] = ()
    gpu_share: float = 1.0  # per GPU held: 1.0, or the fraction of a shared GPU
    cpus: float = 0.0
    memory_gib: float = 0.0
    nic_gbps: float = 0.0

    def gpus(self) -> float:
        """The GPUs it holds (a shared GPU counts its share)."""
        return len(self.gpu_indices) * float(self.gpu_share)

    def to_json(self) -> dict[str, Any]:
        # Keys sorted, as the store writes them, so `jobs show -o json` prints them as before.
        return {
            "cpus": self.cpus,
            "gpu_indices": list(self.gpu_indices),
            "gpu_share": self.gpu_share,
            "memory_gib": self.memory_gib,
            "nic_gbps": self.nic_gbps,
            "node": self.node,
        }

    @classmethod
    def of(cls, data: Mapping[str, Any]) -> Self:
        """From its JSON object; a missing key takes its default, an unknown one is dropped."""
        known, _ = _split(cls, data)
        known["gpu_indices"] = tuple(known.get("gpu_indices", ()))  # JSON has lists
        return cls(**known)


@dataclass(frozen=True, slots=True)
class AttemptDetail:
    """What an attempt records besides its state: where it was placed and what it was placed
    with (at dispatch), and what happened to it since. A field at its default is not stored;
    keys this meshctl does not know are kept in ``extra`` and written back."""

    allocations: tuple[Held, ...] = ()
    # The job's failures (evictions) before this attempt; None: recorded before failures
    # were counted, when every attempt before it counts.
    failures_before: int | None = None
    failures: int | None = None  # the job's failures once it ended (recorded when requeued)
    # What it was expected to run, reckoned when placed; None: no estimate then (not "unknown,
    # estimate later"); UNRECORDED: placed by a meshctl that did not record it.
    runtime_s: float | Unrecorded | None = UNRECORDED
    checkpoint_uri: str | None = None  # where the job keeps its checkpoints, for all attempts
    checkpoint_endpoint: str | None = None  # the S3 endpoint to reach it by (None: the default)
    pool_mtbf_s: float | None = None  # its pool's MTBF over its nodes, for interval auto
    stop_at_s: float | None = None  # preempted or evicted: when it is stopped (its grace)
    for_job: str | None = None  # preempted: the job it makes room for
    # resized (an elastic job): (node, borrower) for each node it lends, the nodes it grows
    # onto; held for them while it stops
    lent: tuple[tuple[str, str], ...] = ()
    grows_onto: tuple[str, ...] = ()
    # A service (its one attempt): each replica's id, in the order of the allocations; the
    # replicas its traffic wants and since when it has asked for more or fewer
    # (``meshctl.lifecycle.serving.Scaling``); the number the next replica takes.
    replica_ids: tuple[str, ...] = ()
    replicas_wanted: int | None = None
    above_since_s: float | None = None
    below_since_s: float | None = None
    most_below: int = 0
    next_replica: int = 0
    # what Serve last said of it: status, message, replicas running, requests in flight and
    # per second, p50 and p99 latency (ms); for ``jobs show``
    serving: Mapping[str, Any] = field(default_factory=dict)
    submit_errors: int = 0  # submissions its pool refused
    # The Ray node ids of its nodes when it was placed, in the order of its allocations: what
    # it and its workers are pinned by (Ray's ray.io/node-id label). Empty: placed by a
    # meshctl that pinned by the meshctl.io/node label.
    ray_node_ids: tuple[str, ...] = ()
    # Ray custom resources its entrypoint claims on its node (GPU memory, NIC bandwidth), so
    # that Ray too refuses to over-commit them; empty where the node declares none.
    ray_resources: Mapping[str, float] = field(default_factory=dict)
    # A job whose workers hold its resources: the bundles of the Ray placement group that
    # holds them, one per allocation in its order (CPU, GPU, memory and the claims above);
    # empty: no placement group (the entrypoint holds them, Ray Train makes its own group,
    # or placed by a meshctl that made none).
    ray_bundles: tuple[Mapping[str, float], ...] = ()
    # Its datasets' paths in the cache of its first node (where its driver runs), by name:
    # what it reads through MESHCTL_DATA_<NAME>; a dataset absent here has no cache there.
    data_paths: Mapping[str, str] = field(default_factory=dict)
    # A train job whose driver runs on its pool's head, apart from its workers: a node of it
    # that dies is replaced inside the attempt when a free one can stand in
    # (``meshctl.lifecycle.replacing``; ``meshctl.workload.train.nominations``).
    replaceable: bool = False
    replaced: int = 0  # nodes replaced inside this attempt so far (job.node-replaced)
    # A job on several nodes: each dataset's path in each node's cache, in its nodes' order
    # ("" where a node has no cache): MESHCTL_DATA_<NAME>_NODES, for its workers.
    node_data_paths: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    extra: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """Its JSON object: the keys set, as the controller has always written them."""
        out = _set(self)
        if self.allocations:
            out["allocations"] = [held.to_json() for held in self.allocations]
        if self.checkpoint_uri is not None:  # recorded together, the endpoint null or not
            out["checkpoint_endpoint"] = self.checkpoint_endpoint
        return out

    @classmethod
    def of(cls, data: Mapping[str, Any]) -> Self:
        """From its JSON object: missing keys take their defaults, unknown ones go to
        ``extra``."""
        known, extra = _split(cls, data)
        if "allocations" in known:
            known["allocations"] = tuple(Held.of(a) for a in known["allocations"])
        if "ray_node_ids" in known:
            known["ray_node_ids"] = tuple(str(i) for i in known["ray_node_ids"])
        if "lent" in known:
            known["lent"] = tuple((str(n), str(b)) for n, b in known["lent"])
        if "replica_ids" in known:
            known["replica_ids"] = tuple(str(n) for n in known["replica_ids"])
        if "grows_onto" in known:
            known["grows_onto"] = tuple(str(n) for n in known["grows_onto"])
        if "ray_resources" in known:
            known["ray_resources"] = {str(k): float(v) for k, v in known["ray_resources"].items()}
        if "data_paths" in known:
            known["data_paths"] = {str(k): str(v) for k, v in known["data_paths"].items()}
        if "node_data_paths" in known:
            known["node_data_paths"] = {
                str(k): tuple(str(p) for p in v) for k, v in known["node_data_paths"].items()
            }
        if "ray_bundles" in known:
            known["ray_bundles"] = tuple(
                {str(k): float(v) for k, v in b.items()} for b in known["ray_bundles"]
            )
        return cls(**known, extra=extra)


@dataclass(frozen=True, slots=True)
class AttemptRecord:
    """One try at running a job on a pool; ``id`` is conventionally ``f"{job_id}-{number}"``."""

    id: str
    job_id: str
    number: int
    pool: str
    submission_id: str
    state: str  # an AttemptState
    started_at_s: float | None
    ended_at_s: float | None
    reason: str = ""
    detail: AttemptDetail = field(default_factory=AttemptDetail)
    version: int = 0
    epoch: int = 0  # the leading controller's lease epoch when written (set by a fenced store)


@dataclass(frozen=True, slots=True)
class PoolRecord:
    """A compute pool and what was last observed about it."""

    name: str
    provider: str
    state: str
    observed: Mapping[str, Any]
    updated_at_s: float
    version: int = 0


class NodeState(StrEnum):
    """A node's state: set by ``nodes cordon|drain|uncordon`` and by the controller."""

    READY = "ready"
    CORDONED = "cordoned"  # no new work; what runs there keeps running
    DRAINING = "draining"  # no new work; what still runs at its deadline is evicted
    DRAINED = "drained"  # its deadline passed; no new work until uncordoned
    UNHEALTHY = "unhealthy"  # its health signal; back to what it ``was`` when healthy


@dataclass(frozen=True, slots=True)
class NodeDetail:
    """What a node record keeps besides its state. A field at its default is not stored; keys
    this meshctl does not know are kept in ``extra`` and written back."""

    first_seen_s: float | None = None  # when the controller first saw it (watched since)
    failures: int = 0  # the failures it had: lost, or a new unhealthy signal
    deadline_s: float | None = None  # draining: when what still runs there is evicted
    reason: str | None = None  # unhealthy: what its health signal says
    was: str | None = None  # unhealthy: the state it goes back to when healthy
    extra: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """Its JSON object: the keys set."""
        return _set(self)

    @classmethod
    def of(cls, data: Mapping[str, Any]) -> Self:
        """From its JSON object: missing keys take their defaults, unknown ones go to
        ``extra``."""
        known, extra = _split(cls, data)
        return cls(**known, extra=extra)


@dataclass(frozen=True, slots=True)
class NodeRecord:
    """A node in a pool, as the controller has seen it."""

    id: str
    pool: str
    state: str  # a NodeState
    labels: Mapping[str, str]
    resources: Mapping[str, Any]
    updated_at_s: float
    detail: NodeDetail = field(default_factory=NodeDetail)
    version: int = 0


class InstanceState(StrEnum):
    """A cloud instance's state as meshctl records it (not its provider's own)."""

    JOINING = "joining"  # joining its pool's cluster
    READY = "ready"
    RECLAIMING = "reclaiming"  # a spot instance given notice
    INTERRUPTED = "interrupted"  # taken back, for good
    TERMINATING = "terminating"  # asked to go (recorded before the call); still billed
    TERMINATED = "terminated"  # by meshctl, for good: its provider confirmed it gone


INSTANCE_LIVE = frozenset({InstanceState.JOINING, InstanceState.READY, InstanceState.RECLAIMING})


@dataclass(frozen=True, slots=True)
class InstanceRecord:
    """A cloud instance requested from a provider for a pool; ``state`` an ``InstanceState``:
    ``joining`` its pool's cluster, ``ready``, ``reclaiming`` (a spot instance given notice),
    then ``interrupted`` (taken back) or ``terminated`` (by meshctl)."""

    id: str
    pool: str
    provider: str
    request_id: str
    instance_type: str
    state: str  # an InstanceState
    launched_at_s: float | None
    updated_at_s: float
    spot: bool = False
    version: int = 0


@dataclass(frozen=True, slots=True)
class LoanRecord:
    """An elastic job's node lent to a job of higher priority (the lending ledger,
    ``meshctl.lifecycle.lending.Loan``): open until the borrower or the lender ends."""

    id: str
    lender: str
    borrower: str
    pool: str
    node: str
    gpus: float
    opened_at_s: float
    closed_at_s: float | None = None
    lost_gpu_s: float = 0.0  # the lender's work lost when it stopped to lend
    version: int = 0


@dataclass(frozen=True, slots=True)
class Event:
    """An append-only log entry, e.g. kind ``"job.transition"``; ``seq`` is set by the store."""

    at_s: float
    kind: str
    job_id: str | None
    message: str
    data: Mapping[str, Any] = field(default_factory=dict)
    seq: int = 0


@dataclass(frozen=True, slots=True)
class Decision:
    """An append-only record of a policy decision about a job; ``seq`` is set by the store."""

    at_s: float
    job_id: str
    outcome: str
    policy_hash: str
    explanation: Mapping[str, Any]
    seq: int = 0
    epoch: int = 0  # the leading controller's lease epoch (set by a fenced store)


class Role(StrEnum):
    """What a user of a shared mesh may do (``meshctl.server.access`` says which verbs)."""

    USER = "user"  # submit, see and cancel their own jobs
    TEAM_ADMIN = "team-admin"  # and manage the jobs of their teams
    PLATFORM_ADMIN = "platform-admin"  # and nodes, pools, policies, the mesh itself


@dataclass(frozen=True, slots=True)
class UserRecord:
    """A user of a shared mesh: the teams their jobs may be charged to, and their role."""

    name: str
    role: Role
    teams: Sequence[str]  # stored as a JSON list; read back as a list
    created_at_s: float
    updated_at_s: float
    version: int = 0


@dataclass(frozen=True, slots=True)
class TokenRecord:
    """An API token of a user: ``id`` is the public half of the token, ``digest`` the SHA-256
    of its secret half (the secret itself is never stored)."""

    id: str
    username: str
    digest: str
    created_at_s: float
    revoked_at_s: float | None = None
    version: int = 0


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """An append-only record of an administrative action, allowed or refused; ``seq`` is set
    by the store."""

    at_s: float
    actor: str
    role: str
    action: str  # e.g. "jobs.cancel", "nodes.cordon", "users.add"
    target: str
    outcome: str  # "allowed", "denied" or "failed"
    detail: Mapping[str, Any] = field(default_factory=dict)
    seq: int = 0


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    """Who leads among the controllers of a mesh: ``holder`` until ``expires_at_s`` unless it
    renews; ``epoch`` goes up by one each time another holder takes it (``state.lease``)."""

    name: str
    holder: str
    epoch: int
    expires_at_s: float
    version: int = 0


Record: TypeAlias = (
    JobRecord
    | AttemptRecord
    | PoolRecord
    | NodeRecord
    | InstanceRecord
    | LoanRecord
    | UserRecord
    | TokenRecord
    | LeaseRecord
)
"""A mutable, versioned record."""

LogEntry: TypeAlias = Event | Decision | AuditEntry
"""An append-only log entry."""

Appended: TypeAlias = Event | AuditEntry
"""What a write may append in its own transaction: events, and audit entries."""


def latest_attempts(attempts: Iterable[AttemptRecord]) -> dict[str, AttemptRecord]:
    """Each job's latest attempt (the highest number), by job id: the one that says where
    the job is now; earlier attempts are history."""
    latest: dict[str, AttemptRecord] = {}
    for tried in attempts:
        best = latest.get(tried.job_id)
        if best is None or tried.number > best.number:
            latest[tried.job_id] = tried
    return latest
