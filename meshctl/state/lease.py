"""One leader among the controllers that share a store: a lease with a fencing epoch.

The lease is a record (``LeaseRecord``) written through the store's own optimistic versioning,
so every backend keeps it the same way. Its holder renews it before ``expires_at_s``; another
holder takes it once it has expired (or at once when its holder is known to be dead, and
``replacing`` names it), and taking it adds one to ``epoch``. A leader fences its store with
the epoch it took (``Store.fence``): every write it makes checks, in its transaction, that the
lease is still at that epoch. A leader that paused past its lease and wakes up after another
took it can therefore write nothing more. The store never reads the clock: ``now_s`` is the
caller's.
"""

from __future__ import annotations

from dataclasses import replace

from meshctl.state.records import Event, LeaseRecord
from meshctl.state.store import ConflictError, NotFoundError, Store

CONTROLLER = "controller"
TRIES = 5  # reads and writes raced by other holders before giving up this round


def current(store: Store, name: str = CONTROLLER) -> LeaseRecord | None:
    return store.get(LeaseRecord, name)


def acquire(
    store: Store,
    holder: str,
    now_s: float,
    ttl_s: float,
    *,
    name: str = CONTROLLER,
    replacing: str | None = None,
) -> LeaseRecord | None:
    """The lease, held by ``holder`` until ``now_s + ttl_s``: renewed (its epoch kept) if
    ``holder`` holds it; taken (its epoch + 1) if there is none, it expired, or its holder is
    ``replacing``; None while another holds it."""
    for _ in range(TRIES):
        held = store.get(LeaseRecord, name)
        try:
            if held is None:
                lease = LeaseRecord(name, holder, 1, now_s + ttl_s)
                return store.create(lease, events=[_taken(lease, None, now_s)])
            if held.holder == holder:
                renewed = replace(held, expires_at_s=max(held.expires_at_s, now_s + ttl_s))
                return store.update(renewed, expected_version=held.version)
            if held.expires_at_s <= now_s or held.holder == replacing:
                taken = replace(held, holder=holder, epoch=held.epoch + 1,
                                expires_at_s=now_s + ttl_s)  # fmt: skip
                return store.update(
                    taken, expected_version=held.version, events=[_taken(taken, held, now_s)]
                )
            return None
        except (ConflictError, NotFoundError):
            continue  # another holder wrote first: read again
    return None


def release(store: Store, holder: str, now_s: float, *, name: str = CONTROLLER) -> bool:
    """Give the lease up (a controller stopping cleanly): another takes it at once. False if
    ``holder`` did not hold it."""
    held = store.get(LeaseRecord, name)
    if held is None or held.holder != holder:
        return False
    try:
        store.update(replace(held, expires_at_s=now_s), expected_version=held.version)
    except (ConflictError, NotFoundError):
        return False
    return True


def _taken(lease: LeaseRecord, before: LeaseRecord | None, now_s: float) -> Event:
    after = "" if before is None else f", after {before.holder} (epoch {before.epoch})"
    return Event(
        now_s,
        "controller.leading",
        None,
        f"{lease.holder} leads{after}",
        {"lease": lease.name, "holder": lease.holder, "epoch": lease.epoch,
         "before": None if before is None else before.holder},
    )  # fmt: skip
