"""What the controller's side of the cycle (``side.py``) builds its snapshot and notes from.

In: the jobs holding resources (running, or leaving: their stop time) and waiting (with their
runtime, declared or estimated, and the nodes being freed for them), the observed nodes
(``nodes.py``), the cloud offers at the price paid less what runs, the pools' facts (the wait
forecast, what each may still launch, why one cannot be used), and what the policies see
(capacity, waits per priority, this month's spend). Out of the plan: a launch's cloud
request (``launch_request``), a loan's record, and a decision note per waiting job with what
``explain`` says of it besides the scheduler's reasons. Pure, like ``decide``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from meshctl.controller.deciding.dispatch import placement_nodes
from meshctl.controller.deciding.idle import joined
from meshctl.controller.deciding.nodes import running as running_of
from meshctl.controller.deciding.step import (
    DecisionNote,
    RuleError,
    Rules,
    Step,
    launch_request_id,
    of_request,
    own_head,
)
from meshctl.controller.deciding.world import JobView, World, request_of
from meshctl.lifecycle import Backlog, Estimate, Estimator, lending
from meshctl.lifecycle.snapshot import (
    configured_pools,
    leaving,
    nominations,
    offers_left,
    offers_of,
    pending_of,
    pool_infos,
)
from meshctl.lifecycle.view import (
    Capacity,
    MeshView,
)
from meshctl.model.mesh import AwsPool, GcpPool
from meshctl.policy.facts import mesh_snapshot
from meshctl.pools.observed import node_name
from meshctl.scheduler import (
    Node,
    Pending,
    PolicyView,
    Request,
    Running,
    Snapshot,
)
from meshctl.scheduler.plan import Decision
from meshctl.state.records import (
    INSTANCE_LIVE,
    AttemptRecord,
    JobState,
    LoanRecord,
)

Estimates = dict[str, Estimate | None]  # each waiting job's runtime, declared or estimated


def runtime_of(view: JobView, estimator: Estimator) -> Estimate | None:
    record, limits = view.record, view.job.spec.limits
    return estimator.estimate(record.team, record.name, limits.max_runtime_s)


def mesh_view(
    world: World,
    rules: Rules,
    nodes: Sequence[Node],
    running: Sequence[Running],
    queued: Sequence[JobView],
    runtimes: Mapping[str, Estimate | None],
) -> MeshView:
    """What the policies see: capacity per pool, the wait forecast per priority (from the
    running jobs' expected ends and the work queued), this month's spend."""
    capacity = Capacity.of(nodes).of_pools([p.name for p in rules.mesh.spec.pools])
    backlog = Backlog.of(rules.policies)
    # fed in the order it keeps them (by end, or start when the end is unknown): each one
    # goes at the back of its list instead of moving those after it
    for _, job_id, gpus, r in sorted(
        (r.expected_end_s if r.expected_end_s is not None else r.started_at_s, r.job_id, r.gpus, r)
        for r in running
    ):
        backlog.run(job_id, r.pool, r.expected_end_s, gpus, r.started_at_s)
    for v in queued:
        known = seconds(runtimes[v.record.id])
        backlog.queue(v.record.id, v.record.priority, v.job.spec.resources.total_gpus, known)
    clouds = [p.name for p in rules.mesh.spec.pools if isinstance(p, AwsPool | GcpPool)]
    waits = backlog.waits(capacity, clouds, world.now_s)
    return MeshView(
        mesh_snapshot(rules.mesh, rules.catalogs),
        capacity,
        waits,
        len(queued),
        world.spend_usd,
        world.team_spend_usd,
    )


def loan_record(loan: lending.Loan) -> LoanRecord:
    return LoanRecord(
        loan.id, loan.lender, loan.borrower, loan.pool, loan.node, loan.gpus,
        loan.opened_at_s, loan.closed_at_s, loan.lost_gpu_s,
    )  # fmt: skip


def as_loan(record: LoanRecord) -> lending.Loan:
    return lending.Loan(
        record.id, record.lender, record.borrower, record.pool, record.node,
        record.gpus, record.opened_at_s, record.closed_at_s, record.lost_gpu_s,
    )  # fmt: skip


def forecasts(
    queued: Sequence[JobView], runtimes: Mapping[str, Estimate | None], mesh: MeshView
) -> dict[str, dict[str, Any]]:
    """What explain says of each waiting job besides the scheduler's reasons: the runtime
    backfill reckons with and where it came from, and the wait the policies saw in each
    on-prem pool with what it assumed there: the running jobs with no runtime known, each
    taken to run at least ``unknown_runtime_s`` more (recorded with the decision as
    ``forecast``)."""
    clouds = {p.name for p in mesh.configured.pools if p.cloud}
    assumed = dict(sorted(mesh.waits.assumed.items()))  # on-prem pools only, as the waits
    by_priority: dict[int, dict[str, float]] = {}  # the same for every job of a priority
    out = {}
    for view in queued:
        found = runtimes[view.record.id]
        source = (
            found.source
            if found is not None
            else f"unknown: no max_runtime_s, no earlier run of {view.record.name!r} by team "
            f"{view.record.team}; backfill does not count on it ending"
        )
        priority = view.record.priority
        if priority not in by_priority:
            waits = mesh.waits.of(priority)
            by_priority[priority] = {
                p: round(w, 3) for p, w in sorted(waits.items()) if p not in clouds
            }
        out[view.record.id] = {
            "runtime_s": found.seconds if found is not None else None,
            "runtime": source,
            "expected_wait_s": dict(by_priority[priority]),
            "assumed": dict(assumed),
            "unknown_runtime_s": mesh.waits.unknown_runtime_s,
            "blocked_by": None,
        }
    return out


def seconds(found: Estimate | None) -> float | None:
    return found.seconds if found is not None else None


def leaving_now(step: Step) -> set[str]:
    """Jobs this step already makes leave (or fail while they run): no victims again."""
    return {
        t.job_id
        for t in step.transitions
        if t.to in (JobState.EVICTED, JobState.PREEMPTED, JobState.FAILED)
    }


def running_now(
    view: JobView,
    world: World,
    estimator: Estimator,
    leaving_now: set[str],
    lent: Mapping[str, int],
) -> Running:
    found = running_of(view, world, estimator)
    elastic = view.job.spec.elastic
    if elastic is not None:  # at its size now: one node a worker; it may lend to its least
        found = replace(
            found,
            request=lending.sized(found.request, len(found.allocations)),
            elastic_min=elastic.min,
        )
    if view.record.id in leaving_now and not found.leaving:
        stop_at = _stop_at(view, world)
        return leaving(found, stop_at)
    return found


def _stop_at(view: JobView, world: World) -> float:
    stop_at = view.attempt.detail.stop_at_s if view.attempt else None
    return stop_at if stop_at is not None else world.now_s


def snapshot(
    world: World,
    rules: Rules,
    holding: Sequence[JobView],
    running: Sequence[Running],
    queued: Sequence[JobView],
    runtimes: Mapping[str, Estimate | None],
    mesh: MeshView,
    nodes: Sequence[Node],
    lent: Mapping[str, int],
    replicas: Sequence[Pending] = (),
) -> Snapshot:
    live: dict[str, int] = defaultdict(int)
    of_type: dict[tuple[str, str], int] = defaultdict(int)
    for instance in world.instances:
        if own_head(instance.request_id):
            continue  # a pool's own head: outside its max_nodes, as in the simulator
        live[instance.pool] += 1
        of_type[(instance.pool, instance.instance_type)] += 1
    pools = pool_infos(
        configured_pools(rules.mesh.spec.pools, rules.catalogs), mesh.waits.lowest(), live,
        world.pool_unavailable,
    )  # fmt: skip
    offers = offers_left(
        (
            o
            for p in rules.mesh.spec.pools
            for o in offers_of(p, rules.catalogs)
            if (o.pool, o.node_type) not in world.unavailable
        ),
        of_type,
    )
    freeing = [
        pair
        for v in holding
        if v.attempt is not None and v.record.state is JobState.PREEMPTED
        for pair in _freeing(v.record.id, v.attempt)
    ]
    freeing += [  # a resized job that stopped keeps its nodes held until it runs again
        pair
        for v in queued
        if v.attempt is not None and (v.attempt.detail.lent or v.attempt.detail.grows_onto)
        for pair in _freeing(v.record.id, v.attempt)
        if pair[0] == v.record.id
    ]
    nominated = nominations(freeing)
    launches = _launches(world)
    pending = [
        pending_of(
            v.record.id,
            v.record.team,
            v.record.priority,
            _request(v, lent),
            v.record.submitted_at_s,
            seconds(runtimes[v.record.id]),
            nominated.get(v.record.id, ()),
            provisioning=_launching(v, launches),
        )
        for v in queued
    ]
    by_id = {v.record.id: v for v in holding}
    for job in running:  # elastic jobs below their size (their loans closed) grow back
        view = by_id.get(job.job_id)
        if view is None or view.record.state is not JobState.RUNNING:
            continue
        wanted = _size(view, lent)
        grow = lending.growth(job, wanted, view.record.submitted_at_s) if wanted else None
        if grow is not None:
            pending.append(grow)
    pending += [  # services' replicas: the nodes lent to them are theirs
        replace(p, nominated=nominated[p.job_id]) if p.job_id in nominated else p for p in replicas
    ]
    return Snapshot(world.now_s, tuple(nodes), pools, tuple(running), tuple(pending), offers)


def _size(view: JobView, lent: Mapping[str, int]) -> int | None:
    """An elastic job's nodes now (its most, less what it lends); None for any other job."""
    elastic = view.job.spec.elastic
    if elastic is None:
        return None
    return lending.size(elastic.max, elastic.min, lent.get(view.record.id, 0))


def _request(view: JobView, lent: Mapping[str, int]) -> Request:
    request = request_of(view)
    nodes = _size(view, lent)
    return request if nodes is None else lending.sized(request, nodes)


def _freeing(job_id: str, attempt: AttemptRecord) -> list[tuple[str, Sequence[str]]]:
    """Whom a stopping attempt's nodes are held for: a preempted job's for its preemptor; a
    resized one's: each node it lends for its borrower, the rest (and the free nodes it grows
    onto) for itself, to resume on."""
    detail, nodes = attempt.detail, placement_nodes(attempt)
    if not detail.lent and not detail.grows_onto:
        return [(detail.for_job or "", nodes)]
    lent = dict(detail.lent)
    out: list[tuple[str, Sequence[str]]] = [(b, [n]) for n, b in detail.lent]
    out.append((job_id, [n for n in nodes if n not in lent] + list(detail.grows_onto)))
    return out


def _launches(world: World) -> set[str]:
    """The launch requests with an instance of work on its way (not joined yet): each such
    instance's request id and every part of it before a "." (a request's instances are
    ``<request>`` or ``<request>.<n>...``), looked up once per waiting job."""
    out: set[str] = set()
    for instance in world.instances:
        request = instance.request_id
        if own_head(request) or joined(world, instance):
            continue  # no node of work: the workers tell
        out.add(request)
        out.update(request[:i] for i, c in enumerate(request) if c == ".")
    return out


def _launching(view: JobView, launches: set[str]) -> bool:
    """A launch for the job's next attempt is under way: one of its instances has not joined
    its pool's cluster yet (``launches``: ``_launches``), whichever time it was asked."""
    number = (view.attempt.number if view.attempt else 0) + 1
    base = launch_request_id(view.record.id, number)
    return base in launches or any(r.startswith(base + ASKED_AGAIN) for r in launches)


# a job's launch asked again after its first landed: ``<request>_<n>`` (a character GCE's
# labels keep, so it never reads as a generation's ``.<n>`` there)
ASKED_AGAIN = "_"


def launch_request(world: World, job_id: str, number: int) -> str:
    """The cloud request of a launch for a job's attempt ``number``. Asked again while its
    instances are on their way, or while only its pool's head runs, it is the same request:
    the provider hands back what it launched, and the workers follow the head. Asked again
    once its workers' nodes are live in their pool (another job took them), it is a new
    request, ``<request>_<n>``: as in the simulator, the lifecycle's launch launches."""
    base = launch_request_id(job_id, number)
    asked = {
        i.request_id.split(".", 1)[0]
        for i in world.instances
        if i.request_id.startswith(base + ASKED_AGAIN)
    }
    latest = max(asked, key=lambda r: int(r.rsplit(ASKED_AGAIN, 1)[1]), default=base)
    workers = [
        i
        for i in world.instances
        if of_request(i.request_id, latest)
        and not own_head(i.request_id)
        and i.state in INSTANCE_LIVE
    ]
    if workers and all(node_name(i.id) in world.live_nodes(i.pool) for i in workers):
        return f"{base}{ASKED_AGAIN}{len(asked) + 1}"
    return latest


def rule_errors(policies: PolicyView, queued: Sequence[JobView]) -> list[RuleError]:
    """The rules that failed for each queued job (its verdict was computed this cycle)."""
    found = []
    for view in queued:
        verdict = policies.verdict(view.record.id)
        for error in verdict.errors if verdict is not None else ():
            pools = ", ".join(error.pools) or None  # those a selector failed for
            rule, origin, part, said = error.rule, error.origin, error.part, error.message
            found.append(RuleError(view.record.id, rule, origin, part, pools, said))
    return found


def note(decision: Decision, forecast: Mapping[str, Any] | None) -> DecisionNote:
    explanation = decision.explanation()
    if forecast is not None:
        explanation["forecast"] = dict(forecast)
        if decision.blocked_by is not None:  # not waiting for GPUs: a wait would mislead
            explanation["forecast"].update(
                blocked_by=decision.blocked_by, expected_wait_s={}, assumed={}
            )
    return DecisionNote(decision.job_id, decision.status, decision.summary(), explanation)
