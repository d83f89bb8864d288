"""The controller's acting half: observe -> decide -> apply -> record, once per cycle.

Everything that can be decided is decided by ``decide`` (pure); this module only gathers the
world (pool adapters and the store), applies the step in a crash-safe order (``apply.py``),
and writes a heartbeat. Crash safety of a dispatch: the attempt (with its deterministic
submission id) is recorded before Ray hears of it; Ray refuses a second job with the same
id; and the next cycle adopts what Ray already runs or submits what it does not know.
Failpoints (``MESHCTL_FAILPOINT=after-submit``) let tests kill the controller at exactly
those points.
"""

from __future__ import annotations

import faulthandler
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO

from meshctl.agent import AGENTS_FILE
from meshctl.agent.watch import AgentReport, AgentWatch
from meshctl.controller.apply import Applier
from meshctl.controller.burst import Burst
from meshctl.controller.clients import PoolClient, ServeSide
from meshctl.controller.data import DataSync, caches_of
from meshctl.controller.deciding.decide import (
    Rules,
    Step,
    decide,
)
from meshctl.controller.deciding.nodes import pools_down
from meshctl.controller.deciding.world import (
    Derived,
    JobView,
    World,
)
from meshctl.controller.history import History
from meshctl.controller.leadership import Deposed, Leadership
from meshctl.controller.logs import LogCopier, attempts_of
from meshctl.controller.outage import Outage
from meshctl.controller.packages import Packages
from meshctl.controller.progress import ProgressReader
from meshctl.controller.records import Recorder
from meshctl.controller.reload import Reloader, in_use_removed
from meshctl.controller.watch import Watch, in_flux
from meshctl.lifecycle import Estimator
from meshctl.model.job import Job
from meshctl.policy.tenancy import BudgetStanding
from meshctl.scheduler import Request
from meshctl.state.private import write_private
from meshctl.state.records import (
    ACTIVE_ATTEMPT,
    FINISHED,
    AttemptRecord,
    Event,
    JobRecord,
    latest_attempts,
)
from meshctl.state.store import Store, StoreError

log = logging.getLogger("meshctl.controller")
# a turn of the loop (a cycle, then its wait) not come round after this long has stalled: every
# thread's stack goes to the log, and again each time as long again passes (``run``'s stalls)
STALL_S = 120.0


def agents_file(heartbeat: Path) -> Path:
    """Where each cycle leaves what the nodes' agents said (``meshctl nodes list``)."""
    return heartbeat.with_name(AGENTS_FILE)


@dataclass
class CycleReport:
    at_s: float
    duration_s: float
    jobs: int
    dispatched: int
    transitions: int
    errors: list[str]
    unavailable: Mapping[str, str] = field(default_factory=dict)  # pool -> why, this cycle
    # seconds spent in each phase: observe (pools and store), decide, apply, record
    phases_s: Mapping[str, float] = field(default_factory=dict)


