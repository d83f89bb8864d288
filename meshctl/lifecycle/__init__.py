"""The one lifecycle (pure core): what the controller and the simulator both decide with.

Between the scheduler (a snapshot and policies in, a plan out) and the two that run jobs, the
controller (``meshctl.controller``: I/O, Ray, the store) and the simulator (``meshctl.sim``:
an event heap and models of the world), this package holds everything that decides and that
both would otherwise write twice:

- ``snapshot``: the scheduler's snapshot: nodes from their shapes, offers at the price paid
  and their caps, pool facts, running jobs with their expected ends and latest checkpoints,
  waiting jobs with their runtimes and the nodes being freed for them;
- ``estimates``: a job's runtime, declared or estimated from its team's recent runs;
- ``waits``: the expected wait per pool and priority, forecast from the work ahead;
- ``view``: what the policies see (capacity, waits, spend, victims), bound per priority;
- ``effects`` and ``actions``: what a plan and the world's events do to jobs: grace and stop
  margins, checkpoint or not, requeue or fail by max_restarts, deadlines, maximum runtimes;
- ``teardown``: which idle cloud instances go;
- ``ledger``: the monthly spend at the price paid;
- ``lending``: the loans of elastic jobs to higher-priority work, the lender's size, its
  growth back;
- ``serving``: a service's replica count from its traffic (target, upscale and downscale
  delays).

No I/O, no clock, no Ray or cloud SDK: an import-linter contract says so.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from meshctl.lifecycle.actions import (
        Action,
        BudgetCrossed,
        Fail,
        Launch,
        Leave,
        Left,
        Replace,
        Requeue,
        Start,
        Teardown,
    )
    from meshctl.lifecycle.estimates import Estimate, Estimator
    from meshctl.lifecycle.ledger import Charge, Ledger, Spend
    from meshctl.lifecycle.waits import UNBOUNDED_WAIT_S, Backlog, Waits

# The names above, imported on first use (PEP 562): importing one module of the lifecycle
# (a job's ``meshctl.workload`` reads ``datacache``) does not import the scheduler and the
# policy engine behind ``actions``.
_WHERE = {
    "Action": "actions",
    "Backlog": "waits",
    "BudgetCrossed": "actions",
    "Charge": "ledger",
    "Estimate": "estimates",
    "Estimator": "estimates",
    "Fail": "actions",
    "Launch": "actions",
    "Leave": "actions",
    "Ledger": "ledger",
    "Left": "actions",
    "Replace": "actions",
    "Requeue": "actions",
    "Spend": "ledger",
    "Start": "actions",
    "Teardown": "actions",
    "UNBOUNDED_WAIT_S": "waits",
    "Waits": "waits",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


__all__ = [
    "UNBOUNDED_WAIT_S",
    "Action",
    "Backlog",
    "BudgetCrossed",
    "Charge",
    "Estimate",
    "Estimator",
    "Fail",
    "Launch",
    "Leave",
    "Ledger",
    "Left",
    "Replace",
    "Requeue",
    "Spend",
    "Start",
    "Teardown",
    "Waits",
]
