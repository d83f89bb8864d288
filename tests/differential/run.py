"""Run one scenario through the controller and through the simulator, and compare what each did.

The controller side is the real loop (``Controller.cycle``: observe, decide, apply, record)
over an in-memory store, fake pools and the fake cloud, a cycle every ``tick_s`` of a
virtual clock; jobs are submitted as ``meshctl submit`` does (the never-fits check, then
the store). The simulator side is the engine with ``tick_s`` set, so it cycles as the
controller's loop does.

What is compared is the actions each took: start (job, pool, nodes, backfilled), leave (job,
preempted or evicted, for whom), requeue, fail (deadline, max_runtime, max_restarts), finish,
launch (job, pool, type, count, spot), teardown (pool, instance), budget (name, state), at the
cycle it was taken (the simulator's actions between cycles, a node failing under a job, are
taken at the next cycle, which is when the controller sees them). Cloud instances and their
nodes are named by their pool and launch order (``aws#0``), as the two name them otherwise.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from meshctl.clouds.fake import FakeCloud
from meshctl.controller.burst import Burst
from meshctl.controller.deciding.step import Rules, Step
from meshctl.controller.loop import Controller
from meshctl.controller.progress import ProgressReader
from meshctl.controller.submit import Rejected, check, enqueue
from meshctl.lifecycle import (
    BudgetCrossed,
    Fail,
    Launch,
    Leave,
    Left,
    Replace,
    Requeue,
    Start,
    Teardown,
    effects,
    serving,
)
from meshctl.lifecycle.clusters import head_of
from meshctl.pools.observed import node_name
from meshctl.scheduler import SchedulerConfig
from meshctl.sim.core.engine import Engine, SimConfig
from meshctl.sim.core.failures import Checkpoints
from meshctl.sim.core.fleet import CloudPool
from meshctl.sim.run import sim_mesh
from meshctl.state import AttemptRecord, JobRecord, JobState, MemoryStore
from tests.differential.fakes import FakeJoiner, FakePool, FakeServe, FakeWorld
from tests.differential.scenario import CPUS_PER_GPU, EPOCH_S, MEMORY_GIB_PER_GPU, Scenario
from tests.differential.scenario import catalogs as load_catalogs

Logged = tuple[Any, ...]  # (t, what, ...): one action, as both sides are compared on it


@dataclass(frozen=True, slots=True)
class Outcome:
    scenario: str
    controller: list[Logged]
    simulator: list[Logged]

    @property
    def mismatches(self) -> list[tuple[Logged | None, Logged | None]]:
        """Pairs that differ, in time order (None: one side has nothing there)."""
        a, b = sorted(self.controller, key=repr), sorted(self.simulator, key=repr)
        only_a = [x for x in a if x not in b]
        only_b = [x for x in b if x not in a]
        if len(a) == len(b) and not only_a and not only_b:
            return []
        pairs: list[tuple[Logged | None, Logged | None]] = []
        for i in range(max(len(only_a), len(only_b))):
            pairs.append(
                (only_a[i] if i < len(only_a) else None, only_b[i] if i < len(only_b) else None)
            )
        return pairs


def run(scenario: Scenario) -> Outcome:
    with tempfile.TemporaryDirectory(prefix="meshctl-diff-") as root:
        ours = controller_side(scenario, Path(root))
    return Outcome(scenario.name, ours, simulator_side(scenario))


# --- the simulator ------------------------------------------------------------------------------


def simulator_side(scenario: Scenario) -> list[Logged]:
    catalogs = load_catalogs()
    mesh = sim_mesh(scenario.mesh("file:///nowhere"), catalogs, 0.3)
    if scenario.cloud is not None:
        c = scenario.cloud
        pool = scenario.mesh("file:///nowhere").pool("aws")
        head = head_of(pool, catalogs) if pool is not None else None
        clouds = {
            "aws": CloudPool(
                "aws", c.provision_s, None, c.notice_s, c.idle_s, {"tier": "burst"}, head
            )
        }
        mesh = replace(mesh, clouds=clouds)
    config = SimConfig(
        tick_s=scenario.tick_s,
        injected_failures=scenario.failures,
        injected_notices=tuple((t, "aws", n) for t, n in scenario.notices),
        checkpoints=Checkpoints(scenario.checkpoint_s, 0.0, 0.0),
        start_epoch_s=EPOCH_S,
        cpus_per_gpu=CPUS_PER_GPU,
        memory_gib_per_gpu=MEMORY_GIB_PER_GPU,
        scheduler=SchedulerConfig(),
        until_s=scenario.until_s,
        record=True,
    )
    engine = Engine(mesh, scenario.jobs, config, scenario.policy_set())
    result = engine.run()
    instances = {i.id: f"{i.pool}#{n}" for n, i in enumerate(engine.state.fleet.instances.values())}
    tick = scenario.tick_s
    logged = [_sim(t, a, instances, tick) for t, a in result.actions]
    logged += [
        (_next(r.end_s, tick), "finish", r.job.id) for r in result.jobs if r.end_s is not None
    ]
    return [entry for entry in logged if entry is not None]


def _next(t_s: float, tick: float) -> float:
    """The first cycle at or after ``t_s``: when the controller sees what happened then."""
    return round(math.ceil(t_s / tick - 1e-9) * tick, 6)


def _sim(t: float, action: Any, instances: dict[str, str], tick: float) -> Logged | None:
    at = _next(t, tick)
    if isinstance(action, Start):
        nodes = _nodes(action, instances)
        return (at, "start", action.job_id, action.pool, nodes, action.backfill)
    if isinstance(action, Leave):
        return (at, "leave", action.job_id, action.left.value, action.for_job)
    if isinstance(action, Replace):
        nodes = tuple(sorted(instances.get(a.node, a.node) for a in action.allocations))
        return (at, "replace", action.job_id, action.pool, nodes)
    if isinstance(action, Requeue):
        return (at, "requeue", action.job_id)
    if isinstance(action, Fail):
        return (at, "fail", action.job_id, action.kind)
    if isinstance(action, Launch):
        return (
            at,
            "launch",
            action.job_id,
            action.pool,
            action.node_type,
            action.count,
            action.spot,
        )
    if isinstance(action, Teardown):
        return (at, "teardown", action.pool, instances[action.instance_id])
    if isinstance(action, BudgetCrossed):
        return (at, "budget", action.budget, action.state)
    return None


def _nodes(start: Start, instances: dict[str, str]) -> tuple[str, ...]:
    return tuple(sorted(instances.get(a.node, a.node) for a in start.allocations))


# --- the controller -----------------------------------------------------------------------------


class _Recording(Controller):
    """The loop, keeping each step it applies."""

    steps: list[tuple[float, Step]]

    def apply(self, step: Step, now: float) -> list[str]:
        self.steps.append((now, step))
        return super().apply(step, now)


def controller_side(
    scenario: Scenario, root: Path, store: MemoryStore | None = None
) -> list[Logged]:
    """The controller's actions; ``store``: the store to run over (a new one by default)."""
    catalogs = load_catalogs()
    storage = f"file://{root}/checkpoints"
    mesh = scenario.mesh(storage)
    policies = scenario.policy_set()
    store = store if store is not None else MemoryStore()
    world: FakeWorld
    cloud = FakeCloud(clock=lambda: EPOCH_S + world.now) if scenario.cloud else None
    if cloud is not None and scenario.cloud is not None:
        cloud.notice_s = scenario.cloud.notice_s
    rejected: list[Logged] = []

    def arrive(index: int, at: float) -> None:
        job = scenario.jobs[index]
        model = scenario.job_file(job, storage)
        moment = _moment(EPOCH_S + at)
        try:
            admission = check(model, mesh, catalogs, policies, moment)
        except Rejected:
            rejected.append((_next(at, scenario.tick_s), "reject", job.id))
            return
        record = enqueue(store, model, admission, None, root, EPOCH_S + at, job.id)
        world.ids[record.id] = job.id

    world = FakeWorld(scenario, catalogs["aws"], cloud, arrive)
    clients = {"onprem": FakePool(world, "onprem")}
    burst = None
    if cloud is not None:
        clients["aws"] = FakePool(world, "aws")
        burst = Burst(store, mesh, catalogs, {"aws": cloud}, FakeJoiner(world))
    clock = lambda: EPOCH_S + world.now  # noqa: E731
    loop = _Recording(
        store,
        Rules(mesh, catalogs, policies),
        clients,
        clock=clock,
        burst=burst,
        progress=ProgressReader(store, clock),
        serve=FakeServe(world) if any(j.serve for j in scenario.jobs) else None,
    )
    loop.steps = []
    t, settled = 0.0, _settled(scenario)
    while t <= scenario.until_s:
        world.advance(t)
        loop.cycle()
        if t >= settled and _all_done(store, world):
            break
        t = round(t + scenario.tick_s, 6)
    names = _instance_names(world)
    logged = list(rejected)
    for now, step in loop.steps:
        logged += _steps(now - EPOCH_S, step, world.ids, names)
    return logged


