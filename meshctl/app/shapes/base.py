"""The shapes every command shares: errors and warnings, scheduling decisions.

What every shape is made of (the strict config, UTC times, events) is shared with documents
built outside the CLI and lives in ``meshctl/jsontypes.py`` (the values: ``meshctl/jsondata.py``).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import with_config
from typing_extensions import TypedDict

from meshctl.jsontypes import STRICT

# --- errors and warnings (stderr, under -o json|yaml) ---------------------------------------


@with_config(STRICT)
class ProblemData(TypedDict):
    file: Annotated[str | None, "the file the problem is in; null for a flag or a request"]
    line: Annotated[int | None, "its line, where known"]
    field: Annotated[str | None, "the field (spec.resources.gpus) or flag (--gpus)"]
    message: Annotated[str, "what was expected and what was found"]


@with_config(STRICT)
class ErrorBody(TypedDict):
    exit_code: Annotated[int, "the command's exit code: 1, 2 or 124"]
    message: Annotated[str, "the first problem, as the error line would say it"]
    problems: Annotated[list[ProblemData], "every problem"]


@with_config(STRICT)
class ErrorDocument(TypedDict):
    error: ErrorBody


@with_config(STRICT)
class WarningBody(TypedDict):
    message: str


@with_config(STRICT)
class WarningDocument(TypedDict):
    warning: WarningBody


# --- shared pieces ------------------------------------------------------------------------


@with_config(STRICT)
class FilteredData(TypedDict):
    reason: Annotated[str, "why the nodes were turned away"]
    nodes: Annotated[int, "how many"]


@with_config(STRICT)
class CandidateData(TypedDict):
    nodes: list[str]
    total: Annotated[float, "the weighted score, in [0, 1]"]
    scores: Annotated[dict[str, float], "each scorer's score before weighting, in [0, 1]"]
    data_local_gib: Annotated[
        float | None,
        "GiB of the job's data held whole on its nodes (a gang: its node holding least), of the "
        "data sets that give a size; null: the job has no data sets",
    ]
    data_gib: Annotated[float | None, "GiB of the job's data sets that give a size; null: none"]


@with_config(STRICT)
class ForecastData(TypedDict):
    runtime_s: Annotated[float | None, "what backfill reckons the job runs (null: unknown)"]
    runtime: Annotated[str, "where that came from: declared, or the team's last runs"]
    expected_wait_s: Annotated[
        dict[str, float], "per on-prem pool, as the policies saw it (none when blocked_by)"
    ]
    assumed: Annotated[
        dict[str, int],
        "per on-prem pool: the running jobs with no runtime known, each assumed to run at"
        " least unknown_runtime_s more",
    ]
    unknown_runtime_s: Annotated[float, "the policies' forecast.unknown_runtime_s (2 h unset)"]
    blocked_by: Annotated[
        Literal["quota", "policy", "size"] | None,
        "what keeps the job from running besides busy GPUs: then no wait is forecast",
    ]


@with_config(STRICT)
class DecisionData(TypedDict):
    status: Literal["placed", "pending", "preempting", "provisioning", "unschedulable"]
    reason: Annotated[str | None, "why, when it is not placed"]
    summary: Annotated[str, "the one line people see"]
    nodes_considered: int
    filtered: Annotated[list[FilteredData], "nodes turned away, by reason, most first"]
    exhausted: Annotated[str | None, "the dimension most nodes ran out of"]
    candidates: Annotated[list[CandidateData], "the best placements, best first"]
    notes: Annotated[list[str], "burst, quota and preemption remarks"]
    forecast: Annotated[ForecastData | None, "the controller's: a waiting job's runtime, waits"]
