"""What the API server serves from (``Server``): its store, its ``AppContext``, and what it keeps
between requests (the planner's mesh and policies, the pools' health)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from meshctl.app.pools import PoolHealth
from meshctl.server.identity import CHECKED_FOR_S
from meshctl.server.planning import Planner
from meshctl.state import Store


@dataclass(frozen=True, slots=True)
class Server:
    """The store, and the ``AppContext`` (home, mesh, policies, catalogs) jobs are checked
    against, as ``meshctl submit`` on the server's host would.

    ``loop_store``: what the event loop reads and writes through (tokens, submissions without
    files), its own connection, so that a long read in a request thread (a list of 10,000
    jobs) never holds it up; default ``store``."""

    context: Any
    store: Store
    max_body_bytes: int
    tokens_kept_s: float = CHECKED_FOR_S  # a valid token's principal, kept (``Authenticator``)
    loop_store: Store | None = None
    planner: Planner = field(init=False)
    health: PoolHealth = field(init=False)  # whether each pool can be used: every 30 s at most

    def __post_init__(self) -> None:
        object.__setattr__(self, "planner", Planner(self.context))
        object.__setattr__(self, "health", PoolHealth(self.context))
