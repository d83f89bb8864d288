"""Pools the snapshot marks unavailable ("no credentials", an auth error) and what that means
for a job: it may use none of them now (no placement, preemption, burst or backfill there),
its nodes tell the filters why, and a job that waits for one says so
("gcp-spill: no credentials"). Built once per cycle; pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from meshctl.policy.verdict import Verdict
from meshctl.scheduler.framework import CycleContext, Rejection
from meshctl.scheduler.snapshot import Snapshot

NAME = "availability"


@dataclass(frozen=True, slots=True)
class Availability:
    every: frozenset[str]  # every pool of the snapshot: what a job without a verdict may use
    down: Mapping[str, str]  # unavailable pool -> why
    names: frozenset[str]  # the unavailable pools
    told: Mapping[str, Rejection]  # what an unavailable pool's nodes are told

    @classmethod
    def of(cls, snap: Snapshot, every: frozenset[str]) -> Availability:
        down = {p.name: p.unavailable for p in snap.pools if p.unavailable is not None}
        told = {
            name: Rejection(NAME, f"are in pool {name}, unavailable: {why}")
            for name, why in down.items()
        }
        return cls(every, down, frozenset(down), told)

    def pools(
        self, verdict: Verdict | None
    ) -> tuple[frozenset[str], frozenset[str], frozenset[str]]:
        """(asked, usable, eligible): the pools the policies let the job use now, those of
        them available now, and those it may ever use."""
        if verdict is None:
            asked, eligible = self.every, self.every
        else:
            asked, eligible = frozenset(verdict.usable_pools), frozenset(verdict.eligible_pools)
        return asked, (asked - self.names if self.down else asked), eligible

    def why(self, pools: frozenset[str]) -> str | None:
        """Which of ``pools`` are unavailable, and why: "gcp-spill: no credentials"."""
        if not self.down:
            return None
        found = [f"{p}: {self.down[p]}" for p in sorted(pools) if p in self.down]
        return "; ".join(found) or None

    def context(
        self,
        base: CycleContext,
        usable: frozenset[str],
        eligible: frozenset[str],
        runtime_s: float | None = None,
    ) -> CycleContext:
        """``base`` for a job that may use ``usable`` now and runs ``runtime_s`` (what its
        data's egress is spread over); the unavailable ones of ``eligible`` tell the filters
        why their nodes are out."""
        if not self.down:
            return base.for_job(usable, runtime_s=runtime_s)
        told = {p: self.told[p] for p in eligible if p in self.down}
        return base.for_job(usable, told, runtime_s)
