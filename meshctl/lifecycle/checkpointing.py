"""How often to checkpoint: Young/Daly's interval, shared by the jobs meshctl runs
(``meshctl.workload.train``) and the simulator (``meshctl.sim``), so both use one function.

A job that writes a checkpoint every ``T`` seconds of computing, each costing ``C`` seconds,
on hardware that fails on average every ``M`` seconds, spends ``C / T`` of its time on
checkpoints and loses about ``T / 2`` of work per failure. The sum is least at
``T = sqrt(2 * C * M)``, to first order in ``C / M`` (J. W. Young, "A first order
approximation to the optimum checkpoint interval", CACM 17(9), 1974; J. T. Daly, "A higher
order estimate of the optimum checkpoint interval for restart dumps", FGCS 22(3), 2006, which
refines it to higher order; the first-order form is close while ``C`` is small beside ``M``).

The result is clamped to ``[MIN_INTERVAL_S, MAX_INTERVAL_S]``: a checkpoint measured as free
(``C = 0``) would otherwise give an interval of zero, a checkpoint at every step; an MTBF that
is huge or barely observed (a pool with few failures seen) would give an interval without
bound, so that one failure could cost days of work. Six hours caps what one failure loses.

Pure: the standard library's ``math`` only.
"""

from __future__ import annotations

import math

__all__ = ["MAX_INTERVAL_S", "MIN_INTERVAL_S", "young_daly"]

MIN_INTERVAL_S = 1.0
MAX_INTERVAL_S = 6 * 3600.0


def young_daly(checkpoint_cost_s: float, mtbf_s: float) -> float:
    """The checkpoint interval that minimises expected lost work plus checkpoint overhead,
    to first order (Young 1974, Daly 2006): sqrt(2 * C * MTBF), clamped to [1 s, 6 h]."""
    interval = math.sqrt(2.0 * max(checkpoint_cost_s, 0.0) * max(mtbf_s, 0.0))
    return min(max(interval, MIN_INTERVAL_S), MAX_INTERVAL_S)
