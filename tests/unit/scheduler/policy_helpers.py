"""Scheduler tests with real policies: jobs as Job models, verdicts from the policy engine."""

from __future__ import annotations

import datetime as dt
import textwrap
from collections.abc import Sequence

from meshctl.files import load_text
from meshctl.model import Job, Policy
from meshctl.policy import MeshSnapshot, PoolFacts, VictimFacts, bind, compile_policies
from meshctl.policy.compiled import Source
from meshctl.scheduler import FromPolicyEngine, Pending, Request, Running

NOW = dt.datetime(2026, 1, 5, 12, 0, tzinfo=dt.UTC)


def policies(spec: str):
    text = "apiVersion: meshctl/v1\nkind: Policy\nmetadata: {name: p}\nspec:\n" + textwrap.indent(
        textwrap.dedent(spec), "  "
    )
    (loaded,) = load_text(text, "p.yaml")
    assert isinstance(loaded.document, Policy)
    return compile_policies([Source("p.yaml", loaded.document, loaded.lines)])


def job(name: str, **spec: object) -> Job:
    fields = {"kind": "batch", "entrypoint": "python x.py"} | spec
    return Job.model_validate({"metadata": {"name": name}, "spec": fields})


def pool_facts(waits: dict[str, float]) -> MeshSnapshot:
    pools = [
        PoolFacts(
            "onprem",
            "local",
            "",
            {"tier": "strategic"},
            ("H100",),
            16,
            1.0,
            free_gpus=0.0,
            expected_wait_s=waits.get("onprem", 0.0),
        ),
        PoolFacts("aws", "aws", "us-east-1", {"tier": "burst"}, ("L4",), 8, 1.0, free_gpus=8.0),
    ]
    return MeshSnapshot(tuple(pools))


def view(
    spec: str,
    jobs: Sequence[Job],
    victims: Sequence[tuple[Running, Job]] = (),
    waits: dict[str, float] | None = None,
) -> FromPolicyEngine:
    bound = bind(policies(spec), pool_facts(waits or {}), NOW)
    facts = {r.job_id: VictimFacts(j, r.priority, r.pool, 3600.0, 0.0) for r, j in victims}
    every = {j.metadata.name: j for j in jobs} | {r.job_id: j for r, j in victims}
    return FromPolicyEngine(bound, every, facts)


def pending_of(
    j: Job, engine: FromPolicyEngine, at: float = 0.0, runtime: float | None = None
) -> Pending:
    verdict = engine.verdict(j.metadata.name)
    assert verdict is not None
    return Pending(j.metadata.name, j.spec.team, verdict.priority, Request.of(j), at, runtime)