def _moment(t_s: float) -> Any:
    import datetime as dt

    return dt.datetime.fromtimestamp(t_s, dt.UTC)


def _settled(scenario: Scenario) -> float:
    """The first cycle the run may end at, as the simulator's: every job has arrived and
    every injected failure is repaired (a service waiting for its node is placed then)."""
    arrived = max(j.arrival_s for j in scenario.jobs)
    repaired = max((t + r for t, _, r in scenario.failures), default=0.0)
    return _next(max(arrived, repaired), scenario.tick_s)


def _all_done(store: MemoryStore, world: FakeWorld) -> bool:
    """Every job has ended, services aside (they never end: the run ends with the last other
    job, as the simulator's)."""
    finished = (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)
    jobs = [r for r in store.list(JobRecord) if world.scenario_job(world.ids[r.id]).serve is None]
    ids = {r.id for r in jobs}
    stopping = any(  # failed while it ran: done once its stop is seen, as in the simulator
        a.ended_at_s is None for a in store.list(AttemptRecord) if a.job_id in ids
    )
    return all(r.state in finished for r in jobs) and not stopping


def _instance_names(world: FakeWorld) -> dict[str, str]:
    """Each instance, and its node, by its pool and launch order."""
    names = {}
    for n, instance_id in enumerate(world.launched):
        names[instance_id] = names[node_name(instance_id)] = f"aws#{n}"
    return names


