"""The differential check: the same scenarios through the controller and the simulator.

The simulator promises that what it says is what production does; this is how that is held
to. A scenario (``scenario.py``) is run through the controller's real loop over fake pools,
the fake cloud and a virtual clock (``fakes.py``), and through the simulator's engine
cycling as the controller does: two adapters (``ControllerSide``, ``EngineSide``) of the one
cycle (``meshctl.lifecycle.cycle``). The actions both took must be the same (``run.py``).
``table.py`` holds the named scenarios and a seeded generator of more; the test suite runs
both, and ``benchmarks/differential.py --json`` counts them.
"""

from __future__ import annotations

from tests.differential.run import Outcome, run
from tests.differential.scenario import Cloud, Scenario

__all__ = ["Cloud", "Outcome", "Scenario", "run"]
