"""What the controller's ledger books: every instance record at the price paid for it, from
its launch to its end (now, while it bills), to the team of the job whose launch request
started it ("-" when that job is gone).

A worker is priced as its offer (``lifecycle.snapshot.price_paid``: the pool's discount off
the list price, or spot); a pool's own head at its head offer (``lifecycle.clusters``:
on demand, less the discount). Records the catalogs do not price are not booked.
"""

from __future__ import annotations

from collections.abc import Mapping

from meshctl.lifecycle import Charge, Ledger, Spend
from meshctl.lifecycle.clusters import head_of
from meshctl.lifecycle.snapshot import offers_of, price_paid
from meshctl.model.catalog import Catalog
from meshctl.model.mesh import Mesh
from meshctl.state.records import INSTANCE_LIVE, InstanceRecord, InstanceState, JobRecord
from meshctl.state.store import Store

BILLED = frozenset({*INSTANCE_LIVE, InstanceState.TERMINATING})  # asked to go: not yet gone


def charges(store: Store, mesh: Mesh, catalogs: Mapping[str, Catalog]) -> list[Charge]:
    """Every instance record as the ledger books it."""
    pools = mesh.spec.pools
    offers = {(o.pool, o.node_type): o for p in pools for o in offers_of(p, catalogs)}
    heads = {(h.pool, h.node_type): h.usd_per_hour for p in pools if (h := head_of(p, catalogs))}
    teams: dict[str, str] = {}
    found = []
    for record in store.list(InstanceRecord):
        offer = offers.get((record.pool, record.instance_type))
        head = heads.get((record.pool, record.instance_type))
        if (offer is None and head is None) or record.launched_at_s is None:
            continue
        job_id = _job_of(record.request_id)
        if job_id not in teams:
            job = store.get(JobRecord, job_id)
            teams[job_id] = job.team if job is not None else "-"
        end = None if record.state in BILLED else record.updated_at_s
        usd = price_paid(offer, record.spot) if offer is not None else head or 0.0
        found.append(Charge(record.pool, teams[job_id], usd, record.launched_at_s, end))
    return found


def this_month(store: Store, mesh: Mesh, catalogs: Mapping[str, Catalog], now: float) -> Spend:
    """USD this month (UTC) per pool and team: the instances that ended booked into the
    lifecycle's ledger, the live ones up to ``now``."""
    books, live = Ledger(), []
    for charge in charges(store, mesh, catalogs):
        if charge.ended_at_s is None:
            live.append(charge)
        else:
            books.close(charge)
    return books.this_month(now, live)


def _job_of(request_id: str) -> str:
    """The job of a launch request id: ``burst-<job>-<n>`` and its parts (``.<gen>``, ``.h``,
    ``.w``, ``.w.<n>``: after the last dash)."""
    return request_id.removeprefix("burst-").rsplit("-", 1)[0]
