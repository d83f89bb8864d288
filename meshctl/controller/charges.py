"""What the controller's ledger books: every instance record at the price paid for it, from
its launch to its end (now, while it bills), to the team of the job whose launch request
started it ("-" when that job is gone).

A worker is priced as its offer (``lifecycle.snapshot.price_paid``: the pool's discount off
the list price, or spot); a pool's own head at its head offer (``lifecycle.clusters``:
on demand, less the discount). Records the catalogs do not price are not booked.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping

from meshctl.lifecycle import Charge, Ledger, Spend
from meshctl.lifecycle.clusters import head_of
from meshctl.lifecycle.snapshot import offers_of, price_paid
from meshctl.model.catalog import Catalog
from meshctl.model.mesh import Mesh
from meshctl.state.records import INSTANCE_LIVE, InstanceRecord, InstanceState, JobRecord
from meshctl.state.store import Store

BILLED = frozenset({*INSTANCE_LIVE, InstanceState.TERMINATING})  # asked to go: not yet gone
ENDED = frozenset({InstanceState.INTERRUPTED, InstanceState.TERMINATED})  # for good
OPEN = frozenset(InstanceState) - ENDED


class Books:
    """The controller's ledger, kept between cycles: what an instance cost once it ended is
    booked once, when it is first seen ended (an ended record never changes: ``Burst._set``),
    and never read again. The first reading, and the first after ``reset`` (new prices: a
    reload), reads every instance record; each later one the open records (through the state
    index) and, by id, those open at the reading before or ``touched`` since (created or
    changed by this controller, maybe ended already): a long history costs a cycle nothing.

    A reading is kept for its moment: asked again at the same ``now`` with nothing touched
    since, it is returned as it was (the cycle reads it for the pool and team budgets and the
    pool records). Callers must not change it. ``touched`` may be called from any thread."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        """Book everything again at the next reading (new prices)."""
        with self._lock:
            self._ledger = Ledger()
            self._open: set[str] | None = None  # ids of the records open at the last reading
            self._touched: set[str] = set()  # ids written since the last reading
            self._version = 0  # one more at each touch: a kept reading is stale
            self._kept: tuple[float, int, Spend] | None = None  # (now, version, the reading)
            self._teams: dict[str, str] = {}  # job id -> its team ("-": gone when first asked)

    def touched(self, instance_id: str) -> None:
        """This controller created or changed the instance's record."""
        with self._lock:
            self._touched.add(instance_id)
            self._version += 1

    def this_month(self, mesh: Mesh, catalogs: Mapping[str, Catalog], now: float) -> Spend:
        """USD this month (UTC) per pool and team: the instances that ended booked into the
        lifecycle's ledger, the live ones up to ``now``."""
        with self._lock:
            version, touched, self._touched = self._version, self._touched, set()
            if self._kept is not None and self._kept[:2] == (now, version):
                return self._kept[2]
        if self._open is None:
            records = self.store.list(InstanceRecord)
        else:
            records = self.store.list(InstanceRecord, state=OPEN)
            others = (self._open | touched) - {r.id for r in records}
            records += [r for i in sorted(others) if (r := self.store.get(InstanceRecord, i))]
        prices = Prices(mesh, catalogs)
        live = []
        for record in records:
            charge = prices.charge(record, self._team)
            if charge is None:
                continue
            if charge.ended_at_s is None:
                live.append(charge)
            else:
                self._ledger.close(charge)  # seen ended for the first time
        self._open = {r.id for r in records if r.state in OPEN}
        spent = self._ledger.this_month(now, live)
        self._kept = (now, version, spent)
        return spent

    def _team(self, job_id: str) -> str:
        if job_id not in self._teams:
            job = self.store.get(JobRecord, job_id)
            self._teams[job_id] = job.team if job is not None else "-"
        return self._teams[job_id]


class Prices:
    """What each instance record costs an hour under a mesh and its catalogs."""

    def __init__(self, mesh: Mesh, catalogs: Mapping[str, Catalog]) -> None:
        pools = mesh.spec.pools
        self.offers = {(o.pool, o.node_type): o for p in pools for o in offers_of(p, catalogs)}
        self.heads = {
            (h.pool, h.node_type): h.usd_per_hour for p in pools if (h := head_of(p, catalogs))
        }

    def charge(self, record: InstanceRecord, team_of: Callable[[str], str]) -> Charge | None:
        """The record as the ledger books it; None when the catalogs do not price it or it was
        never launched."""
        offer = self.offers.get((record.pool, record.instance_type))
        head = self.heads.get((record.pool, record.instance_type))
        if (offer is None and head is None) or record.launched_at_s is None:
            return None
        end = None if record.state in BILLED else record.updated_at_s
        usd = price_paid(offer, record.spot) if offer is not None else head or 0.0
        team = team_of(_job_of(record.request_id))
        return Charge(record.pool, team, usd, record.launched_at_s, end)


def _job_of(request_id: str) -> str:
    """The job of a launch request id: ``burst-<job>-<n>`` and its parts (``.<gen>``, ``.h``,
    ``.w``, ``.w.<n>``: after the last dash)."""
    return request_id.removeprefix("burst-").rsplit("-", 1)[0]