def _unit(ids: dict[str, str], unit_id: str) -> str:
    """A job's or a service replica's id as the scenario names it."""
    owner = serving.service_of(unit_id)
    if owner is not None and owner in ids:
        return ids[owner] + unit_id[len(owner) :]
    return ids.get(unit_id, unit_id)


def _steps(t: float, step: Step, ids: dict[str, str], names: dict[str, str]) -> Iterable[Logged]:
    at = round(t, 6)
    backfilled = {p.job_id for p in step.plan.placed() if p.backfill} if step.plan else set()
    for action in effects.of_plan(step.plan) if step.plan else ():  # services' replicas
        if serving.service_of(action.job_id) is None:
            continue
        if isinstance(action, Start):
            nodes = tuple(sorted(names.get(a.node, a.node) for a in action.allocations))
            yield (at, "start", _unit(ids, action.job_id), action.pool, nodes, action.backfill)
        elif isinstance(action, Leave):
            yield (
                at,
                "leave",
                _unit(ids, action.job_id),
                action.left.value,
                action.for_job and _unit(ids, action.for_job),
            )
    for d in step.dispatches:
        nodes = tuple(
            sorted(names.get(held.node, held.node) for held in d.attempt.detail.allocations)
        )
        yield (at, "start", ids[d.job_id], d.attempt.pool, nodes, d.job_id in backfilled)
    for r in step.replacements:
        nodes = tuple(sorted(names.get(held.node, held.node) for held in r.allocations))
        yield (at, "replace", ids[r.job_id], r.pool, nodes)
    for_job = {c.attempt_id.rsplit("-", 1)[0]: c.for_job for c in step.attempts if c.for_job}
    resized = {c.attempt_id.rsplit("-", 1)[0] for c in step.attempts if c.lent or c.grows_onto}
    for tr in step.transitions:
        job = ids.get(tr.job_id, tr.job_id)
        if tr.to in (JobState.PREEMPTED, JobState.EVICTED):
            preemptor = for_job.get(tr.job_id)
            yield (
                at,
                "leave",
                job,
                Left.RESIZED.value if tr.job_id in resized else tr.to.value,
                _unit(ids, preemptor) if preemptor else None,
            )
        elif tr.to is JobState.REQUEUED:
            yield (at, "requeue", job)
        elif tr.to is JobState.SUCCEEDED:
            yield (at, "finish", job)
        elif tr.to is JobState.FAILED:
            yield (at, "fail", job, _fail_kind(tr.reason))
    for launch in step.launches:
        yield (
            at,
            "launch",
            ids[launch.job_id],
            launch.pool,
            launch.node_type,
            launch.count,
            launch.spot,
        )
    for down in step.teardowns:
        for instance_id in down.instance_ids:
            yield (at, "teardown", down.pool, names.get(instance_id, instance_id))
    for crossed in step.budgets:
        yield (at, "budget", crossed.budget, crossed.state)


def _fail_kind(reason: str) -> str:
    if reason.startswith("did not start before its deadline"):
        return "deadline"
    if reason.startswith("ran past its max_runtime_s"):
        return "max_runtime"
    if "max_restarts" in reason:
        return "max_restarts"
    return "other"
