"""One scheduling cycle: snapshot + policies -> plan. Pure: no I/O, no clock.

The stages, in the order each pending job meets them (and why that order):
1. policy: the verdict says which pools the job may use now, and its burst and preemption
   rights; a job no pool could ever hold is unschedulable, so submit can reject it;
2. quota: a job bigger than its team could ever hold (quota plus the most it may borrow)
   is unschedulable; a team over its quota (and what it may borrow now) waits;
3. placement: filters then scorers on the free-GPU index's candidates (placement.py);
4. reclaim, then preemption if policy allows it, before bursting: on-prem capacity is the
   strategic and cheaper one; a team below its nominal quota takes back what it lent first
   (reclaim.py), as its own, before any job is stopped by priority;
5. burst: launch cloud capacity if policy allows it;
6. otherwise the job waits; the first such job gets a backfill reservation.
Jobs go through in queue order (queue.py). A running elastic job below its size (it lent
nodes, and the loans are closed) waits in that order too, to grow onto free nodes of its pool
(``Grow``): ahead of work of lower priority, never by preempting or launching. Unhealthy
nodes' jobs are evicted first. A pool the snapshot marks unavailable is usable by no job:
nothing is placed, preempted or launched there, and a job that waits for it says why
("gcp-spill: no credentials").
"""

from __future__ import annotations

from meshctl.policy.tenancy import quota_ceiling
from meshctl.policy.verdict import Verdict
from meshctl.scheduler import burst, preempt, reclaim, reserve
from meshctl.scheduler.config import DEFAULT_CONFIG, SchedulerConfig
from meshctl.scheduler.cyclestate import CycleState
from meshctl.scheduler.explain import explain_pending
from meshctl.scheduler.filters import FILTERS
from meshctl.scheduler.framework import CycleContext
from meshctl.scheduler.grow import growth
from meshctl.scheduler.layout import Layout
from meshctl.scheduler.options import Stage, decide_any
from meshctl.scheduler.placement import Choice, choose
from meshctl.scheduler.plan import (
    Blocker,
    Decision,
    Evict,
    Grow,
    Place,
    Plan,
    Preempt,
    Shrink,
)
from meshctl.scheduler.policies import PolicyView
from meshctl.scheduler.queue import dominant_share, ordered
from meshctl.scheduler.quota import over_quota
from meshctl.scheduler.request import Request
from meshctl.scheduler.snapshot import Pending, Running, Snapshot
from meshctl.scheduler.unschedulable import never_fits
from meshctl.scheduler.usage import RunningUsage


def schedule(
    snapshot: Snapshot,
    policies: PolicyView,
    config: SchedulerConfig = DEFAULT_CONFIG,
    layout: Layout | None = None,
    usage: RunningUsage | None = None,
) -> Plan:
    """One cycle's plan. ``layout`` and ``usage``: those kept from the caller's last cycle
    (layout.py, usage.py), brought to this snapshot's nodes and running jobs; the plan is the
    same with or without them."""
    return _Cycle(snapshot, policies, config, layout or Layout(), usage).run()


