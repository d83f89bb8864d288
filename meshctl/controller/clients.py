"""What the controller needs of what it drives: a pool adapter (``PoolClient``) and Serve on
the pools (``ServeSide``). The loop (``loop.py``) observes and reads logs through them; the
applying half (``apply.py``) submits and stops through them; both import them from here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from meshctl.controller.deciding.world import JobView, ServeSeen
from meshctl.model.mesh import Mesh
from meshctl.pools.observed import PoolObservation, Submission
from meshctl.pools.ray import LogChunk
from meshctl.state.store import Store


class PoolClient(Protocol):
    """What the loop needs of a pool adapter (``meshctl.pools.ray.RayPoolClient``)."""

    def observe(self) -> PoolObservation: ...

    def submit(self, submission: Submission) -> str: ...

    def stop(self, submission_id: str) -> bool: ...

    def read_log(self, submission_id: str, offset: int, limit: int) -> LogChunk | None: ...


class ServeSide(Protocol):
    """What the loop needs of Serve on the pools (``serving_apply.ServeDeployer``)."""

    def observe(
        self, views: Sequence[JobView], clients: Mapping[str, Any]
    ) -> dict[str, ServeSeen]: ...

    def sync(
        self,
        store: Store,
        mesh: Mesh,
        clients: Mapping[str, Any],
        views: Sequence[JobView],
        seen: Mapping[str, ServeSeen],
        now: float,
    ) -> list[str]: ...
