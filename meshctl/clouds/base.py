"""The one small interface every cloud provider implements, and what it assumes.

Assumptions, written down because every caller relies on them:

- **Eventually consistent.** An instance just launched may be missing from the next list;
  one just terminated may still be listed as stopping. Callers reconcile, they never assume.
- **Asynchronous.** ``launch`` returns once the provider accepted the request; the instances
  start afterwards (state ``pending``, then ``running``).
- **Idempotent per request id.** ``launch`` with a request id already used returns the
  instances of that request and launches nothing more; ``terminate`` of what is gone is fine.
- **Errors are data.** Capacity, quota, throttling and permission problems, and an API that
  does not answer or answers with a server error (``unavailable``: transient, whatever the
  request), come back as :class:`CloudError` values with a kind the controller can act on
  (fail over, back off, give up), never as exceptions. Throttling is retried with backoff
  first.
- **Interruptions come with notice.** A spot instance the provider is about to take back is
  listed ``interrupting`` for up to ``notice_s`` (AWS: the spot request is
  ``marked-for-termination``, two minutes; GCE: a preempted instance is ``STOPPING``, about
  30 s), then ``preempted`` or gone. The notice is the jobs' chance to checkpoint.
- **Checkable.** ``check`` makes one cheap authenticated call and says whether the provider
  answers this pool's credentials: None, or a ``CloudError`` whose message is the short reason
  the pool is unavailable ("no credentials", "AuthFailure: AWS was not able to validate the
  provided access credentials"). A provider that cannot even be built (a missing profile or
  credentials file) raises ``Unavailable`` with that reason instead.
- **Tagged.** Every instance carries the mesh, pool and request (and job, when it has one) as
  tags (AWS) or labels (GCP), so ``list_instances`` finds exactly this mesh's instances and
  ``meshctl gc`` finds the ones nothing owns.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol, TypeVar, runtime_checkable

from meshctl.errors import Failure

ErrorKind = Literal["capacity", "quota", "throttled", "unavailable", "auth", "invalid", "other"]
InstanceState = Literal["pending", "running", "interrupting", "stopping", "terminated", "preempted"]
FAILS_OVER: frozenset[ErrorKind] = frozenset({"capacity", "quota"})  # try the next zone

T = TypeVar("T")

# How long a (pool, node type) whose launch failed rests, by the errors' kinds.
BACKOFF_S = 300.0  # a stock-out, a quota: remembered this long
TRANSIENT_S = 15.0  # an API that did not answer or asked to slow down: left alone this long
TRANSIENT = frozenset({"unavailable", "throttled"})


def backoff_s(kinds: set[str]) -> float:
    """How long a (pool, node type) whose launch failed with errors of these kinds is left
    alone: briefly when its API only did not answer or was over its request rate (a
    transient state, each call already retried with backoff inside: a launch every 15 s is
    no load), the stock-out's time for capacity and quota, else four times that (a request
    it refuses)."""
    if kinds and kinds <= TRANSIENT:
        return TRANSIENT_S
    return BACKOFF_S if kinds <= {"capacity", "quota", *TRANSIENT} else 4 * BACKOFF_S


class Unavailable(Failure):
    """A provider that cannot be built for a pool (no credentials, no SDK); the message is the
    short reason the pool is unavailable. Callers turn it into that reason (``reason_of``);
    one that reached the CLI would be a failure of the world, exit 1."""


def reason_of(err: Exception) -> str:
    """The short reason a pool is unavailable, from an error its provider raised where errors
    are not data (building it, an SDK's own error): ``Unavailable``'s message as it is, else
    the error's type and first line ("NoRegionError: You must specify a region.")."""
    if isinstance(err, Unavailable):
        return str(err)
    text = str(err).strip()
    return f"{type(err).__name__}: {text.splitlines()[0]}" if text else type(err).__name__


@dataclass(frozen=True, slots=True)
class CloudError:
    kind: ErrorKind
    message: str
    zone: str | None = None


@dataclass(frozen=True, slots=True)
class Instance:
    id: str
    pool: str
    node_type: str
    zone: str
    state: InstanceState
    spot: bool
    request_id: str
    launched_at_s: float | None = None
    address: str = ""  # private IP, where the provider reports one
    labels: Mapping[str, str] = field(default_factory=dict)  # mesh, pool, request, job


@dataclass(frozen=True, slots=True)
class LaunchRequest:
    mesh: str
    pool: str
    node_type: str
    count: int
    request_id: str  # the idempotency key: the same request never launches twice
    zones: tuple[str, ...]  # tried in order; capacity and quota errors move to the next
    spot: bool = False
    image: str | None = None  # AMI id / GCE image; None: the provider's default lookup
    job: str | None = None
    startup_script: str = ""  # how the instance joins its pool's Ray cluster


@dataclass(frozen=True, slots=True)
class LaunchResult:
    instances: tuple[Instance, ...] = ()
    errors: tuple[CloudError, ...] = ()  # one per zone tried and refused, in order

    @property
    def ok(self) -> bool:
        return bool(self.instances)


class Cloud(Protocol):
    provider: str
    notice_s: float  # how long an ``interrupting`` instance has before it is taken back

    def list_instances(self, mesh: str) -> list[Instance]:
        """This mesh's instances that are not terminated."""
        ...

    def launch(self, request: LaunchRequest) -> LaunchResult: ...

    def terminate(self, ids: Sequence[str], request_id: str) -> list[CloudError]: ...

    def check(self) -> CloudError | None:
        """One cheap authenticated call: None when the provider accepts these credentials."""
        ...


@runtime_checkable
class Scripted(Protocol):
    """A provider whose instances boot from a startup script: its secret manager holds a
    pool's cluster token (AWS Secrets Manager, GCP Secret Manager), read by the instances'
    own role at boot (writing a name again adds a new version: the token rotates when the
    pool's cluster is recreated), and it gives back the script an instance holds."""

    def put_secret(self, name: str, value: str, labels: Mapping[str, str]) -> None: ...

    def startup_script(self, instance_id: str) -> str:
        """The script the instance boots from: EC2 user data, GCE ``startup-script``."""
        ...


def labels_of(request: LaunchRequest) -> dict[str, str]:
    found = {"mesh": request.mesh, "pool": request.pool, "request": request.request_id}
    if request.job:
        found["job"] = request.job
    return found


def launch_in_zones(
    request: LaunchRequest, attempt: Callable[[str], tuple[list[Instance], CloudError | None]]
) -> LaunchResult:
    """Try ``attempt(zone)`` zone by zone until one launches; capacity and quota errors move
    on to the next zone, any other error stops (it would fail the same way everywhere)."""
    errors: list[CloudError] = []
    for zone in request.zones:
        instances, error = attempt(zone)
        if error is None:
            return LaunchResult(tuple(instances), tuple(errors))
        errors.append(error)
        if error.kind not in FAILS_OVER:
            break
    return LaunchResult((), tuple(errors))


def with_backoff(
    call: Callable[[], T],
    throttled: Callable[[Exception], bool],
    tries: int = 5,
    base_s: float = 0.2,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """``call()``, retried with full-jitter exponential backoff while ``throttled(error)``."""
    for attempt in range(tries):
        try:
            return call()
        except Exception as err:
            if not throttled(err) or attempt == tries - 1:
                raise
            sleep(random.uniform(0, base_s * 2**attempt))
    raise AssertionError("unreachable")
