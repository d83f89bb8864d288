"""What the scheduler asks of the policies: verdicts per job, preemption per victim, weights.

``Permissive`` is a mesh without policy files: every pool eligible, no bursting, no
preemption, no quotas unless given (a test's: their reclaim needs no preemption rule).
``FromPolicyEngine`` answers from ``meshctl.policy`` for real jobs, evaluating each job once
per cycle.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from meshctl.model.job import Job
from meshctl.model.policy import Reclaim, TeamQuota, Weights
from meshctl.policy.evaluate import BoundPolicies
from meshctl.policy.facts import VictimFacts
from meshctl.policy.verdict import Verdict, VictimVerdict


class PolicyView(Protocol):
    weights: Weights
    packing: str
    pool_preference: tuple[str, ...]
    quotas: Mapping[str, TeamQuota]
    reclaim: Reclaim

    def verdict(self, job_id: str) -> Verdict | None:
        """The job's verdict, or None when no policy speaks (every pool allowed, no burst)."""
        ...

    def may_preempt(self, job_id: str, victim_job_id: str) -> VictimVerdict | None:
        """Whether the job may take the victim's GPUs; None: no preemption at all."""
        ...


@dataclass
class Permissive:
    weights: Weights = field(default_factory=Weights)
    packing: str = "binpack"
    pool_preference: tuple[str, ...] = ()
    quotas: Mapping[str, TeamQuota] = field(default_factory=dict)
    reclaim: Reclaim = field(default_factory=Reclaim)

    def verdict(self, job_id: str) -> Verdict | None:
        return None

    def may_preempt(self, job_id: str, victim_job_id: str) -> VictimVerdict | None:
        return None


class FromPolicyEngine:
    """Verdicts from bound policies for the jobs of one cycle, each computed once.

    Answers depend only on the job object (and the bound mesh), so jobs that share one
    ``Job`` object (a queue of identical jobs, parsed once by the controller) share them."""

    def __init__(
        self, bound: BoundPolicies, jobs: Mapping[str, Job], victims: Mapping[str, VictimFacts]
    ) -> None:
        self.bound, self.jobs, self.victims = bound, jobs, victims
        policies = bound.policies
        self.weights, self.packing = policies.weights, policies.packing
        self.pool_preference, self.quotas = policies.pool_preference, policies.quotas
        self.reclaim = policies.reclaim
        self._verdicts: dict[int, Verdict] = {}  # by id() of the Job object
        self._preemptions: dict[tuple[int, str], VictimVerdict] = {}

    def verdict(self, job_id: str) -> Verdict | None:
        job = self.jobs[job_id]
        found = self._verdicts.get(id(job))
        if found is None:
            found = self._verdicts[id(job)] = self.bound.evaluate(job)
        return found

    def may_preempt(self, job_id: str, victim_job_id: str) -> VictimVerdict | None:
        victim = self.victims.get(victim_job_id)
        if victim is None:
            return None
        job = self.jobs[job_id]
        key = (id(job), victim_job_id)
        found = self._preemptions.get(key)
        if found is None:
            found = self._preemptions[key] = self.bound.may_preempt(job, victim)
        return found
