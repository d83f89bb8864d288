"""Why a job was evicted or preempted, as a label: one of a few names, never free text.

The controller records the reason of a transition as the event's message, in words that name
nodes and jobs (``node gpu-3 is unhealthy: XID 79``). A metric labelled with that text would
grow a series per node and per job; these tables map it onto a bounded set of names, written
as Kueue writes its reasons (CamelCase). What no row matches is ``Other``. The rows follow the
words of ``meshctl.lifecycle.effects`` and ``meshctl.controller.deciding.states``; a test feeds each
producer's words through ``classify`` so the two cannot drift apart. Pure.
"""

from __future__ import annotations

import re
from typing import Final

OTHER: Final = "Other"

# (pattern matched at the start of the message, reason)
EVICTED: Final[tuple[tuple[re.Pattern[str], str], ...]] = (
    (re.compile(r"node \S+ is unhealthy"), "NodeUnhealthy"),
    (re.compile(r"node \S+ is dead|its node died"), "NodeDied"),
    (re.compile(r"node \S+ drained"), "NodeDrained"),
    (re.compile(r"pool \S+ lost the job"), "PoolLost"),
    (re.compile(r"its driver was killed"), "DriverKilled"),
    (re.compile(r"no progress report for"), "Hung"),
)
PREEMPTED: Final[tuple[tuple[re.Pattern[str], str], ...]] = (
    # a team below its quota takes back what it lent (``scheduler.reclaim``; Kueue's name)
    (re.compile(r"for \S+ \(reclaimed for team "), "InCohortReclamation"),
    (re.compile(r"for \S+"), "Priority"),  # a higher-priority job needs its GPUs
    (re.compile(r"spot instance \S+ is being taken back"), "SpotNotice"),
    (re.compile(r"spot instance \S+ was taken back"), "SpotReclaimed"),
    (re.compile(r"lending \d+ node"), "Lending"),  # an elastic job lends nodes
    (re.compile(r"growing onto "), "Growing"),  # an elastic job stops to grow back
)

EVICTED_REASONS: Final = frozenset(r for _, r in EVICTED) | {OTHER}
PREEMPTED_REASONS: Final = frozenset(r for _, r in PREEMPTED) | {OTHER}


def classify(message: str, table: tuple[tuple[re.Pattern[str], str], ...]) -> str:
    """The reason of the first row whose pattern starts ``message``; ``Other`` if none."""
    for pattern, reason in table:
        if pattern.match(message):
            return reason
    return OTHER
