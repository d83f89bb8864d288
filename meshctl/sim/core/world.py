"""The simulated world's own events: cloud instances launched, joining, given notice, taken
back, idle; on-prem nodes failing and coming back; samples for the charts.

A spot instance given notice has its jobs leave by the lifecycle's rule (asked to checkpoint,
stopped ``STOP_MARGIN_S`` before it goes); one taken back ends what still runs on it. An idle
instance goes by the lifecycle's teardown rule. A failed node is down (in the snapshot, taking
no work, counting for no capacity) until its repair; its jobs keep their last checkpoint.
"""

from __future__ import annotations

import math
import random
from dataclasses import replace

from meshctl.lifecycle import effects
from meshctl.lifecycle.actions import Launch
from meshctl.sim.core.attempts import Attempts
from meshctl.sim.core.config import Sample
from meshctl.sim.core.events import At, InstanceEvent, Kind, NodeEvent, NodeFails, PoolEvent
from meshctl.sim.core.jobs import Attempt
from meshctl.sim.core.nodes import Instance
from meshctl.sim.core.runstate import RunState


class WorldEvents:
    """What the world does to the run: instances joining, given notice, taken back, idle;
    nodes failing and repaired; samples. What it does to jobs, it does through ``attempts``."""

    def __init__(self, state: RunState, attempts: Attempts) -> None:
        self.state, self.attempts = state, attempts

    def launch(self, action: Launch) -> None:
        state = self.state
        cloud = state.mesh.clouds[action.pool]
        team = state.results[action.job_id].job.team
        for instance in state.fleet.launch(action, team, state.now):
            state.clock.push(state.now + cloud.provision_s, Kind.UP, InstanceEvent(instance))
        pending = state.pending.get(action.job_id)
        if pending is not None:
            state.pending[action.job_id] = replace(pending, provisioning=True)

    def up(self, event: InstanceEvent) -> None:
        state = self.state
        instance = event.instance
        if instance.gone:
            return
        node = state.fleet.join(instance)
        state.cluster.add(node)
        self.attempts.idle_later(instance.pool, instance.launched_s)
        job_id = instance.for_job
        pending = state.pending.get(job_id)
        if pending is not None and state.fleet.launching[job_id] <= 0:
            state.pending[job_id] = replace(pending, provisioning=False)
        life = state.fleet.spot_life(instance)
        if life is not None:
            notice = state.mesh.clouds[instance.pool].notice_s
            state.clock.push(state.now + max(0.0, life - notice), Kind.NOTICE, event)
            state.clock.push(state.now + life, Kind.RECLAIM, event)
        if state.pending:
            state.want_cycle()

    def idle(self, event: PoolEvent) -> None:
        self.teardown(event.pool)

    def teardown(self, pool: str) -> None:
        state = self.state
        for down in state.fleet.idle(pool, state.now, set()):
            state.record(down)
            self.terminate(state.fleet.instances[down.instance_id])

    def terminate(self, instance: Instance, sent: bool = True) -> None:
        """The instance goes: torn down (``sent``: by a cycle) or taken back. On the tick it
        bills until the controller sees it gone, as the controller's ledger books it: the
        next cycle after one that sent its teardown, else the first at or after now."""
        state = self.state
        tick, billed_to = state.config.tick_s, state.now
        if tick:
            seen = math.ceil(state.now / tick - 1e-9) * tick
            billed_to = seen + tick if sent and seen <= state.now + 1e-9 else seen
        state.fleet.terminate(instance, billed_to)
        node = instance.node
        if node is not None and node.name in state.cluster.nodes:
            state.cluster.remove(node)
        if node is not None and state.data is not None:
            state.data.lose(instance.pool, node.name)

    def _instance(self, event: InstanceEvent | PoolEvent) -> Instance | None:
        """The instance an event is about; an injected notice names the n-th launched in a
        pool ("pool#n")."""
        if isinstance(event, InstanceEvent):
            return event.instance
        pool, n = event.pool.rsplit("#", 1)
        launched = [i for i in self.state.fleet.instances.values() if i.pool == pool]
        return launched[int(n)] if int(n) < len(launched) else None

    def notice(self, event: InstanceEvent | PoolEvent) -> None:
        state = self.state
        instance = self._instance(event)
        node = instance.node if instance is not None else None
        if instance is None or instance.gone or node is None:
            return
        notice = state.mesh.clouds[instance.pool].notice_s
        if isinstance(event, PoolEvent):  # injected: the provider takes it after its notice
            state.clock.push(state.now + notice, Kind.RECLAIM, InstanceEvent(instance))
        state.cluster.set_health(node, "cordoned")
        for job_id in sorted(node.jobs):
            attempt = state.running.get(job_id)  # None: a service's replica (it stays)
            if attempt is not None and not attempt.leaving:
                leave = effects.noticed(job_id, node.name, state.now + notice, state.now)
                state.record(leave)
                self.attempts.leave(attempt, leave, state.now)

    def reclaim(self, event: InstanceEvent) -> None:
        state = self.state
        instance = event.instance
        if instance.gone:
            return
        node = instance.node
        state.totals.spot_reclaims += 1
        if node is not None:
            for job_id in sorted(node.jobs):
                attempt = state.running.get(job_id)
                if attempt is None:
                    continue  # a service's replica: gone at the next cycle, its node down
                why = attempt.why or effects.taken_back(job_id, node.name, state.now)
                if attempt.why is None:
                    state.record(why)
                attempt.stopped_s = (
                    attempt.stopped_s if attempt.stopped_s is not None else state.now
                )
                self.attempts.end_early(attempt, why)
        self.terminate(instance, sent=False)
        head = state.fleet.head_alone(instance.pool)
        if head is not None:  # the pool's own head, left with no worker: it goes when idle
            self.attempts.idle_later(instance.pool, state.fleet.head_idle_since(head))

    def node_fails(self, event: NodeFails) -> None:
        """A node fails: its jobs lose what they did since their last checkpoint and wait
        again. The node stays in the snapshot, down (it will come back, so a job that only it
        could hold still waits rather than being rejected), until its repair."""
        state = self.state
        name = event.node
        if event.chain is not None and event.chain != state.fail_chain.get(name):
            return  # the model's next failure, superseded by an injected one and its repair
        node = state.cluster.nodes.get(name)
        if node is None or node.health == "down" or node.cloud is not None:
            return
        state.totals.node_failures += 1
        for job_id in sorted(node.jobs):
            attempt = state.running.get(job_id)
            if attempt is None:
                continue  # a service's replica: gone at the next cycle, its node down
            if self._replaceable(attempt):
                # its driver lives on. Stopped already (a stop sent this cycle, seen at the
                # next): Ray stops it as asked and it is released then, as the controller sees
                # it (its cycle at this instant saw the node dead first and sent the stop to a
                # run that was only waiting for a stand-in)
                if attempt.stopped_s is not None:
                    continue
                # else it stops working; replaced or evicted at the next cycle (one already
                # leaving stops when its stop comes)
                attempt.halted_s = attempt.halted_s if attempt.halted_s is not None else state.now
                if attempt.why is None:
                    attempt.lost += (name,)
                    state.lost.add(job_id)
                    state.want_cycle()
                continue
            why = attempt.why or effects.node_died(job_id, name, state.now)
            if attempt.why is None:
                state.record(why)
            attempt.stopped_s = attempt.stopped_s if attempt.stopped_s is not None else state.now
            self.attempts.end_early(attempt, why)
        state.cluster.set_health(node, "down")
        if state.data is not None:  # a failed node's cache is not trusted when it is back
            state.data.lose(node.base.pool, name)
            state.cluster.set_datasets(node, frozenset())
        state.clock.push(state.now + event.repair_s, Kind.REPAIR, NodeEvent(name))

    def _replaceable(self, attempt: Attempt) -> bool:
        """A train job (not elastic) in a pool that keeps drivers apart and checkpoints: its
        dead node may be replaced inside its attempt (``lifecycle.replacing``)."""
        job = self.state.results[attempt.job_id].job
        train = job.kind == "train" and job.elastic_min is None and job.serve is None
        return train and attempt.pool in self.state.mesh.replacing

    def repair(self, event: NodeEvent) -> None:
        state = self.state
        node = state.cluster.nodes[event.node]
        state.cluster.set_health(node, "ready")
        self._next_failure(event.node)
        if state.pending:
            state.want_cycle()

    def failures_start(self) -> None:
        state = self.state
        for t, name, repair in state.config.injected_failures:
            state.clock.push(t, Kind.FAIL, NodeFails(name, repair, None))
        if state.config.failures is None:
            return
        for node in state.mesh.nodes:
            self._next_failure(node.name)

    def _next_failure(self, name: str) -> None:
        state = self.state
        model = state.config.failures
        if model is None:
            return
        rng = state.fail_rngs.get(name)
        if rng is None:
            rng = state.fail_rngs[name] = random.Random(f"{state.config.seed}:fail:{name}")
        gap = rng.expovariate(1.0 / model.node_mtbf_s)
        chain = state.fail_chain[name] = state.fail_chain.get(name, 0) + 1
        state.clock.push(state.now + gap, Kind.FAIL, NodeFails(name, model.repair_s(rng), chain))

    def sample(self, _: At | None, again: bool = True) -> None:
        state = self.state
        c, now = state.cluster, state.now
        onprem_busy = sum(b for p, b in c.busy.items() if p not in state.cloud_pools)
        onprem_up = sum(g for p, g in c.up_gpus.items() if p not in state.cloud_pools)
        cloud = sum(g for p, g in c.up_gpus.items() if p in state.cloud_pools)
        spend = sum(state.fleet.ledger.total_usd.values()) + sum(
            max(0.0, now - i.launched_s) / 3600.0 * i.usd_per_hour
            for i in state.fleet.live.values()
        )
        state.samples.append(
            Sample(
                now,
                onprem_busy,
                onprem_up,
                cloud,
                len(state.pending),
                len(state.running),
                spend,
            )
        )
        if again:
            state.clock.push(
                now + state.config.sample_s, Kind.SAMPLE, At(now + state.config.sample_s)
            )
