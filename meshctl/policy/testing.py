"""Running policy tests: each case's job against the policies, compared with what it expects.

Pure: the caller loads the files and gives the mesh's pool capacities; nothing here reads.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from meshctl.model.job import Job
from meshctl.model.meshstate import MeshState, MeshStateSpec, Moment
from meshctl.model.policytest import Case, CaseJob, Expect, PolicyTest
from meshctl.policy.compiled import PolicySet
from meshctl.policy.evaluate import bind
from meshctl.policy.facts import MeshSnapshot, VictimFacts
from meshctl.policy.verdict import Verdict

SnapshotOf = Callable[[MeshState], MeshSnapshot]


@dataclass(frozen=True, slots=True)
class CaseResult:
    path: str  # the test's file
    line: int  # where the case starts in it
    name: str
    failures: tuple[str, ...]

    @property
    def test(self) -> str:
        """``file:line`` of the case."""
        return f"{self.path}:{self.line}"

    @property
    def passed(self) -> bool:
        return not self.failures


_CASE_ONLY = {"name", "labels", "metadata", "pool", "runtime_s", "since_checkpoint_s", "priority"}


def as_job(spec: CaseJob) -> Job:
    fields = spec.model_dump(exclude=_CASE_ONLY)
    metadata = {"name": spec.job_name, "labels": spec.job_labels}
    return Job.model_validate({"metadata": metadata, "spec": fields})


def _moment(test: PolicyTest, case: Case) -> MeshState:
    merged: Moment = case.state.over(test.spec.state)
    spec = MeshStateSpec.model_validate(merged.model_dump(exclude_unset=True))
    return MeshState.model_validate({"metadata": {"name": "case"}, "spec": spec})


def _same_set(what: str, got: Sequence[str], want: Sequence[str] | None) -> list[str]:
    if want is None or sorted(got) == sorted(want):
        return []
    return [f"{what}: expected {sorted(want)}, got {sorted(got)}"]


def _equal(what: str, got: Any, want: Any) -> list[str]:
    return [] if want is None or got == want else [f"{what}: expected {want!r}, got {got!r}"]


def check(verdict: Verdict, expect: Expect) -> list[str]:
    """Every way ``verdict`` differs from ``expect``, one line each."""
    burst = verdict.burst
    not_denied = [p for p in expect.denied or () if p in verdict.eligible_pools]
    failures = [
        *_same_set("eligible", verdict.eligible_pools, expect.eligible),
        *_same_set("usable", verdict.usable_pools, expect.usable),
        *([f"denied: expected {not_denied} not eligible, but they are"] if not_denied else []),
        *_equal("burst", burst.allowed, expect.burst),
        *_same_set("burst_pools", [t.pool for t in burst.targets], expect.burst_pools),
        *_equal("priority", verdict.priority, expect.priority),
        *_equal("priority_class", verdict.priority_class, expect.priority_class),
        *_equal("quota", verdict.quota.state, expect.quota),
    ]
    if expect.spot is not None and any(t.spot != expect.spot for t in burst.targets):
        failures.append(
            f"spot: expected {expect.spot} on every burst target, got "
            f"{ {t.pool: t.spot for t in burst.targets} }"
        )
    if expect.max_usd_per_hour is not None:
        limits = {t.pool: t.max_usd_per_hour for t in burst.targets}
        if any(v != expect.max_usd_per_hour for v in limits.values()) or not limits:
            failures.append(f"max_usd_per_hour: expected {expect.max_usd_per_hour}, got {limits}")
    states = {b.name: b.state for b in verdict.budgets}
    for name, want in (expect.budgets or {}).items():
        failures += _equal(f"budget {name}", states.get(name, "undefined"), want)
    return failures


def run_case(
    policies: PolicySet, test: PolicyTest, case: Case, snapshot_of: SnapshotOf
) -> list[str]:
    now = case.now or test.spec.now
    now = now.replace(tzinfo=dt.UTC) if now.tzinfo is None else now  # a bare time is UTC
    bound = bind(policies, snapshot_of(_moment(test, case)), now)
    job = as_job(case.job)
    verdict = bound.evaluate(job)
    failures = check(verdict, case.expect)
    failures += [
        f"runtime error in {e.rule}.{e.part}: {e.message}; failing closed: {e.effect}"
        for e in verdict.errors
    ]
    if case.victim is not None and (case.expect.preempt is not None or case.expect.grace_s):
        victim_job = as_job(case.victim)
        victim_priority = case.victim.priority
        if victim_priority is None:
            _, victim_priority, _ = bound.priority_of(victim_job)
        facts = VictimFacts(
            victim_job,
            victim_priority,
            case.victim.pool,
            case.victim.runtime_s,
            case.victim.since_checkpoint_s,
        )
        decided = bound.may_preempt(job, facts)
        failures += _equal("preempt", decided.allowed, case.expect.preempt)
        if case.expect.grace_s is not None and decided.allowed:
            failures += _equal("grace_s", decided.grace_s, case.expect.grace_s)
        if failures and case.expect.preempt is not None and decided.allowed != case.expect.preempt:
            failures[-1] += f" ({decided.reason})"
    return failures


def run_tests(
    policies: PolicySet,
    tests: Sequence[tuple[str, PolicyTest, Callable[..., int]]],
    snapshot_of: Callable[[PolicyTest], SnapshotOf],
) -> list[CaseResult]:
    """All cases of all tests; ``line_of(*loc)`` gives the line of a key in the test's file."""
    results = []
    for path, test, line_of in tests:
        make = snapshot_of(test)
        for i, case in enumerate(test.spec.cases):
            failures = tuple(run_case(policies, test, case, make))
            results.append(CaseResult(path, line_of("spec", "cases", i), case.name, failures))
    return results
