"""The mesh, catalogs and policies the API server checks submissions against, read once.

``meshctl submit`` reads and compiles them for each job (30 ms of a submission); a server
answering hundreds of submissions a second keeps them, and reads them again when a file
changes: at most every ``WATCH_S`` it compares the files' sizes and modification times (the
controller's own ``reload.stamp``), nothing read unless one changed. An edit that makes them
invalid is refused, with its first problem, and the last valid set is kept; with no valid set
yet, the submission gets the problem (a 422), as ``meshctl submit`` would.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import datetime as dt

    from meshctl.app.context import AppContext
    from meshctl.controller.reload import RuleFiles, Stamp
    from meshctl.model import Catalog, Mesh
    from meshctl.policy import PolicySet
    from meshctl.policy.evaluate import BoundPolicies

log = logging.getLogger("meshctl.server")
WATCH_S = 1.0
Planning = tuple["Mesh", dict[str, "Catalog"], "PolicySet"]


class Planner:
    """``AppContext.planning()``, kept while its files do not change."""

    def __init__(self, context: AppContext, clock: Any = time.monotonic) -> None:
        self.context, self._clock = context, clock
        self._lock = threading.Lock()
        self._files: RuleFiles | None = None
        self._stamp: Stamp | None = None
        self._planning: Planning | None = None
        self._checked = float("-inf")
        self._bound = threading.local()

    def planning(self) -> Planning:
        from meshctl.controller.reload import stamp

        with self._lock:
            now = self._clock()
            if self._planning is not None and now - self._checked < WATCH_S:
                return self._planning
            self._checked = now
            files = self.context.rule_files()
            seen = stamp(files)
            if self._planning is not None and (files, seen) == (self._files, self._stamp):
                return self._planning
            try:
                mesh, catalogs = self.context.mesh_and_catalogs()
                policies = self.context.policy_set(mesh=mesh)
            except Exception as err:
                if self._planning is None:
                    raise
                log.warning("keeping the rules in force: the files changed and %s", err)
                self._files, self._stamp = files, seen  # not again until they change again
                return self._planning
            self._planning = (mesh, catalogs, policies)
            self._files, self._stamp = files, seen
            return self._planning

    def reads_pools(self) -> bool:
        """Whether checking a job reads a pool over the network: a ``ray`` pool whose mesh
        entry lists no nodes is asked for its nodes (``meshctl.app.admission.admit``)."""
        from meshctl.model.mesh import RayPool

        mesh = self.planning()[0]
        return any(isinstance(p, RayPool) and not p.nodes for p in mesh.spec.pools)

    def bound(self, planning: Planning, now: dt.datetime) -> BoundPolicies:
        """The policies bound to the mesh, made again each second and for each set: one per
        request thread (a bound set evaluates in a context of its own, not thread-safe)."""
        from meshctl.policy.evaluate import bind
        from meshctl.policy.facts import mesh_snapshot

        key = (id(planning), int(now.timestamp()))
        held = getattr(self._bound, "held", None)
        if held is None or held[0] != key or held[1] is not planning:
            mesh, catalogs, policies = planning
            held = (key, planning, bind(policies, mesh_snapshot(mesh, catalogs), now))
            self._bound.held = held
        found: BoundPolicies = held[2]
        return found
