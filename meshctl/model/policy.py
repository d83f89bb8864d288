"""The policy file: routing and tenancy rules whose conditions are CEL expressions.

The model only holds the rules; ``meshctl.policy`` compiles the expressions and evaluates them.
How several files combine is documented in ``meshctl/policy/README.md``.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from meshctl.model.base import (
    DocumentModel,
    DurationS,
    MemoryGiBTotal,
    Model,
    Name,
    Percent,
    Usd,
    UsdPerHour,
)
from meshctl.model.job import JobKind

MAX_RULES_PER_FILE = 1000
# what the wait forecast assumes is left of a running job whose runtime nobody declared or
# estimated, unless the policies' ``forecast.unknown_runtime_s`` says otherwise: 2 h, long
# enough that a full pool of such jobs opens a burst gate of minutes
UNKNOWN_RUNTIME_S = 7200.0
Expression = Annotated[str, Field(min_length=1, description="a CEL expression")]


class Rule(Model):
    name: Name
    description: str = ""
    when: Expression = Field(
        "true", description="CEL over job, mesh and now: the jobs this rule applies to"
    )


class PoolRule(Rule):
    """Allow or deny pools for the jobs ``when`` selects. A deny always wins."""

    allow: Expression | None = Field(None, description="CEL over pool (and job): pools allowed")
    deny: Expression | None = Field(None, description="CEL over pool (and job): pools denied")
    reason: str = ""

    @model_validator(mode="after")
    def _one_effect(self) -> PoolRule:
        if (self.allow is None) == (self.deny is None):
            raise ValueError("a pool rule has exactly one of `allow` or `deny`")
        return self


class BurstRule(Rule):
    """Let the jobs ``when`` selects spill to the pools ``to`` selects."""

    to: Expression = Field(description="CEL over pool: the pools to burst to")
    spot: bool = Field(False, description="spot / preemptible capacity allowed")
    max_usd_per_hour: UsdPerHour | None = None


class PreemptionRule(Rule):
    """Jobs ``when`` selects may take GPUs from running jobs ``victims`` selects."""

    victims: Expression = Field(description="CEL over victim (and job)")
    grace_s: DurationS = Field(120.0, description="time the victim gets to checkpoint")
    min_runtime_s: DurationS = Field(
        0.0, description="a victim must have run this long since it (re)started"
    )


class PriorityClass(Model):
    name: Name
    value: Annotated[int, Field(ge=-1_000_000_000, le=1_000_000_000)]
    description: str = ""


class Team(Model):
    """A team the mesh knows, declared without a quota of its own (a team with a quota is
    known by it)."""

    name: Name
    description: str = ""


ReclaimMode = Literal["any", "lower-priority", "never"]


class TeamQuota(Model):
    team: Name
    cohort: Name | None = None
    gpus: Annotated[float, Field(ge=0, le=1_000_000)] = Field(description="nominal quota")
    gpu_memory_gib: MemoryGiBTotal | None = None
    borrowing_limit_gpus: Annotated[float, Field(ge=0)] | None = Field(
        None, description="most it may borrow from its cohort (default: unlimited)"
    )
    lending_limit_gpus: Annotated[float, Field(ge=0)] | None = Field(
        None, description="most of its unused quota others may borrow (default: all)"
    )
    reclaim: ReclaimMode = Field(
        "any",
        description="when the team is below its nominal quota and teams of its cohort run on"
        " borrowed GPUs, take them back from any of their jobs (any), only from jobs of lower"
        " priority than its own (lower-priority), or never (never); spec.reclaim says how",
    )


class Reclaim(Model):
    """How lent quota is taken back (``quotas[].reclaim``): the victims are the jobs of teams
    running beyond their own nominal quota, the least work lost first, those with no
    checkpoint last."""

    grace_s: DurationS = Field(120.0, description="time a reclaimed job gets to checkpoint")
    min_runtime_s: DurationS = Field(
        300.0, description="a job runs this long since it (re)started before it is reclaimed"
    )


class BudgetScope(Model):
    pool: Name | None = None
    provider: Literal["local", "ray", "aws", "gcp"] | None = None
    team: Name | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> BudgetScope:
        if sum(x is not None for x in (self.pool, self.provider, self.team)) != 1:
            raise ValueError("a budget scope names exactly one of pool, provider or team")
        return self

    @property
    def key(self) -> str:
        for kind in ("pool", "provider", "team"):
            value = getattr(self, kind)
            if value is not None:
                return f"{kind}:{value}"
        raise AssertionError("validated to name one")


class Budget(Model):
    name: Name
    scope: BudgetScope
    usd_per_month: Annotated[Usd, Field(gt=0, le=1e9)]
    soft_pct: Annotated[Percent, Field(gt=0)] = Field(
        80, description="warn when spend passes this share of the budget"
    )


class Weights(Model):
    cost: Annotated[float, Field(ge=0, le=100)] = 1.0
    wait: Annotated[float, Field(ge=0, le=100)] = 1.0
    locality: Annotated[float, Field(ge=0, le=100)] = 0.5
    topology: Annotated[float, Field(ge=0, le=100)] = 0.5
    fragmentation: Annotated[float, Field(ge=0, le=100)] = 0.25


class Scoring(Model):
    weights: Weights | None = None
    packing: Literal["binpack", "spread"] | None = None
    pool_preference: list[Name] | None = Field(None, description="pool names, most preferred first")


class Forecast(Model):
    """How the wait forecast (``mesh.pools.<name>.expected_wait_s``) counts what it does not
    know."""

    unknown_runtime_s: Annotated[DurationS, Field(gt=0)] | None = Field(
        None,
        description="a running job with no runtime declared or estimated is assumed to run at"
        " least this long more (or as long again as it has run, when that is longer)",
    )


class PolicySpec(Model):
    priority_classes: list[PriorityClass] = Field(default_factory=list)
    default_priority_class: dict[JobKind, Name] = Field(
        default_factory=dict, description="the class a job of this kind gets if it names none"
    )
    pools: list[PoolRule] = Field(default_factory=list)
    burst: list[BurstRule] = Field(default_factory=list)
    preemption: list[PreemptionRule] = Field(default_factory=list)
    teams: list[Team] = Field(
        default_factory=list,
        description="teams known without a quota; with quotas, every team a job may name",
    )
    quotas: list[TeamQuota] = Field(default_factory=list)
    budgets: list[Budget] = Field(default_factory=list)
    scoring: Scoring | None = None
    forecast: Forecast | None = None
    reclaim: Reclaim | None = Field(
        None, description="how a team below its quota takes back what it lent (defaults shown)"
    )

    @model_validator(mode="after")
    def _bounded(self) -> PolicySpec:
        rules = len(self.pools) + len(self.burst) + len(self.preemption)
        if rules > MAX_RULES_PER_FILE:
            raise ValueError(f"expected at most {MAX_RULES_PER_FILE} rules in a file, got {rules}")
        return self


class Policy(DocumentModel):
    kind: Literal["Policy"] = "Policy"
    spec: PolicySpec
