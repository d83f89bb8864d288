"""The controller's cloud side: launch what the plan asks for, watch instances, tear down.

- ``launch``: a ``Launch`` step becomes ``Cloud.launch`` (idempotent by its request id),
  an ``InstanceRecord`` per instance (``joining``), then the join (``ready``). The daemon
  (``background=True``) launches, and retries failed joins, on a worker thread, one at a
  time: a slow provider or join never stalls the cycle. A failed launch rests its (pool,
  node type) for as long as its errors' kinds say (``rests``; ``clouds.base.backoff_s``:
  briefly for an API that did not answer or throttled, lifted once it answers a listing
  again; longer for a stock-out, longest for a refused request); an auth error makes the
  pool unavailable (``access``).
- ``watch``: a spot instance given notice is ``reclaiming``; one preempted or gone leaves
  its pool's cluster (its node dies; ``decide`` requeues its jobs); leaks are swept.
- ``teardown``: terminate, workers first and the head last; each leaves the cluster.
- ``spend``: USD this month per pool and team, from the lifecycle's ledger (``charges``).

An instance joins its pool's cluster by its own startup script (``joining.py``); an emulated
one runs that script here (``meshctl.pools.emulated``). A launch into a pool without a
running cluster is the lifecycle's split (``lifecycle.clusters``): the pool's own head
(request ``<id>.h``, on demand) or its first worker (``<id>``), then the workers (``<id>.w``;
``<id>.w.<n>`` once an earlier generation died beside a live head).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import InitVar, dataclass, field, replace
from functools import partial

from meshctl.clouds.base import Cloud, Instance, LaunchRequest
from meshctl.controller.access import Change, CloudAccess, change_events
from meshctl.controller.charges import ENDED, OPEN, Books
from meshctl.controller.deciding.step import (
    HEAD_PART,
    WORKERS_PART,
    Launch,
    Teardown,
    of_request,
    own_head,
    workers_part,
)
from meshctl.controller.failpoints import failpoint
from meshctl.controller.joining import Joiner, StandIn
from meshctl.controller.rests import Rests
from meshctl.controller.sweep import SWEEP_S, Orphan, ask_again, confirmed, orphans, recorded
from meshctl.lifecycle import Spend
from meshctl.lifecycle.clusters import Part, head_of, parts
from meshctl.model.accelerators import AcceleratorsSpec
from meshctl.model.catalog import Catalog
from meshctl.model.mesh import AwsPool, GcpPool, Mesh
from meshctl.pools.emulated import EmulatedInstances, node_name
from meshctl.state.records import (
    INSTANCE_LIVE,
    Event,
    InstanceRecord,
    InstanceState,
    JobRecord,
    JobState,
)
from meshctl.state.store import ConflictError, NotFoundError, Store

log = logging.getLogger("meshctl.controller")
LIST_LAG_S = 60.0  # a new instance missing from its provider's listing is not yet "gone"


@dataclass
class Burst:
    store: Store
    mesh: Mesh
    catalogs: Mapping[str, Catalog]
    clouds: dict[str, Cloud]
    nodes: EmulatedInstances | StandIn | None  # who plays the instances' machines here
    rests: Rests = field(default_factory=Rests)  # (pool, node type) launches resting
    background: bool = False  # launch on a worker thread, not in the controller's cycle
    access: InitVar[CloudAccess | None] = None  # which pools' credentials work
    registry: AcceleratorsSpec | None = None  # each instance's devices: their Ray resource
    _worker: ThreadPoolExecutor | None = field(default=None, init=False, repr=False)
    # request id -> (its pool, the work on the launch thread)
    _inflight: dict[str, tuple[str, Future[str | None]]] = field(
        default_factory=dict, init=False, repr=False
    )
    _joining: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    pool_access: CloudAccess = field(init=False, repr=False)
    joiner: Joiner = field(init=False, repr=False)
    _next_sweep: float = field(default=float("-inf"), init=False, repr=False)  # the first: now

    def __post_init__(self, access: CloudAccess | None) -> None:
        self.books = Books(self.store)  # the ledger, kept between cycles
        self.pool_access = access or CloudAccess(self.mesh, self.clouds)
        emulated = self.nodes if isinstance(self.nodes, EmulatedInstances) else None
        self.joiner = Joiner(self.mesh, self.catalogs, emulated, self.registry)

    def blocked(self, now: float) -> frozenset[tuple[str, str]]:
        """(pool, node type) pairs not to plan launches for: out of capacity lately. (A pool
        whose credentials do not work is unavailable as a whole: ``down``.)"""
        return self.rests.blocked(now)

    def down(self) -> dict[str, str]:
        """Cloud pools that cannot be used now (no credentials, refused ones), and why."""
        return self.pool_access.unavailable()

    def use(
        self, mesh: Mesh, catalogs: Mapping[str, Catalog], registry: AcceleratorsSpec | None = None
    ) -> None:
        """New rules (a reload): the mesh and catalogs launches and spend are judged by."""
        self.mesh, self.catalogs = mesh, catalogs
        self.joiner.mesh, self.joiner.catalogs = mesh, catalogs
        if registry is not None:
            self.registry = self.joiner.registry = registry
        self.books.reset()  # other prices, maybe
        self.pool_access.use(mesh)

    def live(self) -> list[InstanceRecord]:
        return self.store.list(InstanceRecord, state=INSTANCE_LIVE)

    def interrupted(self) -> frozenset[tuple[str, str]]:
        """(pool, node name) of instances the provider took back."""
        return frozenset(
            (i.pool, node_name(i.id))
            for i in self.store.list(InstanceRecord, state=InstanceState.INTERRUPTED)
        )

    def reclaiming(self) -> dict[tuple[str, str], float]:
        """(pool, node name) of spot instances given notice -> when they will be taken back."""
        found = {}
        for i in self.store.list(InstanceRecord, state=InstanceState.RECLAIMING):
            notice = getattr(self.clouds.get(i.pool), "notice_s", 30.0)
            found[(i.pool, node_name(i.id))] = i.updated_at_s + notice
        return found

    # --- launching ----------------------------------------------------------------------------

    def launch(self, want: Launch, now: float) -> str | None:
        """Launch what ``want`` asks for; an error message, or None. In the background: start
        it (once per request) and report it when a later cycle finds it done."""
        if not self.background:
            return self._launch(want, now)
        self._start(want.request_id, want.pool, lambda: self._logged(want, now))
        return None

    def _start(self, key: str, pool: str, work: Callable[[], str | None]) -> None:
        """Run ``work`` on the launch thread, once while one for ``key`` (a request id) is in
        flight; the pool's head stays meanwhile (``launching_pools``)."""
        for request_id in [r for r, (_, f) in self._inflight.items() if f.done()]:
            del self._inflight[request_id]
        if key not in self._inflight:
            if self._worker is None:
                self._worker = ThreadPoolExecutor(1, thread_name_prefix="meshctl-launch")
            self._inflight[key] = (pool, self._worker.submit(work))

    def _logged(self, want: Launch, now: float) -> str | None:
        try:
            error = self._launch(want, now)
        except Exception as err:  # a node that would not join, an SDK error
            error = f"launch for {want.job_id} in {want.pool}: {err}"
        if error:
            log.warning("%s", error)
        return error

    def launching(self) -> bool:
        """Whether a launch is still in flight (on the worker thread)."""
        return any(not f.done() for _, f in self._inflight.values())

    def launching_pools(self) -> frozenset[str]:
        """The pools a launch is in flight to: their clusters' heads must stay (the workers
        on their way join them)."""
        return frozenset(pool for pool, f in self._inflight.values() if not f.done())

    def close(self) -> None:
        """Let a launch in flight finish (its instances recorded), start no other."""
        if self._worker is not None:
            self._worker.shutdown(wait=True, cancel_futures=True)
            self._worker = None
        self.pool_access.close()

    def _launch(self, want: Launch, now: float) -> str | None:
        pool, cloud = self.mesh.pool(want.pool), self.clouds.get(want.pool)
        if not isinstance(pool, AwsPool | GcpPool) or cloud is None:
            return f"pool {want.pool}: no provider to launch {want.node_type} with"
        # The store first: a request with live instances is launched already (a provider's
        # listing may lag), unless only its head is (a restart between the head and its
        # workers); one whose instances all died gets a new generation, so the provider's
        # idempotency does not hand the dead ones back.
        mine = [
            r for r in self.store.list(InstanceRecord) if of_request(r.request_id, want.request_id)
        ]
        live = [r for r in mine if r.state in INSTANCE_LIVE]
        scripted = self.joiner.scripted(cloud)
        if live:  # workers to launch: none yet (a restart came between), or all died
            workers = [r for r in live if not own_head(r.request_id)]
            second = {r.request_id for r in mine if workers_part(r.request_id)}
            if workers and (len(workers) >= want.count or second or not scripted):
                return None  # launched (a non-scripted request is launched whole)
            if any(r.state in INSTANCE_LIVE for r in mine if r.request_id in second):
                return None
            rid = live[0].request_id.removesuffix(HEAD_PART) + WORKERS_PART
            rid += f".{len(second)}" if second else ""  # the dead ones' ids are spent
            worker = Part(want.node_type, want.count - len(workers), want.spot)
            return self._launch_workers(pool, cloud, want, rid, worker, now)
        generations = {r.request_id for r in mine if not workers_part(r.request_id)}
        request_id = want.request_id + (f".{len(generations)}" if generations else "")
        running = (
            self.joiner.head_address(pool) is not None
            if scripted
            else any(r.pool == pool.name for r in self.live())
        )
        split = parts(want, running, head_of(pool, self.catalogs))
        if scripted and not running:
            self.joiner.new_token(pool, cloud)  # a new cluster: its head first, alone
        for part in split:
            if part.head:
                rid = request_id + (HEAD_PART if part.dedicated else "")
                script = self.joiner.script(pool, part, None) if scripted else ""
                error = self._phase(pool, cloud, want, rid, part, script, now)
            else:
                rid = request_id if running else request_id + WORKERS_PART
                error = self._launch_workers(pool, cloud, want, rid, part, now)
            if error:
                return error
        return None

    def _launch_workers(
        self,
        pool: AwsPool | GcpPool,
        cloud: Cloud,
        want: Launch,
        request_id: str,
        part: Part,
        now: float,
    ) -> str | None:
        """``part``'s workers joining the head of the pool's running cluster; none while it
        has no head (a later cycle asks again)."""
        if not self.joiner.scripted(cloud):
            return self._phase(pool, cloud, want, request_id, part, "", now)
        head = self.joiner.head_address(pool)
        if head is None:
            return None
        script = self.joiner.script(pool, part, head)
        return self._phase(pool, cloud, want, request_id, part, script, now)

    def _phase(
        self,
        pool: AwsPool | GcpPool,
        cloud: Cloud,
        want: Launch,
        request_id: str,
        part: Part,
        script: str,
        now: float,
    ) -> str | None:
        """One provider request: ``part``'s instances with the startup ``script``,
        recorded, then joined."""
        zones = tuple(pool.zones) or (
            f"{pool.region}a" if isinstance(pool, AwsPool) else f"{pool.region}-a",
        )
        request = LaunchRequest(
            self.mesh.metadata.name, pool.name, part.node_type, part.count, request_id,
            zones, part.spot, job=want.job_id, startup_script=script,
        )  # fmt: skip
        failpoint("before-launch")
        result = cloud.launch(request)
        failpoint("after-launch")
        offer = {"pool": pool.name, "node_type": part.node_type, "spot": part.spot}
        for error in result.errors:  # each offer tried and refused, for explain
            where = f"{pool.name} {error.zone or ''}".strip()
            said = {**offer, "zone": error.zone, "outcome": error.kind, "message": error.message}
            self._event(
                now, "instance.refused", want.job_id,
                f"{where}: {error.kind}: {error.message}", said,
            )  # fmt: skip
        refused = next((e for e in result.errors if e.kind == "auth"), None)
        if refused is not None:  # the pool's credentials: unavailable now, every node type
            self._changed([self.pool_access.refused(pool.name, refused.message, now)], now)
            return f"pool {pool.name}: {refused.message}"
        if not result.ok:  # look elsewhere for a while: longer when it is not capacity
            kinds: set[str] = {e.kind for e in result.errors}
            self.rests.rest((pool.name, want.node_type), now, kinds)  # the head's too
            return f"pool {pool.name}: could not launch {part.node_type}"
        for instance in result.instances:
            if self.store.get(InstanceRecord, instance.id) is None:
                record = InstanceRecord(
                    instance.id, pool.name, pool.provider, request_id, instance.node_type,
                    InstanceState.JOINING, instance.launched_at_s or now, now, spot=instance.spot,
                )  # fmt: skip
                role = " as the pool's head" if part.dedicated else ""
                message = (
                    f"{instance.id} ({instance.node_type}, {instance.zone}) in {pool.name}{role}"
                )
                said = {**offer, "zone": instance.zone, "outcome": "launched", "message": message}
                self.store.create(
                    record, events=[Event(now, "instance.launched", want.job_id, message, said)]
                )
                self.books.touched(record.id)
            self._join(pool, cloud, instance, part.head, now)
        failpoint("after-join")
        return None

    def _join(
        self, pool: AwsPool | GcpPool, cloud: Cloud, instance: Instance, head: bool, now: float
    ) -> None:
        """The instance joins its pool's cluster by its startup script (``joining``): ready
        once its node is there and its agent answers. A join that fails is tried again by
        ``watch``."""
        if self.joiner.scripted(cloud):
            with self._joining:  # one node starts at a time; never beside a leave
                self.joiner.join(pool, cloud, instance, head)
        elif self.nodes is not None and not isinstance(self.nodes, EmulatedInstances):
            self.nodes.join(pool.provider, instance)  # a harness's stand-in machine
        self._set(instance.id, InstanceState.READY, now)

    # --- watching and tearing down ------------------------------------------------------------

    def watch(self, now: float) -> None:
        """Instances preempted or gone at the provider leave their cluster and are terminated
        (a stopped spot instance still bills its disk); joins that failed are tried again;
        terminations are confirmed; what the records do not account for is adopted or
        terminated (``sweep``: on the first watch, then every ``SWEEP_S``)."""
        self._changed(self.pool_access.refresh(now), now)
        sweeping = now >= self._next_sweep
        if sweeping:
            self._next_sweep = now + SWEEP_S
        # every cycle the open records only (the state index: not the instances' history);
        # a sweep, every SWEEP_S, all of them, to tell an orphan from one meshctl ended
        down, waiting = self.down(), self.rests.waiting_for_api(now)
        if sweeping:
            records = self.store.list(InstanceRecord)
        else:
            records = self.store.list(InstanceRecord, state=OPEN)
        for name, cloud in self.clouds.items():
            mine = [r for r in records if r.pool == name and r.state not in ENDED]
            if name in down or not (mine or sweeping or name in waiting):  # refused: nothing
                continue
            try:
                seen = {i.id: i for i in cloud.list_instances(self.mesh.metadata.name)}
            except Exception as err:
                self.rests.listed(name, answered=False)
                log.warning("pool %s: cannot list instances: %s", name, err)
                continue
            self.rests.listed(name, answered=True)
            for record in mine:
                self._watch_one(name, cloud, record, seen.get(record.id), now)
            if sweeping:
                owned = {r.id: r for r in records if r.pool == name}
                listed = [i for i in seen.values() if i.pool in ("", name)]
                self._sweep(name, cloud, orphans(listed, owned, self._in_flight, self._job), now)

    def _watch_one(
        self, name: str, cloud: Cloud, record: InstanceRecord, instance: Instance | None, now: float
    ) -> None:
        if record.state == InstanceState.TERMINATING:
            if confirmed(record, instance):
                self._set(record.id, InstanceState.TERMINATED, now)
            elif ask_again(record, instance, now):
                self._leave(name, record.id, now)  # if a dead controller had not yet
                cloud.terminate([record.id], f"teardown-{record.id}")
            return
        young = now - (record.launched_at_s or now) < LIST_LAG_S  # listings lag
        if instance is None and young and record.state != InstanceState.RECLAIMING:
            return
        if instance is None or instance.state in ("preempted", "terminated"):
            state = instance.state if instance else "gone"
            self._event(now, "instance.interrupted", None, f"{record.id} in {name}: {state}")
            self._set(record.id, InstanceState.INTERRUPTED, now)
            cloud.terminate([record.id], f"interrupted-{record.id}")
            self._leave(record.pool, record.id, now)
        elif instance.state == "interrupting" and record.state != InstanceState.RECLAIMING:
            within = f"within {cloud.notice_s:.0f} s"
            message = f"{record.id} in {name}: taken back {within}"
            self._event(now, "instance.notice", None, message)
            self._set(record.id, InstanceState.RECLAIMING, now)
        elif record.state == InstanceState.JOINING and not self._in_flight(record.request_id):
            if not self._still_joining(record.id):
                return  # its launch joined it after this watch read the records: in service
            pool = self.mesh.pool(name)
            if isinstance(pool, AwsPool | GcpPool):
                scripted = self.joiner.scripted(cloud)
                head = scripted and not self.joiner.head_address(pool)
                if head and pool.head_node_type and not own_head(record.request_id):
                    self._orphaned(name, cloud, record.id, now)  # a worker never heads
                    return
                if self.background:  # a join may wait minutes: never in the cycle
                    rejoin = partial(self._rejoin, pool, cloud, instance, head, now)
                    self._start(record.request_id, name, rejoin)
                else:
                    self._rejoin(pool, cloud, instance, head, now)

    def _still_joining(self, instance_id: str) -> bool:
        """Whether the instance is still joining, as the store says now. A watch's records are
        read before it looks at what is in flight: a launch that joined its instance in
        between is done, and its record says ready; joining it again would start its node
        anew under the job just placed on it (on the emulated clouds, stop it first)."""
        current = self.store.get(InstanceRecord, instance_id)
        return current is not None and current.state == InstanceState.JOINING

    def _rejoin(
        self, pool: AwsPool | GcpPool, cloud: Cloud, instance: Instance, head: bool, now: float
    ) -> None:
        try:
            self._join(pool, cloud, instance, head, now)
        except Exception as err:
            log.warning("instance %s: join failed again: %s", instance.id, err)

    def _sweep(self, name: str, cloud: Cloud, found: list[Orphan], now: float) -> None:
        """Adopt or terminate what the records did not account for (a controller that died
        between a launch and its record)."""
        pool = self.mesh.pool(name)
        for orphan in found:
            instance = orphan.instance
            if self.store.get(InstanceRecord, instance.id) is not None:
                continue  # recorded by its launch after this watch read the records: no orphan
            record, event = recorded(orphan, name, pool.provider if pool else "", now)
            with contextlib.suppress(ConflictError):
                self.store.create(record, events=[event])
                self.books.touched(record.id)
            if orphan.fate == "terminate":
                cloud.terminate([instance.id], f"swept-{instance.id}")

    def _job(self, job_id: str) -> JobState | None:
        found = self.store.get(JobRecord, job_id)
        return found.state if found is not None else None

    def teardown(self, down: Teardown, now: float) -> None:
        """Workers first, the head last: each recorded ``terminating`` before the call (so a
        controller that dies mid-way asks again), its node out of the cluster, then the
        provider asked; ``terminated`` once the provider confirms it gone (``watch``)."""
        cloud = self.clouds.get(down.pool)
        if cloud is None:
            return
        count = len(down.instance_ids)
        self._event(now, "pool.teardown", None, f"{down.pool}: terminating {count} ({down.reason})")
        for instance_id in down.instance_ids:
            self._set(instance_id, InstanceState.TERMINATING, now)
            self._leave(down.pool, instance_id, now)
            errors = cloud.terminate([instance_id], f"teardown-{instance_id}")
            failpoint("mid-teardown")
            if errors:
                log.warning("pool %s: terminate %s: %s", down.pool, instance_id, errors[0].message)
                return

    def ledger(self, now: float) -> Spend:
        """USD this month (UTC) per pool and team, from the lifecycle's ledger: each
        instance from its launch to its end (now, while it lives) at the price paid for it
        (the pool's discount off the list price, or spot: ``lifecycle.snapshot.price_paid``),
        charged to the team of the job whose launch request started it ("-" when that job is
        gone). Kept between cycles and for its moment (``charges.Books``): a cycle reads only
        the open records and those written since. Callers must not change it."""
        return self.books.this_month(self.mesh, self.catalogs, now)

    def spend(self, now: float) -> dict[str, float]:
        """USD per pool this month; what the pool and provider budget rules read."""
        return self.ledger(now).by_pool

    def team_spend(self, now: float) -> dict[str, float]:
        """USD per team this month; what the team budget rules read."""
        return self.ledger(now).by_team

    # --- inside -------------------------------------------------------------------------------

    def _in_flight(self, request_id: str) -> bool:
        return any(
            of_request(request_id, r) and not f.done() for r, (_, f) in self._inflight.items()
        )

    def _leave(self, pool: str, instance_id: str, now: float) -> None:
        if self.nodes is None:
            return
        with self._joining:
            orphans = self.nodes.leave(pool, instance_id)
        cloud = self.clouds.get(pool)
        for other in orphans:  # the head went: its cluster with it; its workers must go too
            self._orphaned(pool, cloud, other, now)

    def _orphaned(self, pool: str, cloud: Cloud | None, instance_id: str, now: float) -> None:
        """A worker whose head is gone: taken out (its job, if any, is requeued)."""
        self._event(now, "instance.orphaned", None, f"{instance_id} in {pool}: its head is gone")
        self._set(instance_id, InstanceState.INTERRUPTED, now)
        if cloud is not None:
            cloud.terminate([instance_id], f"orphaned-{instance_id}")

    def _set(self, instance_id: str, state: str, now: float) -> None:
        record = self.store.get(InstanceRecord, instance_id)
        if record is None or record.state == state or record.state in ENDED:
            return  # an instance that has ended never comes back
        changed = replace(record, state=state, updated_at_s=now)
        with contextlib.suppress(ConflictError, NotFoundError):
            self.store.update(changed, expected_version=record.version)
        self.books.touched(instance_id)  # also on another thread (a launch)

    def _event(
        self,
        now: float,
        kind: str,
        job_id: str | None,
        message: str,
        data: Mapping[str, object] | None = None,
    ) -> None:
        self.store.append_event(Event(now, kind, job_id, message, data or {}))

    def _changed(self, changes: Sequence[Change | None], now: float) -> None:
        for event in change_events(changes, now):
            self.store.append_event(event)
