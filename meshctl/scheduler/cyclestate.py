"""The state of one scheduling cycle: what is free, used, held and taken as it goes.

``CycleState`` sets up what a cycle starts from (the nodes' free resources by pool, each
team's use, the jobs leaving and the nodes being freed for others) and answers the questions
every stage asks of it: the nodes a job could use or take were they free, which nodes are held
for another job, what a team holds and keeps, and what it uses as a lending team's quota sees
it. The decisions themselves, job by job, are ``cycle._Cycle``'s. Pure.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from operator import attrgetter

from meshctl.policy.facts import TeamUsage
from meshctl.policy.verdict import Verdict
from meshctl.scheduler import burst
from meshctl.scheduler.availability import Availability
from meshctl.scheduler.config import SchedulerConfig
from meshctl.scheduler.context import cycle_context
from meshctl.scheduler.filters import AcceleratorFilter, EligibilityFilter, HealthFilter
from meshctl.scheduler.framework import CycleContext, Filter, Rejection
from meshctl.scheduler.layout import Layout
from meshctl.scheduler.placement import ScoreMemo, weighted
from meshctl.scheduler.plan import Plan
from meshctl.scheduler.policies import PolicyView
from meshctl.scheduler.request import Request
from meshctl.scheduler.snapshot import Pending, Running, Snapshot
from meshctl.scheduler.usage import RunningUsage, charge, team_usage
from meshctl.scheduler.working import FreeIndex, NodeState, States

JOB_ID, LEAVING = attrgetter("job_id"), attrgetter("leaving")
STATIC_FILTERS: tuple[Filter, ...] = (HealthFilter(), EligibilityFilter(), AcceleratorFilter())


class CycleState:
    def __init__(
        self,
        snap: Snapshot,
        policies: PolicyView,
        config: SchedulerConfig,
        layout: Layout,
        usage: RunningUsage | None = None,
    ) -> None:
        self.snap, self.policies, self.config = snap, policies, config
        self.plan = Plan(snap.now_s)
        layout.update(snap.nodes)
        self.states = States(layout.by_name)
        self.max_usd, self.any_unhealthy = layout.max_usd, layout.any_unhealthy
        self.totals = layout.totals
        self.indexes = {
            pool: FreeIndex([dict(bucket) for bucket in buckets], self.states)
            for pool, buckets in layout.buckets.items()
        }  # copies: the cycle moves nodes between buckets as it places jobs
        self._running_on: dict[str, list[Running]] | None = None  # built when first needed
        self.usage = team_usage(snap, usage)  # per team: GPUs, CPUs, memory GiB, GPU memory GiB
        self.node_pools = frozenset(self.indexes)  # the pools with nodes
        every = self.node_pools | frozenset(p.name for p in snap.pools)
        self.avail = Availability.of(snap, every)
        self.onprem = every - frozenset(p.name for p in snap.pools if p.cloud)
        self.offers = list(snap.offers)
        self.headroom = burst.Headroom.of(snap.pools)
        self.preempted: set[str] = set(map(JOB_ID, filter(LEAVING, snap.running)))  # in C
        self.lent: dict[str, int] = {}  # elastic job -> nodes it lends this cycle
        self.leaving: dict[str, float] | None = None  # team -> GPUs leaving (``_keeps``)
        self.stopped: dict[str, float] = defaultdict(float)  # team -> GPUs stopped this cycle
        self.asked: dict[str, float] | None = None  # team -> GPUs its pending jobs ask
        self.no_reclaim: set[tuple[Request, str, int]] = set()  # found nothing to take back
        self.charged: dict[str, float] = defaultdict(float)  # team -> GPUs charged this cycle
        self.never: dict[tuple[Request, frozenset[str]], str | None] = {}
        self.requests: dict[Request, Request] = {}  # one of each: keys then match by identity
        self.static: dict[tuple[object, ...], list[NodeState]] = {}
        self.unplaceable: set[tuple[Request, frozenset[str], bool]] = set()
        self.fits_unheld: dict[tuple[Request, frozenset[str]], bool] = {}
        self.no_victims: set[tuple[Request, int, int]] = set()
        self.verdicts_seen: list[Verdict] = []  # kept alive: no_victims keys hold their id()
        self.reservation: str | None = None
        self.reserved_until: float | None = None  # when the reservation's nodes are needed
        self.reservation_tried = False
        self.nominated: dict[str, set[str]] = defaultdict(set)  # node -> jobs it is freed for
        self.nominees: set[str] = set()  # jobs some node is being freed for
        for pending in snap.pending:
            for name in pending.nominated:
                self.nominated[name].add(pending.job_id)
                self.nominees.add(pending.job_id)
        self.scorers = weighted(
            policies.weights, policies.packing == "spread", config.fragmentation
        )
        self.base = cycle_context(snap, self.max_usd)
        self.scores: ScoreMemo = {}  # pure in this cycle's scorers and base
        self.rank = {name: i for i, name in enumerate(policies.pool_preference)}

    @property
    def running_on(self) -> dict[str, list[Running]]:
        """Node -> the running jobs on it; built on first use (preemption, backfill, eviction),
        so a cycle that needs neither does not walk every running job's allocations."""
        if self._running_on is None:
            self._running_on = defaultdict(list)
            for job in self.snap.running:
                for alloc in job.allocations:
                    self._running_on[alloc.node].append(job)
        return self._running_on

    def _use(self, team: str, req: Request, sign: float = 1.0) -> None:
        """Charge (or with ``sign=-1`` refund) a job's whole request to its team."""
        charge(self.usage[team], req, sign)
        if sign > 0:
            self.charged[team] += req.total_gpus
            quota = self.policies.quotas.get(team) if self.no_reclaim else None
            if quota is not None and quota.cohort is not None:
                self.no_reclaim.clear()  # a borrower's use grew: more of it may be taken back

    def team(self, name: str) -> TeamUsage:
        """What ``name`` uses, as the quota of another team that would borrow from it sees
        it (``borrowable_gpus``): a team that reclaims counts what its waiting jobs ask within
        its nominal quota as used. It lends only what nothing of its own waits for, else what
        it reclaimed would be borrowed again the moment it is freed, by a job the queue puts
        first, and reclaimed again, and so on."""
        used = self.usage[name][0]
        quota = self.policies.quotas.get(name)
        if quota is None or quota.cohort is None or quota.reclaim == "never":
            return TeamUsage(gpus_in_use=used)
        if self.asked is None:
            self.asked = defaultdict(float)
            for job in self.snap.pending:
                self.asked[job.team] += job.request.total_gpus
        waiting = max(0.0, self.asked[name] - self.charged[name])
        return TeamUsage(gpus_in_use=used + min(waiting, max(0.0, quota.gpus - used)))

    def _keeps(self, team: str) -> float:
        """The GPUs ``team`` holds and keeps: its use less its jobs on their way out (those
        the snapshot says are leaving, and those stopped this cycle)."""
        if self.leaving is None:
            self.leaving = defaultdict(float)
            for running in self.snap.running:
                if running.leaving:
                    self.leaving[running.team] += running.gpus
        return self.usage[team][0] - self.leaving[team] - self.stopped[team]

    def _admitted(self, job: Pending) -> bool:
        """Whether the nodes reserved for the blocked head job admit ``job``: it ends first."""
        if self.reserved_until is None or job.max_runtime_s is None:
            return False
        return self.snap.now_s + job.max_runtime_s <= self.reserved_until

    def _held(self, job: Pending) -> Callable[[NodeState], Rejection | None] | None:
        """Rejects nodes nominated for another job or reserved past this job's end; None while
        no node is held for anyone."""
        if not self.nominated and self.reservation is None:
            return None
        end = None if job.max_runtime_s is None else self.snap.now_s + job.max_runtime_s

        def extra(node: NodeState) -> Rejection | None:
            owners = self.nominated.get(node.name)
            if owners and job.job_id not in owners:
                held_for = ", ".join(sorted(owners))
                return Rejection("nominated", f"held for {held_for} after preemption")
            if (
                node.reserved_until_s is not None
                and self.reservation != job.job_id
                and (end is None or end > node.reserved_until_s)
            ):
                return Rejection("reservation", f"reserved for {self.reservation}")
            return None

        return extra

    def _static_candidates(self, ctx: CycleContext, job: Pending) -> list[NodeState]:
        """Nodes the job could use were they free (health, pools, GPU model and memory).
        None of that changes within a cycle, so it is worked out once per kind of request."""
        req = job.request
        key = (req.gpus, req.accelerators, req.vendor, req.gpu_memory_gib, ctx.usable_pools)
        found = self.static.get(key)
        if found is None:
            found = self.static[key] = [
                s
                for s in self.states.every()
                if all(f(req, s, ctx) is None for f in STATIC_FILTERS)
            ]
        return found

    def _not_held_for_others(self, nodes: list[NodeState], job: Pending) -> list[NodeState]:
        """Less the nodes being freed by preemption for another job: they are theirs, neither
        to preempt on again nor to reserve for backfill."""
        if not self.nominated:
            return nodes
        return [n for n in nodes if not self.nominated.get(n.name, set()) - {job.job_id}]
