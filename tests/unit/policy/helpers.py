"""Building policy sets and snapshots from YAML text, for the policy tests."""

from __future__ import annotations

import datetime as dt
import textwrap

from meshctl.files import load_text
from meshctl.model import Job, Policy
from meshctl.policy import MeshSnapshot, PoolFacts, TeamUsage, bind, compile_policies
from meshctl.policy.compiled import PolicySet, Source

NOW = dt.datetime(2026, 1, 5, 12, 0, tzinfo=dt.UTC)


def policy_text(name: str, spec: str) -> str:
    body = textwrap.indent(textwrap.dedent(spec), "  ")
    return f"apiVersion: meshctl/v1\nkind: Policy\nmetadata: {{name: {name}}}\nspec:\n{body}"


def sources(*specs: str) -> list[Source]:
    out = []
    for i, spec in enumerate(specs):
        path, text = f"p{i}.yaml", policy_text(f"p{i}", spec)
        (loaded,) = load_text(text, path)
        assert isinstance(loaded.document, Policy)
        out.append(Source(path, loaded.document, loaded.lines, text))
    return out


def compiled(*specs: str) -> PolicySet:
    return compile_policies(sources(*specs))


def pool(name: str, provider: str = "local", **kw: object) -> PoolFacts:
    defaults: dict[str, object] = {
        "region": "us-east-1" if provider == "aws" else "",
        "labels": {},
        "accelerators": ("H100",),
        "gpus": 8,
        "usd_per_gpu_hour": 1.0,
        "free_gpus": 8.0,
    }
    return PoolFacts(name=name, provider=provider, **(defaults | kw))  # type: ignore[arg-type]


MESH = MeshSnapshot(
    (
        pool("onprem", labels={"tier": "strategic"}),
        pool("aws", "aws", labels={"tier": "burst"}),
        pool("gcp", "gcp", labels={"tier": "burst"}, region="europe-west4"),
    ),
    {"vision": TeamUsage(gpus_in_use=2)},
)


def job(**spec: object) -> Job:
    fields = {"kind": "batch", "entrypoint": "python x.py"} | spec
    return Job.model_validate({"metadata": {"name": "j"}, "spec": fields})


def verdict(policies: PolicySet, the_job: Job, mesh: MeshSnapshot = MESH):
    return bind(policies, mesh, NOW).evaluate(the_job)
