"""The world the controller side of the differential check runs against: Ray clusters, cloud
instances joining them, and jobs that work, checkpoint and stop, all on a virtual clock.

It is the controller's real inputs, faked where nothing real fits in a unit test: each pool is
a stand-in for a Ray cluster's Jobs API (``FakePool``: ``observe``, ``submit``, ``stop``), the
cloud is ``meshctl.clouds.fake.FakeCloud``, and an instance becomes a node of the aws pool's
cluster ``provision_s`` after its launch (``FakeJoiner``, in place of
``meshctl.pools.emulated``). A job works as the simulator's model of one does
(``meshctl.sim.core.failures.Segment``): it computes its remaining work, writes a checkpoint every
``checkpoint_s`` of it (recorded where ``meshctl.workload.train`` records them, which the controller
reads), and when stopped keeps its last checkpoint, or what it had done when the controller
asked it to checkpoint (the request file the controller writes). A node that fails fails the
Ray jobs on it (Ray fails a job whose node died); a spot instance given notice is taken back
``notice_s`` later.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from meshctl.clouds.base import Instance
from meshctl.clouds.fake import FakeCloud
from meshctl.controller.deciding.step import own_head
from meshctl.controller.deciding.world import JobView, ServeSeen
from meshctl.model.catalog import Catalog
from meshctl.pools.observed import (
    NODE_LABEL,
    NODE_TYPE_LABEL,
    ROLE_LABEL,
    ObservedJob,
    ObservedNode,
    PoolObservation,
    Submission,
    node_name,
)
from meshctl.pools.ray import LogChunk
from meshctl.sim.core.failures import Segment
from meshctl.workload import request_uri
from tests.differential.scenario import AWS_TYPE, CPUS_PER_GPU, MEMORY_GIB_PER_GPU, Scenario

DIED = "JOB_SUPERVISOR_ACTOR_DIED"  # what Ray says of a job whose node died


@dataclass
class Run:
    """One Ray job: an attempt of a scenario job."""

    job: str  # the scenario's job id
    attempt: int
    pool: str
    nodes: tuple[str, ...]
    started_s: float
    segment: Segment
    uri: str | None
    status: str = "RUNNING"
    error_type: str | None = None
    message: str = ""
    end_s: float | None = None
    written: int = -1  # checkpoints recorded in its progress file
    scale: float = 1.0  # an elastic job on fewer nodes than its most: that much slower
    # its driver on the pool's head: a node that dies pauses it (its Ray job runs on) until
    # the controller nominates a replacement (``meshctl.workload.train.nominations``)
    replaceable: bool = False
    paused: bool = False

    def observed(self, submission_id: str) -> ObservedJob:
        return ObservedJob(
            submission_id, self.status, self.message, self.error_type, self.started_s, self.end_s
        )


class FakeWorld:
    def __init__(
        self,
        scenario: Scenario,
        catalog: Catalog,
        cloud: FakeCloud | None,
        arrive: Callable[[int, float], None],
    ) -> None:
        self.scenario, self.cloud, self.arrive = scenario, cloud, arrive
        self.now = 0.0
        self.alive = {f"n{i + 1}": True for i in range(scenario.nodes)}
        self.joined: dict[str, tuple[float, bool]] = {}  # cloud node -> (joins at, alive)
        self.launched: list[str] = []  # instance ids in launch order
        self.runs: dict[str, Run] = {}
        self.saved: dict[str, float] = {}  # scenario job -> work saved
        self.ids: dict[str, str] = {}  # the controller's job id -> the scenario's
        kind = catalog.instance_type(AWS_TYPE)
        assert kind is not None
        self.cloud_shape = (kind.accelerator.count, kind.vcpus, kind.memory_gib)
        self._events = self._scheduled()

    def _scheduled(self) -> list[tuple[float, int, str, Any]]:
        events: list[tuple[float, int, str, Any]] = []
        for i, job in enumerate(self.scenario.jobs):
            events.append((job.arrival_s, 2, "arrive", i))
        for t, node, repair in self.scenario.failures:
            events.append((t, 0, "fail", (node, repair)))
        for t, n in self.scenario.notices:
            events.append((t, 1, "notice", n))
        return sorted(events, key=lambda e: (e[0], e[1]))  # ties: the scenario's order

    # --- time ---------------------------------------------------------------------------

    def advance(self, t: float) -> None:
        """Everything that happens up to ``t``, in time order (relative seconds). First, runs
        paused by a dead node start again on the nodes the controller has nominated since (at
        its cycle: now)."""
        self._resume_nominated()
        while True:
            due = [e for e in self._events if e[0] <= t]
            ends = [
                (r.started_s + r.segment.wall_s, sid)
                for sid, r in self.runs.items()
                if r.status == "RUNNING" and not r.paused and r.started_s + r.segment.wall_s <= t
            ]
            if not due and not ends:
                break
            first_end = min(ends) if ends else None
            # at one instant, work that is done is done first: a job whose work ends as its
            # node fails has finished (the simulator's order of ties: meshctl.sim.core.events)
            if due and (first_end is None or due[0][0] < first_end[0]):
                event = due[0]
                self._events.remove(event)
                self.now = max(self.now, event[0])
                self._apply(event)
            else:
                assert first_end is not None
                self.now = max(self.now, first_end[0])
                self._finish(first_end[1])
        self.now = t
        self._record_checkpoints()

    def _apply(self, event: tuple[float, int, str, Any]) -> None:
        at, _, kind, what = event
        if kind == "arrive":
            self.arrive(what, at)
        elif kind == "fail":
            node, repair = what
            if self.alive[node]:  # one down already stays down until its own repair
                self._node_dies("onprem", node, at)
                self.alive[node] = False
                self._schedule((at + repair, 1, "repair", node))
        elif kind == "repair":
            self.alive[what] = True
        elif kind == "notice":
            self._notice(what, at)
        elif kind == "reclaim":
            assert self.cloud is not None
            if all(i.id != what for i in self.cloud.list_instances("diff")):
                return  # terminated before it could be taken back
            self.cloud.interrupt(what)
            name = node_name(what)
            if name in self.joined:
                self.joined[name] = (self.joined[name][0], False)
            self._node_dies("aws", name, at)

    def _notice(self, n: int, at: float) -> None:
        if self.cloud is None or n >= len(self.launched):
            return
        instance_id = self.launched[n]
        name = node_name(instance_id)
        if name not in self.joined or not self.joined[name][1] or self.joined[name][0] > at:
            return  # gone already, or not up yet: nothing to take back
        self.cloud.notice(instance_id)
        reclaim = at + self.scenario.cloud.notice_s if self.scenario.cloud else at
        self._schedule((reclaim, 0, "reclaim", instance_id))

    def _schedule(self, event: tuple[float, int, str, Any]) -> None:
        self._events.append(event)
        self._events.sort(key=lambda e: (e[0], e[1]))  # ties: in the order they came, as the
        # simulator's clock takes them

    def _finish(self, submission_id: str) -> None:
        run = self.runs[submission_id]
        run.status, run.end_s = "SUCCEEDED", run.started_s + run.segment.wall_s
        self.saved[run.job] = self.scenario_job(run.job).duration_s

    def _node_dies(self, pool: str, node: str, at: float) -> None:
        for run in self.runs.values():
            if run.status != "RUNNING" or run.pool != pool or node not in run.nodes:
                continue
            if run.paused:
                continue  # stopped working already, at its first dead node
            self._end(run, at)
            if run.replaceable:  # its driver lives on: Ray Train waits for a replacement
                run.paused = True
                continue
            run.status, run.error_type = "FAILED", DIED
            run.message = f"Job supervisor actor died: the node has died ({node})"

    def _resume_nominated(self) -> None:
        from meshctl.workload.train.nominations import nominated

        for run in self.runs.values():
            if run.status != "RUNNING" or not run.paused or run.uri is None:
                continue
            pins = nominated(run.uri, None, run.attempt)
            nodes = tuple(p.removeprefix("id-") for p in pins or ())
            if not nodes or not all(self._up(run.pool, n) for n in nodes):
                continue
            remaining = max(0.0, self.scenario_job(run.job).duration_s - self.saved[run.job])
            run.nodes, run.started_s, run.paused, run.written = nodes, self.now, False, -1
            run.segment = Segment(0.0, remaining * run.scale, self.scenario.checkpoint_s, 0.0)

    def _up(self, pool: str, node: str) -> bool:
        if pool == "onprem":
            return self.alive.get(node, False)
        joined = self.joined.get(node)
        return joined is not None and joined[1] and joined[0] <= self.now

    def _end(self, run: Run, at: float) -> None:
        """The run stops working at ``at``: it keeps its last checkpoint, or what it had done
        when asked to checkpoint (a checkpoint costs nothing here)."""
        elapsed = at - run.started_s
        saved, _ = run.segment.saved_at(elapsed)
        asked = self._asked(run)
        if asked is not None and asked <= at:
            computed, _ = run.segment.computed_at(asked - run.started_s)
            saved = max(saved, computed)
        self.saved[run.job] = self.saved.get(run.job, 0.0) + saved / run.scale
        run.end_s = at

    def _asked(self, run: Run) -> float | None:
        """When the controller asked this attempt to checkpoint (its request file), if it did."""
        if run.uri is None:
            return None
        path = Path(request_uri(run.uri).removeprefix("file://"))
        try:
            request = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        if int(request.get("attempt", -1)) != run.attempt:
            return None
        return float(request["requested_at_s"]) - self.epoch()

    def _record_checkpoints(self) -> None:
        """Each running job's checkpoints so far, where ``meshctl.workload.train`` records them."""
        for run in self.runs.values():
            if run.status != "RUNNING" or run.uri is None or run.paused:
                continue
            done = run.segment.saved_at(self.now - run.started_s)[1]
            if done == run.written or done == 0:
                continue
            run.written = done
            at = run.started_s + done * run.segment.interval_s
            doc = {
                "attempt": run.attempt,
                "reports": done,
                "step": done,
                "last_report_s": self.epoch() + self.now,
                "checkpoints": [{"step": done, "at_s": self.epoch() + at, "path": "-"}],
            }
            folder = Path(run.uri.removeprefix("file://")) / ".meshctl"
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"progress-{run.attempt}.json").write_text(json.dumps(doc))

    @staticmethod
    def epoch() -> float:
        from tests.differential.scenario import EPOCH_S

        return EPOCH_S

    def scenario_job(self, job_id: str) -> Any:
        return next(j for j in self.scenario.jobs if j.id == job_id)

    # --- what the pools report --------------------------------------------------------------

    def nodes(self, pool: str) -> tuple[ObservedNode, ...]:
        if pool == "onprem":
            gpus = self.scenario.gpus
            return tuple(
                ObservedNode(
                    name,
                    f"id-{name}",
                    alive,
                    gpus,
                    CPUS_PER_GPU * gpus,
                    MEMORY_GIB_PER_GPU * gpus,
                    "L4",
                    {NODE_LABEL: name, "rack": f"r{(int(name[1:]) - 1) // 2 + 1}", "switch": "s1"},
                )
                for name, alive in self.alive.items()
            )
        gpus, cpus, memory = self.cloud_shape
        return tuple(
            ObservedNode(
                name,
                f"id-{name}",
                alive,
                gpus,
                cpus,
                memory,
                "L4",
                {NODE_LABEL: name, NODE_TYPE_LABEL: AWS_TYPE, "tier": "burst"},
            )
            for name, (joins_at, alive) in self.joined.items()
            if joins_at <= self.now
        )

    def submit(self, pool: str, submission: Submission) -> str:
        sid = submission.submission_id
        if sid in self.runs:
            return "adopted"
        env = submission.runtime_env["env_vars"]
        job = self.ids[env["MESHCTL_JOB_ID"]]
        found = self.scenario_job(job)
        remaining = max(0.0, found.duration_s - self.saved.get(job, 0.0))
        nodes = tuple(env["MESHCTL_NODES"].split(","))
        scale = found.nodes / len(nodes) if found.elastic_min is not None else 1.0
        segment = Segment(0.0, remaining * scale, self.scenario.checkpoint_s, 0.0)
        uri = env.get("MESHCTL_CHECKPOINT_URI")
        attempt = int(env["MESHCTL_ATTEMPT"])
        replaceable = submission.label_selector.get(ROLE_LABEL) == "head"
        self.runs[sid] = Run(job, attempt, pool, nodes, self.now, segment, uri, scale=scale,
                             replaceable=replaceable)  # fmt: skip
        return "submitted"

    def stop(self, submission_id: str) -> bool:
        run = self.runs.get(submission_id)
        if run is None or run.status != "RUNNING":
            return False
        if run.paused:  # it stopped working when its node died: its work is counted
            run.end_s = self.now
        else:
            self._end(run, self.now)
        run.status = "STOPPED"
        return True