class _Cycle(CycleState):
    """One cycle's decisions, job by job in queue order, over its state (``CycleState``)."""

    # --- the cycle ---------------------------------------------------------------------------

    def run(self) -> Plan:
        self._evict()
        share = lambda team: dominant_share(self.usage[team][:3], self.totals)  # noqa: E731
        depth = self.config.queue_depth
        for i, job in enumerate(
            ordered(self.snap.pending, self.snap.now_s, self.config.aging, share)
        ):
            if depth is not None and i >= depth:
                break  # the rest wait for a later cycle, undecided (Slurm's default_queue_depth)
            if job.grows_in is not None:
                self._grow(job)  # a running job: no decision of its own to record
                continue
            self.plan.decisions[job.job_id] = self._decide(job)
        if self.config.explain:  # why each waiting job waits, from the final state
            explain_pending(
                self.snap.pending, self.plan.decisions, self.avail,
                self.policies.verdict, self.base, self.states.every,
            )  # fmt: skip
        return self.plan

    def _evict(self) -> None:
        """Jobs on unhealthy nodes go; what they held elsewhere is free for this cycle."""
        if not self.any_unhealthy:
            return
        nodes = self.states.nodes
        for job in self.snap.running:
            if job.leaving:
                continue  # already on its way out: what it holds stays held until it stops
            bad = [
                a.node
                for a in job.allocations
                if a.node in nodes and nodes[a.node].health == "unhealthy"
            ]
            if not bad:
                continue
            self.plan.actions.append(Evict(job.job_id, f"node {bad[0]} is unhealthy"))
            self.preempted.add(job.job_id)  # never a victim as well
            self._use(job.team, job.request, sign=-1.0)
            for alloc in job.allocations:
                self.running_on[alloc.node].remove(job)
                if alloc.node in nodes:
                    state = self.states[alloc.node]
                    before = state.whole_free
                    state.release(alloc)
                    self.indexes[state.node.pool].moved(state, before)

    def _decide(self, job: Pending) -> Decision:
        if job.request.options:
            return decide_any(job, self._decide_one)
        decision = self._decide_one(job)
        assert decision is not None  # every stage: a decision
        return decision

    def _decide_one(self, job: Pending, stage: Stage = "all") -> Decision | None:
        """What becomes of a job: placed, preempting, provisioning, waiting or unschedulable;
        ``stage``: a part of that, for a fungible request's options (``options.Stage``)."""
        verdict = self.policies.verdict(job.job_id)
        asked, usable, eligible = self.avail.pools(verdict)
        denied = not eligible  # by the policies, before a replica's own pool narrows it
        if job.only_pool is not None or job.onprem_only:  # a service's replica
            only = self.onprem if job.only_pool is None else frozenset({job.only_pool})
            asked, usable, eligible = asked & only, usable & only, eligible & only
        if verdict is not None and verdict.priority_problem:
            return Decision(
                job.job_id, "unschedulable", verdict.priority_problem, blocked_by="policy"
            )
        req = self.requests.setdefault(job.request, job.request)
        key = (req, eligible)
        if key not in self.never:
            self.never[key] = never_fits(job.request, eligible, self.snap, self.node_pools)
        never = self.never[key]
        if never is not None:  # judged by what is known: an unavailable pool may hold it
            down = self.avail.why(eligible)
            if down is None:
                blocker: Blocker = "policy" if denied else "size"
                return Decision(job.job_id, "unschedulable", never, blocked_by=blocker)
            others = eligible - self.avail.names  # the verdict is about these
            notes = [f"elsewhere: {never}"] if others else []
            return Decision(job.job_id, "pending", down, notes=notes)
        ceiling = quota_ceiling(job.team, self.policies.quotas)
        if job.request.total_gpus > ceiling + 1e-9:
            return Decision(
                job.job_id,
                "unschedulable",
                f"needs {job.request.total_gpus:g} GPUs; team {job.team}'s quota allows"
                f" at most {ceiling:g}, borrowing included",
                blocked_by="quota",
            )
        over = self._over_quota(job)
        if over is not None:
            return Decision(job.job_id, "pending", over, blocked_by="quota")
        ctx = self.avail.context(self.base, usable, eligible, job.max_runtime_s)
        if stage == "act":
            return (
                self._freeing(job)
                or self._reclaim(job, ctx)
                or self._preempt(job, verdict, ctx)
                or self._burst(job, verdict)
            )
        if stage == "wait":
            return self._wait(job, verdict, ctx, self.avail.why(asked))
        # Within a cycle nodes only fill up, so a request that found no place finds none later
        # in the cycle either, for any job the same holds apply to: no nodes being freed for
        # it, and the reserved nodes admitting it or not alike (a job that ends before the
        # reservation starts may use them; what found no place before one was held finds none
        # after, so the jobs no reservation admits share what was found before it).
        shareable = job.job_id not in self.nominees
        alike = (req, usable, self._admitted(job))
        if shareable and alike in self.unplaceable:
            choice = None
        else:
            choice = self._choose(job, ctx, req=req)
            if choice is None and shareable:
                self.unplaceable.add(alike)
        if choice is not None:
            return self._place(job, choice)
        if stage == "place":
            return None
        return (
            self._freeing(job)
            or self._reclaim(job, ctx)
            or self._preempt(job, verdict, ctx)
            or self._burst(job, verdict)
            or self._wait(job, verdict, ctx, self.avail.why(asked))
        )

    def _over_quota(self, job: Pending) -> str | None:
        quotas = self.policies.quotas
        return over_quota(job.team, job.request, self.usage[job.team], quotas, self)

    def _fits_unheld(self, job: Pending, ctx: CycleContext) -> bool:
        """Whether ``job`` would fit were no node held for another; worked out once per request
        and usable pools until a placement changes the nodes (holds do not change them)."""
        key = (self.requests.setdefault(job.request, job.request), ctx.usable_pools)
        found = self.fits_unheld.get(key)
        if found is None:
            found = self.fits_unheld[key] = self._choose(job, ctx, held=False) is not None
        return found

    def _choose(
        self, job: Pending, ctx: CycleContext, held: bool = True, req: Request | None = None
    ) -> Choice | None:
        return choose(
            req or job.request,
            self.indexes,
            ctx,
            FILTERS,
            self.scorers,
            limit=self.config.max_candidates,
            spread=self.policies.packing == "spread",
            top=self.config.top_candidates,
            topology_weight=self.policies.weights.topology,
            rank=lambda pool: self.rank.get(pool, len(self.rank)),
            extra=self._held(job) if held else None,
            memo=self.scores,
        )

    def _place(self, job: Pending, choice: Choice) -> Decision:
        allocations = []
        for state in choice.nodes:
            before = state.whole_free
            allocations.append(state.allocate(job.request))
            self.indexes[state.node.pool].moved(state, before)
            self.fits_unheld.clear()
            owners = self.nominated.get(state.name)
            if owners is not None:
                owners.discard(job.job_id)
                if not owners:  # no longer held for anyone: what failed before may fit now
                    self.unplaceable.clear()
                    self.no_victims.clear()
        req = job.request
        self._use(job.team, req)
        pool = choice.nodes[0].node.pool
        backfill = self.reservation is not None and self.reservation != job.job_id
        self.plan.actions.append(
            Place(job.job_id, pool, tuple(allocations), choice.candidates[0].total, backfill)
        )
        return Decision(
            job.job_id, "placed", nodes_considered=choice.considered, candidates=choice.candidates
        )

    def _freeing(self, job: Pending) -> Decision | None:
        """A job whose nominated nodes hold it once the jobs leaving them (preempted or
        reclaimed for it) stop waits for them, and takes no more."""
        freeing = [self.states[n] for n in job.nominated if n in self.states.nodes]
        if freeing and preempt.freed_enough(job.request, freeing, self.running_on):
            self._use(job.team, job.request)  # the GPUs being freed are its already
            freed = ", ".join(n.name for n in freeing)
            return Decision(job.job_id, "preempting", f"waiting for {freed} to be freed for it")
        return None

    def _reclaim(self, job: Pending, ctx: CycleContext) -> Decision | None:
        """A team below its nominal quota takes back what its cohort borrowed (reclaim.py)."""
        quota = self.policies.quotas.get(job.team)
        if quota is None or quota.cohort is None or quota.reclaim == "never":
            return None
        # Within a cycle the victims and the room on nodes only get fewer, and the reclaimer's
        # team only holds more: what found nothing finds nothing later, unless a borrower's use
        # grew (``_use`` forgets then). A job of lower-priority mode asks with its priority.
        req = self.requests.setdefault(job.request, job.request)
        key = (req, job.team, job.priority if quota.reclaim == "lower-priority" else 0)
        if key in self.no_reclaim and job.job_id not in self.nominees:
            return None
        found = reclaim.take_back(
            job,
            req,
            self._not_held_for_others(self._static_candidates(ctx, job), job),
            self.running_on,
            self.policies.quotas,
            self.policies.reclaim,
            self._keeps,
            self.preempted,
            self.snap.now_s,
        )
        if found is None:
            self.no_reclaim.add(key)
            return None
        grace, names = self.policies.reclaim.grace_s, []
        for taken in found.taken:
            self.nominated[taken.node].add(job.job_id)
            for victim in taken.victims:
                self.preempted.add(victim.job_id)
                self.stopped[victim.team] += victim.gpus
                self.plan.actions.append(Preempt(victim.job_id, job.job_id, grace, found.reason))
                names.append(f"{victim.job_id} of team {victim.team} (grace {grace:g} s)")
        self._use(job.team, job.request)  # the freed GPUs are its from now on
        self.nominees.add(job.job_id)
        nodes = ", ".join(t.node for t in found.taken)
        return Decision(
            job.job_id, "preempting", f"{found.reason}: preempting {', '.join(names)} on {nodes}"
        )

    def _preempt(self, job: Pending, verdict: Verdict | None, ctx: CycleContext) -> Decision | None:
        if verdict is None or not verdict.preemption.allowed:
            return None

        def allowed(victim: Running) -> tuple[bool, float, str | None]:
            taken = victim.job_id in self.preempted and not preempt.can_lend(victim, self.lent)
            if victim.priority >= job.priority or taken or victim.leaving:
                return False, 0.0, None
            decided = self.policies.may_preempt(job.job_id, victim.job_id)
            if decided is None or not decided.allowed:
                return False, 0.0, None
            return True, decided.grace_s, decided.rule

        # Victims and free nodes only get fewer within a cycle: if no victim set was found for
        # this request, priority and verdict (one verdict object per job file: the policy view
        # answers alike for jobs that share it), none will be found later in the cycle.
        key = (job.request, job.priority, id(verdict))
        if job.job_id not in self.nominees:
            if key in self.no_victims:
                return None
            self.verdicts_seen.append(verdict)
        free_to_take = self._not_held_for_others(self._static_candidates(ctx, job), job)
        lent = dict(self.lent)
        sets = preempt.plan_preemption(
            job.request, free_to_take, self.running_on, self.snap.now_s, allowed, job.priority, lent
        )
        if sets is None:
            if job.job_id not in self.nominees:
                self.no_victims.add(key)
            return None
        self._use(job.team, job.request)  # the freed GPUs are its from now on
        self.nominees.add(job.job_id)
        self.lent = lent
        names = []
        for found in sets:
            self.nominated[found.node].add(job.job_id)
            for victim, grace, rule, lends in zip(
                found.victims, found.grace_s, found.rules, found.lends, strict=True
            ):
                self.preempted.add(victim.job_id)
                if lends:
                    self.plan.actions.append(
                        Shrink(victim.job_id, job.job_id, found.node, grace, rule)
                    )
                    names.append(f"{victim.job_id} lending {found.node} (grace {grace:g} s)")
                    continue
                self.plan.actions.append(Preempt(victim.job_id, job.job_id, grace, rule))
                self.stopped[victim.team] += victim.gpus
                names.append(f"{victim.job_id} (grace {grace:g} s)")
        return Decision(
            job.job_id,
            "preempting",
            f"preempting {', '.join(names)} on {', '.join(s.node for s in sets)}",
        )

    def _grow(self, job: Pending) -> None:
        """A running elastic job below its size grows onto free nodes of its pool (grow.py)."""
        pool = job.grows_in
        index = self.indexes.get(pool) if pool is not None else None
        if pool is None or index is None or pool in self.avail.names:
            return
        ctx = self.avail.context(self.base, frozenset({pool}), frozenset({pool}))
        spread = self.policies.packing == "spread"
        found = growth(
            job, index, ctx, self.scorers, self.config, spread, self._held(job), self._over_quota
        )
        if found is None:
            return
        req, choice = found
        allocations = []
        for state in choice.nodes:
            before = state.whole_free
            allocations.append(state.allocate(req))
            index.moved(state, before)
            self.fits_unheld.clear()
        self._use(job.team, req)
        self.plan.actions.append(Grow(job.job_id, pool, tuple(allocations)))

    def _burst(self, job: Pending, verdict: Verdict | None) -> Decision | None:
        if verdict is None or not verdict.burst.allowed:
            return None
        if job.provisioning:
            self._use(job.team, job.request)
            return Decision(job.job_id, "provisioning", "waiting for cloud capacity")
        rank = lambda pool: self.rank.get(pool, len(self.rank))  # noqa: E731
        launch, why_not = burst.choose_launch(
            job.request, verdict.burst.targets, self.offers, self.headroom, rank, self.avail.down
        )
        if launch is None:
            targets = frozenset(t.pool for t in verdict.burst.targets)
            down = self.avail.why(targets) if targets <= self.avail.names else None
            return Decision(
                job.job_id,
                "pending",
                down or "no cloud node type fits",  # every target unavailable: that is why
                notes=[f"burst: {'; '.join(why_not[:3]) or 'no offers'}"],
            )
        offer = launch.offer
        self.offers = [o if o is not offer else burst.less(o, launch.count) for o in self.offers]
        self.headroom.charge(launch)
        self._use(job.team, job.request)  # the capacity being launched is its
        action, decision = burst.provisioned(job.job_id, launch)
        self.plan.actions.append(action)
        return decision

    def _wait(
        self, job: Pending, verdict: Verdict | None, ctx: CycleContext, down: str | None = None
    ) -> Decision:
        decision = Decision(job.job_id, "pending", down or "", notes=[burst.note(verdict)])
        nominees = set().union(*self.nominated.values()) if self.nominated else set()
        holds = self.reservation or nominees
        if self.config.explain and holds and self._fits_unheld(job, ctx):
            owners = sorted(({self.reservation} if self.reservation else set()) | nominees)
            decision.reason = f"nodes it fits are held for {', '.join(owners)}"
        if self.config.backfill and not self.reservation_tried:
            self.reservation_tried = True  # EASY backfill: one reservation, the first waiter
            candidates = self._not_held_for_others(self._static_candidates(ctx, job), job)
            held = reserve.reserve(job.request, candidates, self.running_on, self.snap.now_s)
            if held is not None:
                nodes, start = held
                for node in nodes:
                    node.reserved_until_s = start
                self.reservation, self.reserved_until = job.job_id, start
                self.plan.reserved[job.job_id] = tuple(f"{n.node.pool}/{n.name}" for n in nodes)
                decision.notes.append(
                    f"reserved {len(nodes)} node(s) from "
                    f"+{start - self.snap.now_s:g} s (backfill around it)"
                )
        return decision
