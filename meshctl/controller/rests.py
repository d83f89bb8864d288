"""Which (pool, node type) launches rest after a failed launch, until when.

A launch refused for capacity, quota or an invalid request rests its (pool, node type) for
as long as its errors' kinds say (``clouds.base.backoff_s``). One that found the API away or
over its request rate (a *transient* rest, ``TRANSIENT_S``) rests briefly, and is lifted
early once the pool's API is seen to answer again after failing: the controller's cycle
lists a resting pool's instances each cycle (``Burst.watch``), so a launch goes out the
cycle after the API is back, not up to a rest later.
"""

from __future__ import annotations

import threading

from meshctl.clouds.base import TRANSIENT, backoff_s

Key = tuple[str, str]  # (pool, node type)


class Rests:
    def __init__(self) -> None:
        self._until: dict[Key, float] = {}
        self._transient: set[Key] = set()
        self._failed: set[str] = set()  # pools whose listing failed since their rest began
        self._lock = threading.Lock()  # launches rest from the launch thread

    def rest(self, key: Key, now_s: float, kinds: set[str]) -> None:
        """A launch for ``key`` failed with errors of these kinds: it rests from ``now_s``."""
        transient = bool(kinds) and kinds <= TRANSIENT
        with self._lock:
            self._until[key] = now_s + backoff_s(kinds)
            if transient:
                self._transient.add(key)
            else:
                self._transient.discard(key)

    def blocked(self, now: float) -> frozenset[Key]:
        """(pool, node type) pairs not to plan launches for now."""
        with self._lock:
            return frozenset(k for k, until in self._until.items() if until > now)

    def waiting_for_api(self, now: float) -> frozenset[str]:
        """The pools with a transient rest on: worth a listing each cycle, to see their API
        answer again."""
        with self._lock:
            return frozenset(k[0] for k in self._transient if self._until.get(k, 0.0) > now)

    def listed(self, pool: str, answered: bool) -> None:
        """The pool's API answered a listing (or did not): an answer after a failure lifts
        its transient rests."""
        with self._lock:
            if not answered:
                self._failed.add(pool)
                return
            if pool not in self._failed:
                return
            self._failed.discard(pool)
            for key in [k for k in self._transient if k[0] == pool]:
                self._transient.discard(key)
                self._until.pop(key, None)