class FakePool:
    """A pool's Ray cluster as the controller's loop talks to it."""

    def __init__(self, world: FakeWorld, name: str) -> None:
        self.world, self.name = world, name

    def observe(self) -> PoolObservation:
        jobs = {
            sid: run.observed(sid) for sid, run in self.world.runs.items() if run.pool == self.name
        }
        for job in jobs.values():  # Ray speaks in wall-clock seconds
            jobs[job.submission_id] = ObservedJob(
                job.submission_id,
                job.status,
                job.message,
                job.error_type,
                _at(job.start_s),
                _at(job.end_s),
            )
        return PoolObservation(self.name, True, "", self.world.nodes(self.name), jobs)

    def submit(self, submission: Submission) -> str:
        return self.world.submit(self.name, submission)

    def stop(self, submission_id: str) -> bool:
        return self.world.stop(submission_id)

    def read_log(self, submission_id: str, offset: int, limit: int) -> LogChunk | None:
        return None


class FakeJoiner:
    """A launched instance becomes a node of its pool's cluster ``provision_s`` later (a
    pool's own head is named in launch order, and is no node)."""

    def __init__(self, world: FakeWorld) -> None:
        self.world = world

    def join(self, provider: str, instance: Instance) -> None:
        world, behaviour = self.world, self.world.scenario.cloud
        assert behaviour is not None
        assert world.cloud is not None
        if instance.id not in world.launched:
            world.launched.append(instance.id)
            if own_head(instance.request_id):
                return  # a pool's own head: the cluster's, no node of work
            [launched] = [
                i.launched_at_s for i in world.cloud.list_instances("diff") if i.id == instance.id
            ]
            joins_at = (launched or 0.0) - world.epoch() + behaviour.provision_s
            world.joined[node_name(instance.id)] = (joins_at, True)

    def leave(self, pool: str, instance_id: str) -> list[str]:
        name = node_name(instance_id)
        if name in self.world.joined:
            self.world.joined[name] = (self.world.joined[name][0], False)
        return []


def _at(t: float | None) -> float | None:
    return None if t is None else t + FakeWorld.epoch()


class FakeServe:
    """A stand-in for Serve on the pools (``ServeDeployer``: ``observe``, ``sync``): each
    service that has replicas reads the requests in flight its scenario's traffic gives now,
    as the simulator's inference model does; deploying does nothing (the replicas are where
    the controller placed them)."""

    def __init__(self, world: FakeWorld) -> None:
        self.world = world

    def observe(self, views: Sequence[JobView], clients: Mapping[str, Any]) -> dict[str, ServeSeen]:
        seen = {}
        for view in views:
            scenario_id = self.world.ids.get(view.record.id)
            if view.attempt is None or scenario_id is None:
                continue  # no replica yet: Serve has nothing to say of it
            job = self.world.scenario_job(scenario_id)
            if job.serve is None:
                continue
            held = len(view.attempt.detail.allocations)
            status = "RUNNING" if held else "DEPLOYING"
            seen[view.record.id] = ServeSeen(
                status, running=held, ongoing=job.serve.ongoing(self.world.now)
            )
        return seen

    def sync(self, *_: Any) -> list[str]:
        return []
