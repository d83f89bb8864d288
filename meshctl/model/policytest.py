"""Policy tests: table-driven cases, like ``opa test``, run by ``meshctl policy test``.

Each case gives a job (job-spec fields, with its name and labels; the entrypoint may be left
out), optionally a mesh moment and a running victim, and what the policies must decide. Every
field a rule can read (``meshctl.policy.variables``) can be set here: the job's and victim's
from the case, the pools' and teams' moment from ``state``, the pools' configuration (provider,
labels, region) from the mesh file the test names.
"""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from meshctl.model.base import DocumentModel, DurationS, Labels, Model, Name, UsdPerHour
from meshctl.model.job import JobSpec
from meshctl.model.meshstate import Moment

DEFAULT_NOW = dt.datetime(2026, 1, 5, 12, 0, tzinfo=dt.UTC)


class CaseMetadata(Model):
    """A job file's ``metadata``, for cases copied from one."""

    name: Name | None = None
    labels: Labels = Field(default_factory=dict)


class CaseJob(JobSpec):
    name: Name = "job"
    labels: Labels = Field(default_factory=dict, description="the job's metadata.labels")
    metadata: CaseMetadata | None = Field(
        None, description="as in a job file: the name and labels (or give them at the top)"
    )
    entrypoint: Annotated[str, Field(min_length=1)] | None = None
    kind: Literal["train", "inference", "batch", "interactive"] = "batch"

    @model_validator(mode="before")
    @classmethod
    def _some_command(cls, data: Any) -> Any:
        """A case's job runs ``python main.py`` unless it gives a train or serve section."""
        if isinstance(data, dict) and not {"entrypoint", "train", "serve"} & data.keys():
            return {**data, "entrypoint": "python main.py"}
        return data

    @model_validator(mode="after")
    def _said_once(self) -> CaseJob:
        meta = self.metadata
        if meta is not None and meta.name is not None and "name" in self.model_fields_set:
            raise ValueError("give the job's name once: `name` or `metadata.name`")
        if meta is not None and meta.labels and self.labels:
            raise ValueError("give the job's labels once: `labels` or `metadata.labels`")
        return self

    @property
    def job_name(self) -> str:
        return self.metadata.name if self.metadata and self.metadata.name else self.name

    @property
    def job_labels(self) -> dict[str, str]:
        return dict(self.metadata.labels if self.metadata and self.metadata.labels else self.labels)


class CaseVictim(CaseJob):
    pool: Name
    runtime_s: DurationS = 3600.0
    since_checkpoint_s: DurationS = 0.0
    priority: Annotated[int, Field(ge=-1_000_000_000, le=1_000_000_000)] | None = Field(
        None, description="the victim's priority (default: its priority class's value)"
    )


class Expect(Model):
    eligible: list[Name] | None = Field(None, description="exactly these pools are eligible")
    usable: list[Name] | None = Field(None, description="exactly these pools may be used now")
    denied: list[Name] | None = Field(None, description="these pools are not eligible")
    burst: bool | None = None
    burst_pools: list[Name] | None = None
    spot: bool | None = Field(None, description="spot allowed on every burst target")
    max_usd_per_hour: UsdPerHour | None = None
    priority: int | None = None
    priority_class: Name | None = None
    preempt: bool | None = Field(None, description="the job may preempt the case's victim")
    grace_s: DurationS | None = None
    quota: Literal["no-quota", "within", "borrowing", "over"] | None = None
    budgets: dict[Name, Literal["ok", "warn", "exceeded"]] | None = None

    @model_validator(mode="after")
    def _expects_something(self) -> Expect:
        if not self.model_fields_set:
            raise ValueError("expected at least one expectation")
        return self


class Case(Model):
    name: Annotated[str, Field(min_length=1)]
    job: CaseJob = Field(default_factory=CaseJob)
    state: Moment = Field(default_factory=Moment)
    victim: CaseVictim | None = None
    now: dt.datetime | None = None
    expect: Expect

    @model_validator(mode="after")
    def _victim_for_preempt(self) -> Case:
        if (self.expect.preempt is not None or self.expect.grace_s is not None) and not self.victim:
            raise ValueError("expect.preempt and expect.grace_s need a `victim`")
        return self


class PolicyTestSpec(Model):
    mesh: str | None = Field(
        None, description="Mesh file relative to this one (default: the mesh beside policies/)"
    )
    now: dt.datetime = DEFAULT_NOW
    state: Moment = Field(default_factory=Moment)
    cases: Annotated[list[Case], Field(min_length=1, max_length=10_000)]


class PolicyTest(DocumentModel):
    kind: Literal["PolicyTest"] = "PolicyTest"
    spec: PolicyTestSpec
