"""The shape of ``meshctl queues``: the teams' quotas by cohort, what each team holds, borrows
and lends, and what waits."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import with_config
from typing_extensions import TypedDict

from meshctl.jsontypes import STRICT


@with_config(STRICT)
class TeamQueue(TypedDict):
    team: str
    cohort: Annotated[str | None, "the cohort it shares quota with; null: none"]
    nominal_gpus: Annotated[float | None, "its nominal quota; null: a team without a quota"]
    borrowing_limit_gpus: Annotated[float | None, "the most it may borrow; null: no limit"]
    lending_limit_gpus: Annotated[float | None, "the most of its idle quota it lends"]
    reclaim: Annotated[
        Literal["any", "lower-priority", "never"] | None,
        "from whose jobs it takes back what it lent, below its quota; null: no quota",
    ]
    used_gpus: Annotated[float, "held by its jobs' active attempts (a shared GPU: its share)"]
    borrowed_gpus: Annotated[float, "held beyond its nominal quota, from its cohort"]
    lent_gpus: Annotated[
        float, "its share of what its cohort borrows, in proportion to the idle quota it lends"
    ]
    waiting_jobs: Annotated[int, "its jobs pending or requeued"]
    waiting_gpus: Annotated[float, "what they ask (GPUs per node times nodes)"]


@with_config(STRICT)
class CohortQueue(TypedDict):
    cohort: str
    nominal_gpus: Annotated[float, "its teams' nominal quotas"]
    used_gpus: float
    borrowed_gpus: Annotated[float, "held by its teams beyond their nominal quotas"]
    waiting_jobs: int
    waiting_gpus: float
    teams: list[TeamQueue]


@with_config(STRICT)
class Queues(TypedDict):
    cohorts: list[CohortQueue]
    teams: Annotated[list[TeamQueue], "the teams in no cohort, with or without a quota"]
