"""The policy engine (pure core): compile policy files once, evaluate them for many jobs.

    policies = compile_policies(sources)         # every problem of every file at once
    bound = bind(policies, snapshot, now)        # pool-only selectors evaluated here, once
    verdict = bound.evaluate(job)                # pools, burst, priority, quota, budgets, trace

See README.md in this folder for how several files combine.
"""

from __future__ import annotations

from meshctl.policy.compiled import PolicySet, Source, compile_policies
from meshctl.policy.evaluate import BoundPolicies, bind
from meshctl.policy.facts import MeshSnapshot, PoolFacts, TeamUsage, VictimFacts, mesh_snapshot
from meshctl.policy.verdict import Verdict

__all__ = [
    "BoundPolicies",
    "MeshSnapshot",
    "PolicySet",
    "PoolFacts",
    "Source",
    "TeamUsage",
    "Verdict",
    "VictimFacts",
    "bind",
    "compile_policies",
    "mesh_snapshot",
]
