"""The simulator's side of the one cycle (``meshctl.lifecycle.cycle``): its run state made into
what the cycle reads, and what the cycle decides made into the run's events.

In: the waiting jobs with their runtime estimates (learnt again for those whose team's runs
ended since the last cycle) and the nodes being freed for them, the running attempts with
their expected ends, elastic jobs below their size asking to grow back, the services'
replicas, the nodes from their shapes, the cloud offers less what runs, and what the
policies see (capacity, the backlog's waits, this month's spend). Out: attempts started,
made to leave (preempted, evicted, resized to lend their nodes: a loan per node) or
failed by a limit, launches, and the jobs the scheduler finds can never run, rejected as
``meshctl submit`` rejects them. Idle cloud instances go on the tick; without one, each
instance's own idle event takes it down (``world.py``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import replace
from operator import attrgetter
from typing import Any

from meshctl.lifecycle import lending, serving
from meshctl.lifecycle.actions import BudgetCrossed, Fail, Launch, Leave, Left, Start
from meshctl.lifecycle.cycle import Deadline, Runtime, Seen
from meshctl.lifecycle.snapshot import nominations, offers_left, pool_infos
from meshctl.lifecycle.view import MeshView, Victims
from meshctl.policy.facts import MeshSnapshot
from meshctl.policy.tenancy import BudgetStanding
from meshctl.scheduler import Pending, PolicyView, Snapshot
from meshctl.scheduler.plan import Plan
from meshctl.scheduler.preempt import lost_work_s
from meshctl.sim.core.attempts import Attempts
from meshctl.sim.core.runstate import RunState
from meshctl.sim.core.services import Services
from meshctl.sim.core.world import WorldEvents

RUNNING = attrgetter("running")  # an attempt's ``Running``, as the scheduler sees it


class EngineSide:
    """The run's state as a ``Side`` of the cycle: it holds the engine's collaborators (the
    attempts, the world's events, the services) and hands each decision to the one it is
    about."""

    def __init__(
        self, state: RunState, attempts: Attempts, world: WorldEvents, services: Services
    ) -> None:
        self.state, self.attempts, self.world, self.services = state, attempts, world, services

    @property
    def now_s(self) -> float:
        return self.state.now

    # --- before the snapshot -----------------------------------------------------------------

    def observe(self) -> None:
        """Runtimes learnt since the last cycle; train jobs whose nodes died since then,
        replaced inside their attempt or evicted (as the controller sees them at its cycle)."""
        if self.state.stale_keys:
            self._estimates_learnt()
        self.attempts.replace_lost()

    def _estimates_learnt(self) -> None:
        """Waiting jobs whose runtime estimate changed (a run of theirs ended since the last
        cycle) are estimated again, as the controller estimates every waiting job each cycle."""
        state = self.state
        for key in sorted(state.stale_keys):
            for job_id in sorted(state.waiting_by_key.get(key, ())):
                runtime = state.runtime(job_id)
                pending = state.pending[job_id]
                if pending.max_runtime_s != runtime:
                    state.pending[job_id] = replace(pending, max_runtime_s=runtime)
                    job = state.results[job_id].job
                    state.backlog.queue(job_id, pending.priority, job.total_gpus, runtime)
        state.stale_keys.clear()

    def deadlines(self) -> Iterator[Deadline]:
        for job_id, deadline in sorted(self.state.deadlines.items()):
            yield Deadline(job_id, deadline)

    def runtimes(self) -> Iterator[Runtime]:
        state = self.state
        for job_id, limit in sorted(state.limits.items()):
            attempt = state.running.get(job_id)
            if attempt is not None and not attempt.leaving:
                yield Runtime(job_id, attempt.began_s, limit)

    def fail(self, failed: Fail, running: bool) -> None:
        state = self.state
        state.record(failed)
        if running:
            self.attempts.leave(state.running[failed.job_id], failed, state.now)
        else:
            state.unwait(failed.job_id)
            self.attempts.finished_for_good(failed.job_id, failed.reason)

    def held(self) -> str | None:
        return None  # a simulated mesh is never held

    def hold(self, why: str) -> None:
        raise AssertionError(f"a simulated mesh is never held: {why}")

    def scale_services(self) -> set[str]:
        return self.services.cycle() if self.services.served else set()

    def loans(self) -> tuple[Sequence[lending.Loan], set[str]]:
        """The loans, and the jobs active (running or waiting): asked only while a loan is open
        (``lending.closing`` reads them for nothing else), as they are thousands."""
        state = self.state
        if not any(loan.open for loan in state.loans):
            return state.loans, set()
        return state.loans, set(state.running) | set(state.pending)

    def close(self, closed: Sequence[lending.Loan]) -> None:
        by_id = {x.id: x for x in closed}
        self.state.loans = [by_id.get(x.id, x) for x in self.state.loans]

    # --- the snapshot --------------------------------------------------------------------------

    def seen(self) -> Seen:
        """The scheduler's snapshot and what the policies see, as the lifecycle builds them."""
        state = self.state
        now, fleet = state.now, state.fleet
        nodes = state.cluster.snapshot_nodes()  # first: the capacity follows the nodes
        capacity = state.cluster.capacity.of_pools(state.pool_names)
        waits = state.backlog.waits(capacity, state.cloud_pools, now)
        pools = pool_infos(state.mesh.pools, waits.lowest(), fleet.live_per_pool, {})
        nominated = nominations(pair for pairs in state.freeing.values() for pair in pairs)
        pending = [self._pending_now(p, nominated) for p in state.pending.values()]
        pending += self._growing()
        pending += [self._pending_now(p, nominated) for p in self.services.replica_pending]
        running = tuple(map(RUNNING, state.running.values()))  # in C: a thousand jobs run
        snapshot = Snapshot(
            now,
            nodes,
            pools,
            running + tuple(self.services.replica_running),
            tuple(pending),
            offers_left(state.mesh.offers, fleet.live_type),
        )
        spend, team_spend = fleet.spend(now)
        configured = state.mesh.configured or MeshSnapshot(())
        mesh = MeshView(configured, capacity, waits, len(state.pending), spend, team_spend)
        return Seen(
            snapshot,
            mesh,
            state.date(),
            state.models,
            self._priority,
            self._victims(),
            dict(state.budget_states),
            grow_grace_s=state.mesh.grow_grace_s,
            layout=state.layout,
            usage=state.usage,
            answers=state.answers,
        )

    def _growing(self) -> Iterator[Pending]:
        """Elastic jobs below their size, asking to grow back, in the order they run; only
        the elastic ones are looked at (a filter in C): most running jobs are not."""
        state = self.state
        if state.elastic.isdisjoint(state.running):
            return
        for job_id in filter(state.elastic.__contains__, state.running):
            attempt, wanted = state.running[job_id], state.size(job_id)
            if wanted is not None and attempt.stopped_s is None:
                job = state.results[job_id].job
                grow = lending.growth(attempt.running, wanted, job.arrival_s)
                if grow is not None:
                    yield grow

    def _pending_now(self, pending: Pending, nominated: dict[str, tuple[str, ...]]) -> Pending:
        """A waiting job as this cycle sees it: the nodes freed for it, its size now."""
        if pending.job_id in nominated:
            pending = replace(pending, nominated=nominated[pending.job_id])
        size = self.state.size(pending.job_id)
        if size is not None:
            pending = replace(pending, request=lending.sized(pending.request, size))
        return pending

    def _priority(self, job_id: str) -> int:
        return self.state.results[serving.service_of(job_id) or job_id].priority

    def _victims(self) -> Victims:
        state = self.state
        if not self.services.replica_running:
            return Victims(state.running, state.models, state.now, lambda attempt: attempt.running)
        held: dict[str, Any] = {r.job_id: r for r in self.services.replica_running}
        held.update((job_id, a.running) for job_id, a in state.running.items())
        return Victims(held, state.models, state.now)

    # --- what the plan does --------------------------------------------------------------------

    def budgets(self, standings: Sequence[BudgetStanding], crossed: list[BudgetCrossed]) -> None:
        state = self.state
        for crossing in crossed:
            state.budget_states[crossing.budget] = crossing.state
            state.totals.budget_crossings += 1
            state.record(crossing)

    def carry_out(self, action: Start | Leave | Launch) -> None:
        state = self.state
        if self.services.served and self.services.replica_action(action):
            return
        state.record(action)
        if isinstance(action, Start):
            self.attempts.start(action)
        elif isinstance(action, Leave):
            self._leave(action)
        else:
            self.world.launch(action)

    def _leave(self, action: Leave) -> None:
        state = self.state
        attempt = state.running.get(action.job_id)
        if attempt is None or attempt.leaving:
            return
        nodes = tuple(a.node for a in attempt.allocations)
        if action.left is Left.RESIZED:
            state.totals.resizes += 1
            lent = dict(action.lent)
            pairs = [(b, (n,)) for n, b in action.lent]
            rest = tuple(n for n in nodes if n not in lent) + action.grows_onto
            state.freeing[action.job_id] = [*pairs, (action.job_id, rest)]
            lost = lost_work_s(attempt.running, action.stop_at_s)
            state.loans += lending.opened(action, attempt.running, state.now, lost)
        elif action.for_job is not None:
            state.totals.preemptions += 1
            state.freeing[action.job_id] = [(action.for_job, nodes)]
        self.attempts.leave(attempt, action, state.now)

    def decided(self, plan: Plan, policies: PolicyView, mesh: MeshView) -> None:
        """A job the scheduler finds unschedulable the first time it decides about it is
        rejected, as ``meshctl submit`` rejects it: it could never run."""
        state = self.state
        for job_id, decision in plan.decisions.items():
            first = job_id not in state.decided
            state.decided.add(job_id)
            if first and decision.status == "unschedulable" and job_id in state.pending:
                state.unwait(job_id)
                state.results[job_id].rejected = decision.reason or "unschedulable"
                state.done += 1

    def idle(self) -> None:
        """On the tick, each cloud pool's idle instances go after the cycle, as the controller
        tears them down; without it, each instance's idle event does."""
        if self.state.config.tick_s:
            for pool in sorted(self.state.mesh.clouds):
                self.world.teardown(pool)