class Controller:
    """The loop: each cycle observes the world, decides a step and has its ``applier``
    (``apply.Applier``) carry it out, then records the cycle."""

    def __init__(
        self,
        store: Store,
        rules: Rules,
        clients: Mapping[str, PoolClient],
        clock: Callable[[], float] = time.time,
        heartbeat: Path | None = None,
        resolve: Callable[[], tuple[Mapping[str, PoolClient], Mapping[str, str]]] | None = None,
        burst: Burst | None = None,
        health: Callable[[], Mapping[str, str]] | None = None,
        reloader: Reloader | None = None,
        logs: LogCopier | None = None,
        hold: Callable[[], str | None] | None = None,
        progress: ProgressReader | None = None,
        agents: AgentWatch | None = None,
        overruled: Callable[[], Mapping[str, str]] | None = None,
        forget_overruled: Callable[[str], None] | None = None,
        serve: ServeSide | None = None,
        data: DataSync | None = None,
        packages: Packages | None = None,
    ) -> None:
        """``resolve``: how to find the pools again each cycle (a pool restarted by ``up``
        comes back on new ports with a new token), and the Ray pools without a client, with
        why (``runtime.driven``); without it, ``clients`` are fixed.
        ``health``: the nodes' health signals (``meshctl.pools.health``), by "pool/node".
        ``reloader``: takes a new rule set asked for or noticed (``reload.py``); the rules
        are replaced at the start of a cycle, never within one.
        ``logs``: copies the jobs' driver logs into the state folder (``logs.py``).
        ``hold``: why nothing new may start now (``meshctl down --drain``), or None.
        ``progress``: reads what running train jobs recorded (``progress.py``).
        ``agents``: pulls each node's agent (``meshctl.agent.watch``): its verdict joins the
        health signals, and a node whose agent is silent is suspect, then dead.
        ``overruled``: the agents' verdicts the operator said to ignore, by "pool/node";
        ``forget_overruled`` drops one once its agent says healthy again, so the same words
        said later take the node out again.
        ``data``: tells the nodes' agents which datasets to fetch and keep (``data.py``).
        ``packages``: a job's files made local before it is submitted, from the store when
        another host took the job in (``packages.py``); None: submitted as recorded."""
        self.store, self.rules, self.clients, self.clock = store, rules, clients, clock
        self.data = data
        self.serve = serve  # the services' Serve applications: read and deployed
        self.resolve = resolve
        self.unreachable: Mapping[str, str] = {}  # Ray pools without a client -> why
        self.burst = burst  # the cloud side: launches, instance watch, teardown
        self.health = health
        self.agents, self.overruled, self.forget_overruled = agents, overruled, forget_overruled
        self.agent_report = AgentReport()  # the agents as of the last cycle
        self.logs, self.hold = logs, hold
        self.reloader = reloader
        if reloader is not None:
            reloader.veto = lambda old, new: in_use_removed(old, new, self._busy_pools())
        self.progress = progress or ProgressReader(store)  # what running train jobs report
        self.heartbeat = heartbeat
        self.cycles = 0
        self.outage = Outage()  # the state store's, as the log tells it
        # The last cycle's world and its submissions in flux: what the watch compares to.
        self.seen: tuple[World, Mapping[str, tuple[str, str | None]]] | None = None
        # parsed job files and what they ask of the scheduler, by job id; and by content:
        # identical jobs share one object
        self._jobs: dict[str, tuple[Job, Request]] = {}
        self._same: dict[str, tuple[Job, Request]] = {}
        self.recorder = Recorder(store)  # pool and node records, node health
        self.history = History(store)  # unfinished work read each cycle, and what it keeps
        self.derived = Derived()  # what decide worked out of each job, for the next cycle
        # carries out each step: store writes, submissions and stops, the cloud side, records
        self.applier = Applier(store, self.history, self.recorder, burst, packages)
        self.estimator: Estimator | None = None  # runtimes of the jobs that ended well
        self.standings: tuple[BudgetStanding, ...] = ()  # each budget, as of the last cycle
        self.on_cycle: Callable[[CycleReport], None] | None = None  # e.g. its metrics

    # --- one cycle ----------------------------------------------------------------------------

    def cycle(self) -> CycleReport:
        started = time.perf_counter()
        now = self.clock()
        self._reload(now)
        if self.resolve is not None:
            self.clients, self.unreachable = self.resolve()
        if self.burst is not None:
            self.burst.watch(now)
        world = self.world(now)
        if self.hold is not None:
            world = replace(world, hold=self.hold())
        observed = time.perf_counter()
        step = decide(world, self.rules)
        self.derived.turn()
        decided = time.perf_counter()
        errors = (
            self.applier.renominate([v.attempt for v in world.jobs if v.attempt])
            if not self.cycles
            else []
        )
        self.standings = step.standings if world.hold is None else self.standings
        errors += self.apply(step, now)
        self.seen = (world, in_flux(world, step.dispatches))
        if self.data is not None:
            self.data.sync(world, step)
        if self.serve is not None:
            errors += self.serve.sync(
                self.store, self.rules.mesh, self.clients, world.jobs, world.serve, now
            )
        if self.logs is not None:
            self.logs.follow(world, self.clients)
        applied = time.perf_counter()
        self.recorder.record(world, self.rules.mesh, self.burst, now, self.applier.refusing)
        self.cycles += 1
        ended = time.perf_counter()
        phases = {"observe": observed - started, "decide": decided - observed,
                  "apply": applied - decided, "record": ended - applied}  # fmt: skip
        report = CycleReport(
            now,
            ended - started,
            len(world.jobs),
            len(step.dispatches),
            len(step.transitions),
            errors,
            world.pool_unavailable,
            phases,
        )
        self._beat(report)
        if self.on_cycle is not None:
            self.on_cycle(report)
        return report

    def _reload(self, now: float) -> None:
        """A rule set asked for or noticed: taken for this cycle on, or refused (the old one
        runs on); either way an event, and the heartbeat says so."""
        found = self.reloader.poll(now, self.rules) if self.reloader is not None else None
        if found is None:
            return
        rules, outcome = found
        data = {"old_hash": outcome.old_hash, "new_hash": outcome.new_hash}
        if outcome.request:
            data["request"] = outcome.request
        if outcome.outcome == "reloaded":
            self.rules = rules
            if self.burst is not None:
                self.burst.use(rules.mesh, rules.catalogs, rules.registry)
            message = "; ".join([outcome.message, *outcome.notes])
            self.store.append_event(Event(now, "policy.reloaded", None, message, data))
            log.info("%s", message)
        elif outcome.outcome == "refused":
            message = f"kept policies {outcome.old_hash}: {outcome.message}"
            self.store.append_event(Event(now, "policy.reload_refused", None, message, data))
            log.warning("reload refused: %s", outcome.message)

    def _busy_pools(self) -> set[str]:
        """Pools where jobs run or cloud instances live (a reload may not drop them)."""
        busy = {a.pool for a in self.store.list(AttemptRecord, state=ACTIVE_ATTEMPT)}
        return busy | ({i.pool for i in self.burst.live()} if self.burst is not None else set())

    def world(self, now: float) -> World:
        observations = {name: client.observe() for name, client in self.clients.items()}
        records, attempts = self.history.live()
        latest = latest_attempts(attempts)
        views = []
        for record in records:
            attempt = latest.get(record.id)
            active = attempt is not None and attempt.state in ACTIVE_ATTEMPT
            if record.state in FINISHED and not active:
                continue
            parsed = self._job(record)
            if parsed is not None:
                views.append(JobView(record, parsed[0], attempt, parsed[1]))
        if self.estimator is None:  # once: the runs recorded before this controller began
            self.estimator = Estimator()
            self.estimator.observe_all(self.history.past_runs())
        self._forget_finished(views)
        health = dict(self.health()) if self.health is not None else {}
        suspect: Mapping[str, str] = {}
        silent: frozenset[str] = frozenset()
        if self.agents is not None:
            self.agent_report = self.agents.pull(observations, now)
            ignored = dict(self.overruled()) if self.overruled is not None else {}
            report = self.agent_report
            said = {k: v for k, v in report.unhealthy.items() if ignored.get(k) != v}
            health = said | health  # the operator's reason first
            suspect = {k: v for k, v in report.suspect.items() if ignored.get(k) != v}
            silent = frozenset(k for k in report.dead if k in said)  # not overruled
            self._forget_overruled(ignored, report)
        down = pools_down(self.rules.mesh, observations, self.unreachable)
        down |= self.burst.down() if self.burst is not None else {}
        world = World(
            now,
            observations,
            tuple(views),
            self.history.nodes(),
            progress=self.progress.read(views),
            exits=self.logs.exits(attempts_of(views), observations, self.clients)
            if self.logs is not None
            else {},
            health=health,
            suspect=suspect,
            silent=silent,
            pool_unavailable=down,
            node_busy_s=self.history.node_busy(attempts, now),
            estimator=self.estimator,
            budget_states=self.applier.budget_states(),
            loans=self.history.open_loans(),
            serve=self.serve.observe(views, self.clients) if self.serve is not None else {},
            caches=caches_of(self.agent_report),
            derived=self.derived,
        )
        if self.burst is None:
            return world
        return replace(
            world,
            instances=tuple(self.burst.live()),
            unavailable=self.burst.blocked(now),
            launching=self.burst.launching_pools(),
            spend_usd=self.burst.spend(now),
            team_spend_usd=self.burst.team_spend(now),
            interrupted=self.burst.interrupted(),
            reclaiming=self.burst.reclaiming(),
        )

    def _forget_overruled(self, ignored: Mapping[str, str], report: AgentReport) -> None:
        """An overruled verdict is over once the node's agent says healthy again."""
        if self.forget_overruled is None:
            return
        for key in ignored:
            status = report.agents.get(key)
            if status is not None and status.verdict == "healthy":
                self.forget_overruled(key)

    def _forget_finished(self, views: Sequence[JobView]) -> None:
        """Parsed jobs are kept while they are unfinished: memory does not grow with history."""
        if len(self._jobs) > 2 * len(views) + 100:
            live = {v.record.id for v in views}
            self._jobs = {k: j for k, j in self._jobs.items() if k in live}
            self._same = {}
            self.applier.forget(live)

    def _job(self, record: JobRecord) -> tuple[Job, Request] | None:
        """The job's parsed file and its request, kept while it is unfinished."""
        found = self._jobs.get(record.id)
        if found is None:
            content = json.dumps(record.spec, sort_keys=True)
            found = self._same.get(content)
            if found is None:
                try:
                    job = Job.model_validate(record.spec)
                except ValueError as err:  # a record written by a different meshctl
                    log.error("job %s: stored spec is invalid: %s", record.id, err)
                    return None
                found = self._same[content] = (job, Request.of(job))
            self._jobs[record.id] = found
        return found

    # --- applying -----------------------------------------------------------------------------

    def apply(self, step: Step, now: float) -> list[str]:
        """Carry out ``step`` (``apply.Applier``) with this cycle's clients and rules; what
        went wrong."""
        return self.applier.apply(step, now, self.clients, self.rules, self.estimator)

    def _beat(self, report: CycleReport) -> None:
        if self.heartbeat is None:
            return
        data = {
            "pid": os.getpid(),
            "cycles": self.cycles,
            "at_s": report.at_s,
            "cycle_ms": round(report.duration_s * 1000, 1),
            "jobs": report.jobs,
            "errors": report.errors[-5:],
            "policy_hash": self.rules.policies.content_hash if self.rules.policies else None,
            "unavailable": dict(report.unavailable),
            "budgets": [
                {
                    "budget": b.name,
                    "scope": b.scope,
                    "state": b.state,
                    "spent_usd": b.spent_usd,
                    "limit_usd": b.limit_usd,
                }
                for b in self.standings
            ],
        }
        if self.reloader is not None:
            data |= self.reloader.status()
        write_private(self.heartbeat, json.dumps(data))
        if self.agents is not None:
            agents = {k: a.to_json() for k, a in sorted(self.agent_report.agents.items())}
            write_private(agents_file(self.heartbeat), json.dumps(agents))

    # --- running ------------------------------------------------------------------------------

    def run(
        self,
        interval_s: float = 1.0,
        stop: threading.Event | None = None,
        wake: threading.Event | None = None,
        watch: bool = True,
        leadership: Leadership | None = None,
        stalls: IO[str] | None = None,
    ) -> None:
        """Cycle every ``interval_s``, or at once when ``wake`` is set (a submit, a cancel,
        or, with ``watch``, a pool reporting a change: ``watch.py``), until ``stop`` is set;
        a failing cycle is logged, not fatal. ``leadership``: cycle only while holding the
        lease (standing by until then); ``Deposed`` once another took it. ``stalls``: where
        every thread's stack is written, again every ``STALL_S``, while one turn of the loop
        (a cycle and its wait) has not come round for longer than that: a controller stuck
        in a call that never returns says where."""
        stop, wake = stop or threading.Event(), wake or threading.Event()
        try:
            self._run(interval_s, stop, wake, watch, leadership, stalls)
        finally:
            if stalls is not None:
                faulthandler.cancel_dump_traceback_later()

    def _run(
        self,
        interval_s: float,
        stop: threading.Event,
        wake: threading.Event,
        watch: bool,
        leadership: Leadership | None,
        stalls: IO[str] | None,
    ) -> None:
        if watch:
            watcher = Watch(lambda: self.seen, lambda: self.clients, wake)
            threading.Thread(target=watcher.run, args=(stop,), name="watch", daemon=True).start()
        if leadership is not None:
            keeper = threading.Thread(
                target=leadership.keep, args=(stop, wake), name="lease", daemon=True
            )
            keeper.start()
        while not stop.is_set():
            if stalls is not None:  # a turn of the loop that takes longer has stalled
                faulthandler.dump_traceback_later(STALL_S + interval_s, repeat=True, file=stalls)
            wake.clear()
            if leadership is not None and not leadership.lead():
                if leadership.deposed:
                    raise Deposed(
                        f"deposed: another controller took the lease (epoch {leadership.epoch})"
                    )
                wake.wait(interval_s)
                continue
            try:
                report = self.cycle()
                if said := self.outage.answered(time.monotonic()):
                    log.info("%s", said)
                if report.dispatched or report.transitions:
                    log.info(
                        "cycle %d: %d jobs, %d dispatched, %d transitions, %.0f ms",
                        self.cycles,
                        report.jobs,
                        report.dispatched,
                        report.transitions,
                        report.duration_s * 1000,
                    )
            except StoreError as err:  # said once per outage (``outage.py``)
                if said := self.outage.failed(str(err), time.monotonic()):
                    log.warning("%s", said)
            except Exception:
                log.exception("cycle failed")
            wake.wait(interval_s)
