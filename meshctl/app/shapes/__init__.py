"""The ``-o json|yaml`` output of every read command, described once: a contract for scripts.

Each shape is a TypedDict whose keys carry their meaning (``Annotated[type, "meaning"]``).
``docs/JSON.md`` is generated from here (``python -m meshctl.app.shapes.doc > docs/JSON.md``; a
test fails when they drift) and a contract test runs every command with ``-o json`` and
validates what it printed strictly against its shape: no key missing or extra, the right
types, every time parseable. A document built outside the CLI keeps its shape beside the code
that builds it and is listed here all the same (``Status``: ``meshctl/controller/status.py``).

Conventions (every command): snake_case keys, the same key for the same thing everywhere
(``id`` is the object's own id, ``job_id`` / ``pool`` / ``node`` name another object); numbers,
booleans and lists as such, ``null`` where unknown; times as ISO-8601 UTC strings
(``jsondata.timestamp``) under keys ending in ``_at``; durations in seconds under keys ending in
``_s``; money in US dollars under keys naming ``usd``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from meshctl.app.shapes.base import ErrorDocument, WarningDocument
from meshctl.app.shapes.jobs import (
    CancelRow,
    ExplainPlan,
    ExplainStored,
    JobRow,
    JobShow,
    Submitted,
    WaitRow,
)
from meshctl.app.shapes.mesh import (
    LeakedInstance,
    NodeRow,
    NodeShow,
    PoolCheckRow,
    PoolRow,
    PoolShowExtra,
    ProviderAccelerator,
    ProviderHead,
    ProviderPrice,
    ProviderType,
    ReloadResult,
    ValidatedFile,
)
from meshctl.app.shapes.policy import PolicyDiff, PolicyFile, PolicyTestResult, VerdictData
from meshctl.app.shapes.queues import Queues
from meshctl.controller.status import Status


@dataclass(frozen=True, slots=True)
class Output:
    """What one command prints on stdout under ``-o json`` (``shape``: a TypedDict, or a list
    of one; None where ``note`` says what it is)."""

    command: str
    shape: Any
    note: str = ""


OUTPUTS: tuple[Output, ...] = (
    Output("meshctl status", Status),
    Output("meshctl queues", Queues),
    Output("meshctl pools list", list[PoolRow]),
    Output(
        "meshctl pools show POOL",
        PoolShowExtra,
        "Every key of the pool as mesh.yaml has it (`meshctl schema Mesh`: `spec.pools[]`, "
        "by provider), defaults filled in, and:",
    ),
    Output(
        "meshctl pools check",
        list[PoolCheckRow],
        "Exit 1 (with its error document) when a pool is unavailable; the rows still print.",
    ),
    Output("meshctl nodes list", list[NodeRow]),
    Output("meshctl nodes show NODE", NodeShow),
    Output("meshctl jobs list", list[JobRow]),
    Output("meshctl jobs show JOB", JobShow),
    Output("meshctl jobs wait JOB...", list[WaitRow]),
    Output("meshctl jobs cancel JOB...", list[CancelRow]),
    Output("meshctl submit", Submitted, "Also `meshctl train` (and `submit --dry-run`)."),
    Output("meshctl explain JOB", ExplainStored),
    Output("meshctl explain JOB.yaml", ExplainPlan),
    Output("meshctl policy validate", list[PolicyFile]),
    Output("meshctl policy test", list[PolicyTestResult]),
    Output("meshctl policy explain JOB.yaml", VerdictData),
    Output(
        "meshctl policy diff",
        PolicyDiff,
        "With `--exit-code`: exit 1 when `moved` is above 0. `-o markdown` prints the same as a "
        "pull-request comment.",
    ),
    Output("meshctl providers list", list[ProviderType]),
    Output("meshctl providers prices", list[ProviderPrice]),
    Output("meshctl providers heads", list[ProviderHead]),
    Output("meshctl providers accelerators", list[ProviderAccelerator]),
    Output("meshctl validate PATH...", list[ValidatedFile]),
    Output("meshctl gc", list[LeakedInstance], "With or without `--dry-run`."),
    Output(
        "meshctl reload",
        ReloadResult,
        "Once the controller has answered; a refused change is an error document (exit 2).",
    ),
    Output(
        "meshctl schema KIND",
        None,
        "A JSON Schema (draft 2020-12) of the file kind, with `$schema` and `$id`.",
    ),
)

# On stderr under -o json|yaml: JSON lines, warnings first, then at most one error document.
STDERR: tuple[Output, ...] = (
    Output("error", ErrorDocument, "One per failing command, whatever its exit code."),
    Output("warning", WarningDocument, "One per warning; the command goes on (exit 0)."),
)
