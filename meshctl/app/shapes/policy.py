"""Policies: validate, test and explain (the policy engine's verdict for one job)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import with_config
from typing_extensions import TypedDict

from meshctl.jsontypes import STRICT


@with_config(STRICT)
class PolicyFile(TypedDict):
    file: str
    policy: Annotated[str, "its metadata.name"]
    rules: Annotated[int, "pool, burst and preemption rules"]
    classes: Annotated[int, "priority classes"]
    quotas: int
    budgets: int
    policy_hash: Annotated[str, "the hash of the whole set these files make (content only)"]


@with_config(STRICT)
class PolicyTestResult(TypedDict):
    file: str
    line: Annotated[int | None, "where the case starts"]
    name: str
    passed: bool
    failures: Annotated[list[str], "what differed from the case's expectations"]


@with_config(STRICT)
class PoolVerdictData(TypedDict):
    pool: str
    eligible: Annotated[bool, "policy lets the job use it at all"]
    usable: Annotated[bool, "eligible, and on-prem or a burst target now"]
    rule: Annotated[str | None, "the rule that decided"]
    reason: str


@with_config(STRICT)
class BurstTargetData(TypedDict):
    pool: str
    spot: bool
    max_usd_per_hour: float | None
    rules: list[str]


@with_config(STRICT)
class BlockedData(TypedDict):
    pool: str
    reason: Annotated[str, "the budget or rule that removed it"]


@with_config(STRICT)
class BurstData(TypedDict):
    allowed: bool
    rules: list[str]
    targets: list[BurstTargetData]
    blocked: list[BlockedData]


@with_config(STRICT)
class PreemptionData(TypedDict):
    allowed: bool
    rules: list[str]
    grace_s: float
    min_runtime_s: float


@with_config(STRICT)
class QuotaData(TypedDict):
    team: str
    state: Literal["no-quota", "within", "borrowing", "over"]
    nominal_gpus: float | None
    used_gpus: float
    requested_gpus: float
    borrowable_gpus: float
    cohort: str | None
    reason: str


@with_config(STRICT)
class BudgetData(TypedDict):
    name: str
    scope: Annotated[str, "pool:NAME, provider:NAME or team:NAME"]
    spent_usd: float
    limit_usd: float
    state: Literal["ok", "warn", "exceeded"]


@with_config(STRICT)
class WeightsData(TypedDict):
    cost: float
    wait: float
    locality: float
    topology: float
    fragmentation: float


@with_config(STRICT)
class TraceData(TypedDict):
    section: Annotated[str, "pools, burst, preemption, priority, ..."]
    rule: str
    origin: Annotated[str, "file:line of the rule"]
    part: Annotated[str, "when, allow, deny, to, victims, ..."]
    expression: str
    outcome: Literal["matched", "not matched", "error", "skipped"]
    pool: str | None
    detail: Annotated[str | None, "the sub-expression that decided, or the error"]


@with_config(STRICT)
class RuleErrorData(TypedDict):
    section: Annotated[str, "pools, burst or preemption"]
    rule: str
    part: Annotated[str, "when, allow, deny, to or victims"]
    file: str
    line: Annotated[int, "the line of the failing part"]
    pools: Annotated[list[str], "the pools a selector failed for; empty for when"]
    message: str
    effect: Annotated[str, "what failing closed did"]


@with_config(STRICT)
class VerdictData(TypedDict):
    job: Annotated[str, "the job file's name"]
    policy_hash: str
    priority_class: str | None
    priority: int
    priority_problem: Annotated[str | None, "e.g. an undefined priority class"]
    pools: list[PoolVerdictData]
    burst: BurstData
    preemption: PreemptionData
    quota: QuotaData
    budgets: list[BudgetData]
    weights: WeightsData
    packing: Literal["binpack", "spread"]
    pool_preference: list[str]
    trace: Annotated[list[TraceData], "every rule evaluated, in order, matched or not"]
    errors: Annotated[
        list[RuleErrorData], "rule parts that could not be evaluated (the engine failed closed)"
    ]


@with_config(STRICT)
class SetData(TypedDict):
    policies: Annotated[str, "the folder, a git ref and folder, or the controller's"]
    policy_hash: str


@with_config(STRICT)
class WindowData(TypedDict):
    start_at: Annotated[str, "the history's start (a trace's: its first second, epoch 0)"]
    end_at: str
    days: float


@with_config(STRICT)
class SpendData(TypedDict):
    base: float
    head: float


@with_config(STRICT)
class CrossingsData(TypedDict):
    base: int
    head: int


@with_config(STRICT)
class FidelityData(TypedDict):
    jobs_that_ran: Annotated[int, "jobs that really ran and that the base replay ran"]
    same_pool: int
    same_pool_share: Annotated[float, "of them, the share replayed in the pool they ran in"]
    start_error_p50_s: Annotated[float, "replayed first start minus the real one, absolute"]
    start_error_p95_s: float
    start_error_max_s: float


@with_config(STRICT)
class PoolHoursData(TypedDict):
    pool: str
    gpu_hours: float


@with_config(STRICT)
class GroupSideData(TypedDict):
    cloud_gpu_hours: Annotated[list[PoolHoursData], "GPU-hours held in each cloud pool"]
    spend_usd_per_month: Annotated[float, "its jobs' cloud GPU-hours at each pool's price"]
    wait_p50_s: float
    wait_p95_s: float
    preemptions: int
    refused: int


@with_config(STRICT)
class GroupData(TypedDict):
    team: str
    priority_class: Annotated[str, "as the policies gave it, else `priority N`"]
    jobs: int
    moved: int
    base: GroupSideData
    head: GroupSideData


@with_config(STRICT)
class OutcomeData(TypedDict):
    pool: Annotated[str | None, "where it last ran; null: it never started"]
    wait_s: float | None
    cost_usd: float
    preempted: bool
    refused: Annotated[str | None, "why it was refused for good"]


@with_config(STRICT)
class ChangeData(TypedDict):
    job_id: str
    team: str
    priority_class: str
    base: OutcomeData
    head: OutcomeData
    rules: Annotated[list[str], "the rules that decide differently for it, as explain names them"]


@with_config(STRICT)
class LeftOutData(TypedDict):
    reason: str
    jobs: int


@with_config(STRICT)
class PolicyDiff(TypedDict):
    base: SetData
    head: SetData
    source: Annotated[str, "`history`, or `trace NAME`"]
    window: WindowData
    jobs_compared: int
    left_out: Annotated[list[LeftOutData], "jobs not replayed, and why (services, cancelled)"]
    moved: Annotated[int, "jobs whose pool, refusal, preemption or start differs"]
    spend_usd_per_month: Annotated[SpendData, "the simulator's cloud bill, per 30 days"]
    spend_delta_usd_per_month: Annotated[float, "head minus base"]
    budget_crossings: CrossingsData
    fidelity: Annotated[FidelityData | None, "the base replay against the record; null: a trace"]
    groups: Annotated[list[GroupData], "per team and priority class"]
    changes: Annotated[list[ChangeData], "every job that moves"]
