"""The controller's deciding half: what the world looks like -> what to do. Pure.

``decide(world, rules)`` runs the lifecycle's one cycle (``meshctl.lifecycle.cycle``, the
simulator's too) through the controller's side of it (``side.py``): every job brought in
line with what its pool reports, the jobs that must leave their nodes, the lifecycle's
limits (a deadline that came, a maximum runtime run past), one scheduling cycle, and last
the idle cloud instances; all of it written into a ``Step``. The loop (``loop.py``) applies
the step; a step applied twice does no harm, because every action is keyed by a
deterministic submission id or guarded by the record's version.
"""

from __future__ import annotations

from meshctl.controller.deciding.dispatch import pool_mtbf_s, submission
from meshctl.controller.deciding.leaving import (
    STOP_MARGIN_S,
    UNHEALTHY_GRACE_S,
)
from meshctl.controller.deciding.nodes import observed_nodes
from meshctl.controller.deciding.side import ControllerSide
from meshctl.controller.deciding.states import HOLDING
from meshctl.controller.deciding.step import (
    AttemptChange,
    CheckpointRequest,
    DecisionNote,
    Dispatch,
    Launch,
    NodeChange,
    Replacement,
    Resubmit,
    RuleError,
    Rules,
    Step,
    Stop,
    Teardown,
    Transition,
    launch_request_id,
    submission_id,
)
from meshctl.controller.deciding.world import World
from meshctl.lifecycle.cycle import cycle
from meshctl.state.records import FINISHED, QUEUED

__all__ = [  # what a step is, and the helpers, are read from here by the loop and the CLI
    "FINISHED",
    "HOLDING",
    "QUEUED",
    "STOP_MARGIN_S",
    "UNHEALTHY_GRACE_S",
    "AttemptChange",
    "CheckpointRequest",
    "DecisionNote",
    "Dispatch",
    "Launch",
    "NodeChange",
    "Replacement",
    "Resubmit",
    "RuleError",
    "Rules",
    "Step",
    "Stop",
    "Teardown",
    "Transition",
    "decide",
    "launch_request_id",
    "observed_nodes",
    "pool_mtbf_s",
    "submission",
    "submission_id",
]


def decide(world: World, rules: Rules) -> Step:
    step = Step()
    cycle(ControllerSide(world, rules, step), rules.policies, rules.config)
    return step
