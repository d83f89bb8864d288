"""A mesh's moment: free GPUs, queues, waits and spend per pool, usage per team.

Written by hand for ``meshctl policy explain --mesh STATE.yaml`` and policy tests; recorded by
the controller later. Pools and teams it does not mention are idle: all GPUs free, no queue,
no spend.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from meshctl.model.base import DocumentModel, DurationS, MemoryGiBTotal, Model, Name, Usd

NonNegative = Annotated[float, Field(ge=0, le=1e12)]


class PoolState(Model):
    gpus: Annotated[int, Field(ge=0, le=10_000_000)] | None = Field(
        None, description="GPUs the pool has now, e.g. with nodes down (default: its configured)"
    )
    free_gpus: NonNegative | None = Field(None, description="default: every GPU of the pool")
    queued_jobs: Annotated[int, Field(ge=0, le=10_000_000)] = 0
    expected_wait_s: DurationS = 0.0
    spend_usd_month: Usd = 0.0


class TeamState(Model):
    gpus_in_use: NonNegative = 0.0
    gpu_memory_gib_in_use: MemoryGiBTotal = 0.0
    spend_usd_month: Usd = 0.0


class Moment(Model):
    pools: dict[Name, PoolState] = Field(default_factory=dict)
    teams: dict[Name, TeamState] = Field(default_factory=dict)

    def over(self, base: Moment) -> Moment:
        """This moment's settings on top of ``base``'s, field by field."""

        def merged(mine: dict[str, Any], theirs: dict[str, Any]) -> dict[str, Any]:
            out = {k: v.model_dump(exclude_unset=True) for k, v in theirs.items()}
            for key, value in mine.items():
                out[key] = {**out.get(key, {}), **value.model_dump(exclude_unset=True)}
            return out

        return Moment.model_validate(
            {"pools": merged(self.pools, base.pools), "teams": merged(self.teams, base.teams)}
        )


class MeshStateSpec(Moment):
    mesh: str | None = Field(None, description="the Mesh file, relative to this one")


class MeshState(DocumentModel):
    kind: Literal["MeshState"] = "MeshState"
    spec: MeshStateSpec
