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
from meshctl.sim.attempts import Attempts
from meshctl.sim.config import Sample
from meshctl.sim.events import At, InstanceEvent, Kind, NodeEvent, NodeFails, PoolEvent
from meshctl.sim.jobs import Attempt
from meshctl.sim.nodes import Instance


class WorldEvents(Attempts):
    def _launch(self, action: Launch) -> None:
        cloud = self.mesh.clouds[action.pool]
        team = self.results[action.job_id].job.team
        for instance in self.fleet.launch(action, team, self.now):
            self.clock.push(self.now + cloud.provision_s, Kind.UP, InstanceEvent(instance))
        pending = self.pending.get(action.job_id)
        if pending is not None:
            self.pending[action.job_id] = replace(pending, provisioning=True)

    def _up(self, event: InstanceEvent) -> None:
        instance = event.instance
        if instance.gone:
            return
        node = self.fleet.join(instance)
        self.cluster.add(node)
        self._idle_later(instance.pool, instance.launched_s)
        job_id = instance.for_job
        pending = self.pending.get(job_id)
        if pending is not None and self.fleet.launching[job_id] <= 0:
            self.pending[job_id] = replace(pending, provisioning=False)
        life = self.fleet.spot_life(instance)
        if life is not None:
            notice = self.mesh.clouds[instance.pool].notice_s
            self.clock.push(self.now + max(0.0, life - notice), Kind.NOTICE, event)
            self.clock.push(self.now + life, Kind.RECLAIM, event)
        if self.pending:
            self._want_cycle()

    def _idle(self, event: PoolEvent) -> None:
        self._teardown(event.pool)

    def _teardown(self, pool: str) -> None:
        for down in self.fleet.idle(pool, self.now, set()):
            self._record(down)
            self._terminate(self.fleet.instances[down.instance_id])

    def _terminate(self, instance: Instance, sent: bool = True) -> None:
        """The instance goes: torn down (``sent``: by a cycle) or taken back. On the tick it
        bills until the controller sees it gone, as the controller's ledger books it: the
        next cycle after one that sent its teardown, else the first at or after now."""
        tick, billed_to = self.config.tick_s, self.now
        if tick:
            seen = math.ceil(self.now / tick - 1e-9) * tick
            billed_to = seen + tick if sent and seen <= self.now + 1e-9 else seen
        self.fleet.terminate(instance, billed_to)
        node = instance.node
        if node is not None and node.name in self.cluster.nodes:
            self.cluster.remove(node)
        if node is not None and self.data is not None:
            self.data.lose(instance.pool, node.name)

    def _instance(self, event: InstanceEvent | PoolEvent) -> Instance | None:
        """The instance an event is about; an injected notice names the n-th launched in a
        pool ("pool#n")."""
        if isinstance(event, InstanceEvent):
            return event.instance
        pool, n = event.pool.rsplit("#", 1)
        launched = [i for i in self.fleet.instances.values() if i.pool == pool]
        return launched[int(n)] if int(n) < len(launched) else None

    def _notice(self, event: InstanceEvent | PoolEvent) -> None:
        instance = self._instance(event)
        node = instance.node if instance is not None else None
        if instance is None or instance.gone or node is None:
            return
        notice = self.mesh.clouds[instance.pool].notice_s
        if isinstance(event, PoolEvent):  # injected: the provider takes it after its notice
            self.clock.push(self.now + notice, Kind.RECLAIM, InstanceEvent(instance))
        self.cluster.set_health(node, "cordoned")
        for job_id in sorted(node.jobs):
            attempt = self.running.get(job_id)  # None: a service's replica (it stays)
            if attempt is not None and not attempt.leaving:
                leave = effects.noticed(job_id, node.name, self.now + notice, self.now)
                self._record(leave)
                self._leave(attempt, leave, self.now)

    def _reclaim(self, event: InstanceEvent) -> None:
        instance = event.instance
        if instance.gone:
            return
        node = instance.node
        self.totals.spot_reclaims += 1
        if node is not None:
            for job_id in sorted(node.jobs):
                attempt = self.running.get(job_id)
                if attempt is None:
                    continue  # a service's replica: gone at the next cycle, its node down
                why = attempt.why or effects.taken_back(job_id, node.name, self.now)
                if attempt.why is None:
                    self._record(why)
                attempt.stopped_s = attempt.stopped_s if attempt.stopped_s is not None else self.now
                self._end_early(attempt, why)
        self._terminate(instance, sent=False)
        head = self.fleet.head_alone(instance.pool)
        if head is not None:  # the pool's own head, left with no worker: it goes when idle
            self._idle_later(instance.pool, self.fleet.head_idle_since(head))

    def _node_fails(self, event: NodeFails) -> None:
        """A node fails: its jobs lose what they did since their last checkpoint and wait
        again. The node stays in the snapshot, down (it will come back, so a job that only it
        could hold still waits rather than being rejected), until its repair."""
        name = event.node
        if event.chain is not None and event.chain != self.fail_chain.get(name):
            return  # the model's next failure, superseded by an injected one and its repair
        node = self.cluster.nodes.get(name)
        if node is None or node.health == "down" or node.cloud is not None:
            return
        self.totals.node_failures += 1
        for job_id in sorted(node.jobs):
            attempt = self.running.get(job_id)
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
                attempt.halted_s = attempt.halted_s if attempt.halted_s is not None else self.now
                if attempt.why is None:
                    attempt.lost += (name,)
                    self.lost.add(job_id)
                    self._want_cycle()
                continue
            why = attempt.why or effects.node_died(job_id, name, self.now)
            if attempt.why is None:
                self._record(why)
            attempt.stopped_s = attempt.stopped_s if attempt.stopped_s is not None else self.now
            self._end_early(attempt, why)
        self.cluster.set_health(node, "down")
        if self.data is not None:  # a failed node's cache is not trusted when it is back
            self.data.lose(node.base.pool, name)
            self.cluster.set_datasets(node, frozenset())
        self.clock.push(self.now + event.repair_s, Kind.REPAIR, NodeEvent(name))

    def _replaceable(self, attempt: Attempt) -> bool:
        """A train job (not elastic) in a pool that keeps drivers apart and checkpoints: its
        dead node may be replaced inside its attempt (``lifecycle.replacing``)."""
        job = self.results[attempt.job_id].job
        train = job.kind == "train" and job.elastic_min is None and job.serve is None
        return train and attempt.pool in self.mesh.replacing

    def _repair(self, event: NodeEvent) -> None:
        node = self.cluster.nodes[event.node]
        self.cluster.set_health(node, "ready")
        self._next_failure(event.node)
        if self.pending:
            self._want_cycle()

    def _failures_start(self) -> None:
        for t, name, repair in self.config.injected_failures:
            self.clock.push(t, Kind.FAIL, NodeFails(name, repair, None))
        if self.config.failures is None:
            return
        for node in self.mesh.nodes:
            self._next_failure(node.name)

    def _next_failure(self, name: str) -> None:
        model = self.config.failures
        if model is None:
            return
        rng = self.fail_rngs.get(name)
        if rng is None:
            rng = self.fail_rngs[name] = random.Random(f"{self.config.seed}:fail:{name}")
        gap = rng.expovariate(1.0 / model.node_mtbf_s)
        chain = self.fail_chain[name] = self.fail_chain.get(name, 0) + 1
        self.clock.push(self.now + gap, Kind.FAIL, NodeFails(name, model.repair_s(rng), chain))

    def _sample(self, _: At | None, again: bool = True) -> None:
        c, now = self.cluster, self.now
        onprem_busy = sum(b for p, b in c.busy.items() if p not in self.cloud_pools)
        onprem_up = sum(g for p, g in c.up_gpus.items() if p not in self.cloud_pools)
        cloud = sum(g for p, g in c.up_gpus.items() if p in self.cloud_pools)
        spend = sum(self.fleet.ledger.total_usd.values()) + sum(
            max(0.0, now - i.launched_s) / 3600.0 * i.usd_per_hour for i in self.fleet.live.values()
        )
        self.samples.append(
            Sample(now, onprem_busy, onprem_up, cloud, len(self.pending), len(self.running), spend)
        )
        if again:
            self.clock.push(now + self.config.sample_s, Kind.SAMPLE, At(now + self.config.sample_s))
