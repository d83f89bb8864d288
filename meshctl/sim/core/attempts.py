"""Jobs starting, leaving, stopping and ending in the simulation, as the lifecycle decides.

A start takes the nodes the plan chose and schedules the attempt's end from its remaining
work, its slowdown and its checkpoints (``jobs.py``). A job that must leave (a preemption's
grace, a spot notice, a maximum runtime run past) is asked to checkpoint when the lifecycle
says so and stopped at its stop time; on the tick, its GPUs are free a cycle later, when the
controller would see it stopped. Then it waits again, or fails for good
(``meshctl.lifecycle.effects.requeue_or_fail``).
"""

from __future__ import annotations

from dataclasses import replace

from meshctl.lifecycle import effects, lending
from meshctl.lifecycle.actions import Fail, Leave, Left, Replace, Requeue, Start
from meshctl.lifecycle.replacing import Free
from meshctl.lifecycle.snapshot import leaving
from meshctl.lifecycle.snapshot import running_of as running
from meshctl.sim.core.events import At, JobEvent, Kind, PoolEvent
from meshctl.sim.core.failures import Segment
from meshctl.sim.core.jobs import Attempt, checkpoint_plan
from meshctl.sim.core.network import slowdown
from meshctl.sim.core.runstate import RunState


class Attempts:
    """The run's job attempts: started, asked to leave, stopped, ended, freed."""

    def __init__(self, state: RunState) -> None:
        self.state = state

    def start(self, start: Start, since_s: float | None = None) -> None:
        """The job runs on ``start``'s nodes; ``since_s``: a replacement's, when its attempt
        began (its expected end and maximum runtime go by that)."""
        state = self.state
        job_id = start.job_id
        result = state.results[job_id]
        job = result.job
        began = state.now if since_s is None else since_s
        state.unwait(job_id)
        state.freeing.pop(job_id, None)  # running again: nothing held for it any more
        labels = []
        for alloc in start.allocations:
            node = state.cluster.nodes[alloc.node]
            state.cluster.hold(node, job_id, alloc, 1.0)
            labels.append(node.base.labels)
        speed = slowdown(state.mesh.networks.get(start.pool), labels)
        request, scale = state.requests[job_id], 1.0
        if job.elastic_min is not None:  # on fewer nodes than its most: that much slower
            scale = job.nodes / len(start.allocations)
            speed *= scale
            request = lending.sized(request, len(start.allocations))
        c = state.config.checkpoints
        restart = c.restart_s if result.attempts > 0 else 0.0
        stall = 0.0
        if state.data is not None and job.data is not None:
            nodes = [a.node for a in start.allocations]
            stall = state.data.start(job.data, start.pool, nodes, request.total_gpus, state.now)
            for name in nodes:
                state.cluster.set_datasets(state.cluster.nodes[name], state.data.holding(name))
        interval = c.interval_for(job.nodes, state.mtbf_s)
        remaining = max(0.0, job.duration_s - result.progress_s)
        seg = Segment(restart + stall, remaining * speed, interval, c.cost_s)
        state.tokens += 1
        runtime = state.runtime(job_id)
        run = running(
            job_id,
            job.team,
            result.priority,
            start.pool,
            start.allocations,
            request,
            began,
            runtime,
            checkpoints=checkpoint_plan(state.now, seg),
        )
        if job.elastic_min is not None:
            run = replace(run, elastic_min=job.elastic_min)
        state.running[job_id] = Attempt(
            job_id,
            state.tokens,
            start.pool,
            start.allocations,
            state.now,
            speed,
            seg,
            run,
            scale=scale,
            stall_s=stall,
            since_s=since_s,
        )
        state.backlog.run(job_id, start.pool, run.expected_end_s, run.request.total_gpus, began)
        state.cluster.busy[start.pool] += run.request.total_gpus
        result.attempts += 1
        result.backfilled += start.backfill
        state.totals.backfill_starts += start.backfill
        result.pools.add(start.pool)
        result.last_pool = start.pool
        if result.first_start_s is None:
            result.first_start_s = state.now
        state.clock.push(state.now + seg.wall_s, Kind.FINISH, JobEvent(job_id, state.tokens))
        if job.max_runtime_s is not None:
            state.limits[job_id] = job.max_runtime_s
            end = began + job.max_runtime_s
            state.clock.push(max(end, state.now), Kind.WAKE, At(max(end, state.now)))

    def leave(self, attempt: Attempt, why: Leave | Fail, now: float) -> None:
        """The attempt is on its way out: asked to checkpoint now (a Leave that says so),
        stopped at its stop time; its GPUs stay held until then."""
        state = self.state
        stop_at = why.stop_at_s if isinstance(why, Leave) else now
        attempt.running = leaving(attempt.running, stop_at)
        attempt.why = why
        if isinstance(why, Leave) and why.checkpoint:
            attempt.asked_s = now
        gpus = attempt.running.request.total_gpus
        state.backlog.run(
            attempt.job_id, attempt.pool, attempt.running.expected_end_s, gpus, attempt.began_s
        )
        at = state.stop_time(stop_at)
        state.clock.push(at, Kind.STOP, JobEvent(attempt.job_id, attempt.token))

    def stopped(self, event: JobEvent) -> None:
        """The end of a grace or a notice, or a stop sent: the attempt stops working now and
        keeps what it saved; its GPUs are free once the stop is seen (on the tick: a cycle
        later, as the controller sees it)."""
        state = self.state
        attempt = state.running.get(event.job_id)
        if attempt is None or attempt.token != event.token or attempt.stopped_s is not None:
            return
        attempt.stopped_s = state.now
        if state.config.tick_s:
            state.clock.push(state.now + state.config.tick_s, Kind.RELEASE, event)
        else:
            self.end_early(attempt)

    def released(self, event: JobEvent) -> None:
        attempt = self.state.running.get(event.job_id)
        if attempt is not None and attempt.token == event.token:
            self.end_early(attempt)

    def replace_lost(self) -> None:
        """Train jobs whose nodes died since the last cycle (they stopped working then), as the
        controller sees them at its cycle: replaced inside the attempt on free nodes of the
        pool where the lifecycle finds them, else evicted; either resumes from its latest
        checkpoint."""
        state = self.state
        lost, state.lost = sorted(state.lost), set()
        for job_id in lost:
            attempt = state.running.get(job_id)
            if attempt is None or not attempt.lost:
                continue
            free = [
                Free(n.name, n.base.gpus, n.base.cpus_free, n.base.memory_gib_free)
                for n in state.cluster.nodes.values()
                if n.base.pool == attempt.pool and n.health == "ready" and not n.jobs
            ]
            action = effects.lost_nodes(
                job_id, attempt.pool, attempt.allocations, attempt.lost, True, free, state.now
            )
            state.record(action)
            if isinstance(action, Replace):
                self._account_stop(attempt)
                self.free(attempt, state.now)
                self.start(Start(job_id, attempt.pool, action.allocations), attempt.began_s)
                continue
            attempt.lost = ()
            self.leave(attempt, action, state.now)  # its Ray job runs on until stopped

    def _account_stop(self, attempt: Attempt) -> float:
        """What an attempt that stopped early did and saved, into its job's result; the time
        it stopped."""
        state = self.state
        result, cost = state.results[attempt.job_id], state.config.checkpoints.cost_s
        stop = attempt.stopped_s if attempt.stopped_s is not None else state.now
        if attempt.halted_s is not None:  # it stopped working before its Ray job did
            stop = min(stop, attempt.halted_s)
        work, checkpoints = attempt.saved(stop, cost)
        seg = attempt.segment
        result.account(
            state.now - attempt.started_s,
            work,
            checkpoints,
            min(stop - attempt.started_s, seg.restart_s),
            attempt.speed,
            cost,
            attempt.running.request.total_gpus,
            attempt.scale,
            attempt.stall_s,
        )
        result.progress_s += work
        return stop

    def account_unended(self) -> None:
        """At the run's end (the window's): what each attempt still on its nodes held, into its
        job's result. One still working has done what it computed (useful, not lost: it runs
        on past the end); one that stopped working keeps what it saved, as when it ends."""
        state = self.state
        cost = state.config.checkpoints.cost_s
        for attempt in state.running.values():
            if attempt.stopped_s is not None or attempt.halted_s is not None:
                self._account_stop(attempt)
                continue
            seg, elapsed = attempt.segment, state.now - attempt.started_s
            computed, checkpoints = seg.computed_at(elapsed)
            state.results[attempt.job_id].account(
                elapsed,
                computed / attempt.speed,
                checkpoints,
                min(elapsed, seg.restart_s),
                attempt.speed,
                cost,
                attempt.running.request.total_gpus,
                attempt.scale,
                attempt.stall_s,
            )

    def end_early(self, attempt: Attempt, why: Leave | Fail | None = None) -> None:
        """An attempt that stopped before its work was done keeps what it saved; then the job
        waits again, or fails for good (the lifecycle's rule)."""
        state = self.state
        why = attempt.why or why
        assert why is not None
        result = state.results[attempt.job_id]
        stop = self._account_stop(attempt)
        self.free(attempt, stop)
        if isinstance(why, Fail):
            self.finished_for_good(attempt.job_id, why.reason)
            return
        if why.left is Left.RESIZED:
            result.resized += 1
        elif why.for_job is not None:
            result.preempted += 1
        else:
            result.failed += 1
        job = result.job
        after, result.failures = effects.requeue_or_fail(
            attempt.job_id, why.left, why.reason, result.failures, job.max_restarts
        )
        state.record(after)
        if isinstance(after, Requeue):
            state.wait(attempt.job_id)
            state.want_cycle()
        else:
            self.finished_for_good(attempt.job_id, after.reason)

    def finished_for_good(self, job_id: str, reason: str) -> None:
        state = self.state
        state.results[job_id].failed_reason = reason
        state.done += 1
        if state.pending:
            state.want_cycle()

    def finished(self, event: JobEvent) -> None:
        state = self.state
        attempt = state.running.get(event.job_id)
        if attempt is None or attempt.token != event.token or attempt.stopped_s is not None:
            return
        if attempt.halted_s is not None:
            return  # a node died under it first: it stopped working then
        if isinstance(attempt.why, Fail):  # failed already (ran past its maximum runtime)
            attempt.stopped_s = state.now
            self.end_early(attempt)
            return
        result = state.results[event.job_id]
        seg, cost = attempt.segment, state.config.checkpoints.cost_s
        work = seg.compute_s / attempt.speed
        gpus = attempt.running.request.total_gpus
        result.account(
            seg.wall_s,
            work,
            seg.checkpoints,
            seg.restart_s,
            attempt.speed,
            cost,
            gpus,
            attempt.scale,
            attempt.stall_s,
        )
        result.progress_s += work
        result.end_s = state.now
        job = result.job
        state.estimator.observe(job.team, state.names[job.id], state.now - attempt.began_s)
        state.stale_keys.add((job.team, state.names[job.id]))
        self.free(attempt, state.now)
        state.done += 1
        if state.pending:
            state.want_cycle()

    def free(self, attempt: Attempt, stopped_s: float) -> None:
        """The attempt's GPUs are free again; a cloud node left with nothing is idle since
        the attempt stopped working."""
        state = self.state
        job_id = attempt.job_id
        del state.running[job_id]
        mine = [p for p in state.freeing.pop(job_id, []) if p[0] == job_id]
        if mine:  # a resized job keeps its nodes held for itself until it runs again
            state.freeing[job_id] = mine
        state.limits.pop(job_id, None)
        state.backlog.stop(job_id)
        data = state.results[job_id].job.data
        if state.data is not None and data is not None:
            state.data.stop(data, [a.node for a in attempt.allocations])
        if attempt.pool in state.fleet.clouds:  # its pool's head is idle from then at least
            state.fleet.held(attempt.pool, stopped_s)
            if not state.fleet.live_per_pool[attempt.pool]:  # its workers gone: the head alone
                self.idle_later(attempt.pool, stopped_s)
        for alloc in attempt.allocations:
            node = state.cluster.nodes.get(alloc.node)
            if node is None:
                continue  # gone: nothing to give back
            state.cluster.hold(node, job_id, alloc, -1.0)
            if node.cloud is not None and not node.jobs:
                node.idle_since = stopped_s
                self.idle_later(node.base.pool, stopped_s)
        state.cluster.busy[attempt.pool] -= attempt.running.request.total_gpus

    def idle_later(self, pool: str, since_s: float) -> None:
        state = self.state
        if not state.config.tick_s:  # on the tick every cycle looks
            at = max(state.now, since_s + state.idle_after(pool))
            state.clock.push(at, Kind.IDLE, PoolEvent(pool))
