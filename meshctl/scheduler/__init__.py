"""The scheduler (pure core): snapshot + policies -> plan, every decision explained.

    plan = schedule(snapshot, policies)     # policies: a PolicyView (FromPolicyEngine, Permissive)

See README.md for the vocabulary and cycle.py for the order of the stages.
"""

from __future__ import annotations

from meshctl.scheduler.config import SchedulerConfig
from meshctl.scheduler.cycle import schedule
from meshctl.scheduler.layout import Layout
from meshctl.scheduler.plan import (
    Decision,
    Evict,
    Grow,
    Place,
    Plan,
    Preempt,
    Provision,
    Shrink,
)
from meshctl.scheduler.policies import FromPolicyEngine, Permissive, PolicyView
from meshctl.scheduler.request import Request
from meshctl.scheduler.snapshot import Allocation, Node, Offer, Pending, PoolInfo, Running, Snapshot

__all__ = [
    "Allocation",
    "Decision",
    "Evict",
    "FromPolicyEngine",
    "Grow",
    "Layout",
    "Node",
    "Offer",
    "Pending",
    "Permissive",
    "Place",
    "Plan",
    "PolicyView",
    "PoolInfo",
    "Preempt",
    "Provision",
    "Request",
    "Running",
    "SchedulerConfig",
    "Shrink",
    "Snapshot",
    "schedule",
]
