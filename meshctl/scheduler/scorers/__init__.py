"""Scorers, one small module each, every one in [0, 1] (higher is better).

The cycle weighs them with the policy's weights: packing (bin-pack or spread, weight 1),
cost, wait, locality, fragmentation. Topology compactness scores a whole gang, not a node, so
it lives in gang.py.
"""

from __future__ import annotations

from meshctl.scheduler.scorers.cost import CostScorer
from meshctl.scheduler.scorers.fragmentation import FragmentationScorer
from meshctl.scheduler.scorers.locality import LocalityScorer
from meshctl.scheduler.scorers.packing import BinPackScorer, SpreadScorer
from meshctl.scheduler.scorers.wait import WaitScorer

__all__ = [
    "BinPackScorer",
    "CostScorer",
    "FragmentationScorer",
    "LocalityScorer",
    "SpreadScorer",
    "WaitScorer",
]
