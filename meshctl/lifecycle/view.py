"""What the policies see of the mesh, built the one way for the controller and the simulator.

- capacity: per pool, the GPUs of its nodes that are up, and the GPUs free on the nodes that
  take work now (ready: not cordoned, draining, unhealthy or down);
- waits: the forecast of ``waits.py``, per priority: a job sees the wait of the work ahead of
  it, so the policies are bound once per priority that asks (``ByPriority``);
- spend: this calendar month's, per pool and per team, from the ledger (``ledger.py``);
- victims: a running job's runtime and the time since its latest checkpoint (recorded by the
  controller, planned by the simulator's model of the job).

Pure: no I/O, no clock (the moment is an argument).
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from meshctl.lifecycle.actions import BudgetCrossed
from meshctl.lifecycle.waits import Waits
from meshctl.model.job import Job
from meshctl.policy.compiled import PolicySet
from meshctl.policy.evaluate import KeptAnswers, bind
from meshctl.policy.facts import MeshSnapshot, VictimFacts, observed
from meshctl.policy.tenancy import BudgetStanding, budget_standings
from meshctl.policy.verdict import Verdict, VictimVerdict
from meshctl.scheduler import FromPolicyEngine, Node, Permissive, PolicyView, Running


class Capacity:
    """Per pool: GPUs up (every node not down) and GPUs free on nodes that take work now.
    Kept as nodes come, change and go (``add`` and ``remove`` the same node view), or built
    at once (``of``)."""

    def __init__(self) -> None:
        self._total: dict[str, float] = defaultdict(float)
        self._free: dict[str, float] = defaultdict(float)

    @classmethod
    def of(cls, nodes: Iterable[Node]) -> Capacity:
        found = cls()
        for node in nodes:
            found.add(node)
        return found

    def add(self, node: Node, sign: float = 1.0) -> None:
        if node.health != "down":
            self._total[node.pool] += sign * node.gpus
        if node.health == "ready":
            self._free[node.pool] += sign * sum(node.gpu_free)

    def remove(self, node: Node) -> None:
        self.add(node, -1.0)

    def of_pools(self, pools: Iterable[str]) -> dict[str, tuple[float, float]]:
        """(GPUs up, GPUs free) for each of ``pools``; (0, 0) for one with no node up."""
        # rounded: sums of shares added and taken away leave crumbs (0.1 + 0.2 - 0.3)
        return {
            p: (round(self._total.get(p, 0.0), 9), round(self._free.get(p, 0.0), 9)) for p in pools
        }


def facts(
    configured: MeshSnapshot,
    capacity: Mapping[str, tuple[float, float]],
    waits: Mapping[str, float],
    queued: int,
    spend: Mapping[str, float],
    team_spend: Mapping[str, float],
) -> MeshSnapshot:
    """The configured pools as they are now: a pool with nodes up takes its GPUs, free GPUs
    and the queue from ``capacity``; one with none keeps what its file says."""
    up = {pool: int(total) for pool, (total, _) in capacity.items() if total > 0}
    free = {pool: free for pool, (_, free) in capacity.items()}
    return observed(configured, free, up, queued, waits, spend, team_spend)


class Victims(Mapping[str, VictimFacts]):
    """A running job as a preemption rule sees it, built only for those a rule asks about.
    ``running``: each running job by id (any mapping of what holds one: ``of`` says how to
    get the ``Running`` from it)."""

    def __init__(
        self,
        running: Mapping[str, Any],
        jobs: Mapping[str, Job],
        now_s: float,
        of: Callable[[Any], Running] = lambda held: held,
    ) -> None:
        self.running, self.jobs, self.now_s, self.of = running, jobs, now_s, of

    def __getitem__(self, job_id: str) -> VictimFacts:
        job = self.of(self.running[job_id])
        checkpointed = job.checkpointed_at(self.now_s)
        since = checkpointed if checkpointed is not None else job.started_at_s
        return VictimFacts(
            self.jobs[job_id],
            job.priority,
            job.pool,
            max(0.0, self.now_s - job.started_at_s),
            max(0.0, self.now_s - since),
        )

    def __iter__(self) -> Iterator[str]:
        return iter(self.running)

    def __len__(self) -> int:
        return len(self.running)


@dataclass(frozen=True, slots=True)
class MeshView:
    """What is bound to the policies for one cycle, but for the waits (per priority)."""

    configured: MeshSnapshot
    capacity: Mapping[str, tuple[float, float]]
    waits: Waits
    queued: int
    spend: Mapping[str, float]
    team_spend: Mapping[str, float]

    def facts(self, priority: int | None = None) -> MeshSnapshot:
        """The mesh a job of ``priority`` sees (None: the back of the queue)."""
        waits = self.waits.lowest() if priority is None else self.waits.of(priority)
        return facts(
            self.configured, self.capacity, waits, self.queued, self.spend, self.team_spend
        )


class ByPriority:
    """The scheduler's policy view: policies bound to the mesh a job of each priority sees
    (bound once per priority that asks, when it first asks); verdicts per job file."""

    def __init__(
        self,
        policies: PolicySet,
        mesh: MeshView,
        now: dt.datetime,
        jobs: Mapping[str, Job],
        priorities: Callable[[str], int],
        victims: Mapping[str, VictimFacts],
        answers: KeptAnswers | None = None,
    ) -> None:
        self.policies, self.mesh, self.now = policies, mesh, now
        self.jobs, self.priority_of, self.victims = jobs, priorities, victims
        self.answers = answers or KeptAnswers()  # one for every binding
        self.weights, self.packing = policies.weights, policies.packing
        self.pool_preference, self.quotas = policies.pool_preference, policies.quotas
        self.reclaim = policies.reclaim
        self._engines: dict[tuple[tuple[str, float], ...], FromPolicyEngine] = {}
        self._of_priority: dict[int, FromPolicyEngine] = {}

    def engine(self, priority: int) -> FromPolicyEngine:
        """The policies as a job of ``priority`` sees the mesh. Priorities that see the same
        waits (or all, when no rule reads a wait) share one binding."""
        found = self._of_priority.get(priority)
        if found is not None:
            return found
        waits = self.mesh.waits.of(priority)
        key = tuple(sorted(waits.items())) if self.policies.reads_waits else ()
        found = self._engines.get(key)
        if found is None:
            bound = bind(self.policies, self.mesh.facts(priority), self.now, self.answers)
            found = self._engines[key] = FromPolicyEngine(bound, self.jobs, self.victims)
        self._of_priority[priority] = found
        return found

    def verdict(self, job_id: str) -> Verdict | None:
        return self.engine(self.priority_of(job_id)).verdict(job_id)

    def may_preempt(self, job_id: str, victim_job_id: str) -> VictimVerdict | None:
        return self.engine(self.priority_of(job_id)).may_preempt(job_id, victim_job_id)


def budgets(policies: PolicySet | None, mesh: MeshView) -> tuple[BudgetStanding, ...]:
    """Where each budget stands this month (spend does not depend on the priority)."""
    if policies is None or not policies.budgets:
        return ()
    return budget_standings(policies.budgets, mesh.facts())


def policy_view(
    policies: PolicySet | None,
    mesh: MeshView,
    now: dt.datetime,
    jobs: Mapping[str, Job],
    priorities: Callable[[str], int],
    victims: Mapping[str, VictimFacts],
    answers: KeptAnswers | None = None,
) -> PolicyView:
    """The scheduler's view of the policies for one cycle (``Permissive`` without any);
    ``answers``: the policies' answers kept from the caller's last cycle, if it keeps them
    (``evaluate.KeptAnswers``); the view is the same with or without."""
    if policies is None:
        return Permissive()
    return ByPriority(policies, mesh, now, jobs, priorities, victims, answers)


def budget_crossings(
    before: Mapping[str, str], standings: Iterable[BudgetStanding]
) -> list[BudgetCrossed]:
    """The budgets whose standing differs from ``before`` (by name; a budget not in it was
    ``ok``): a warning, an exhaustion, or back to ok (a new month)."""
    return [
        BudgetCrossed(b.name, b.scope, b.state, b.spent_usd, b.limit_usd)
        for b in standings
        if b.state != before.get(b.name, "ok")
    ]
