"""Every field a rule can read can be set from a policy test's case file.

The table below says, for each leaf of ``variables.SCHEMA``, how a case sets it and the value a
rule then reads. The test walks the schema, so a field added there without a way to set it
from a case fails here; then it writes one policy (a rule per field, each keyed to its own case
by the job's name) and one test file, and runs ``meshctl policy test`` over them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import PROVIDERS

from meshctl.cli.app import app
from meshctl.policy.variables import SCHEMA

pytestmark = pytest.mark.unit

MESH = """\
apiVersion: meshctl/v1
kind: Mesh
metadata: {name: m}
spec:
  pools:
    - name: onprem
      provider: local
      labels: {tier: strategic}
      nodes:
        - {name: n, gpus: 4, accelerator: {model: A100, memory_gib: 80GiB}, cpus: 8,
           memory_gib: 64GiB}
    - name: aws-burst
      provider: aws
      region: us-east-1
      labels: {tier: burst}
      node_types: [{name: g6.xlarge, max_nodes: 2}]
      max_nodes: 2
"""
DATA = {"name": "d", "location": "s3://x", "residency": "eu", "tags": ["pii"], "size_gib": 5}

ELASTIC = {"kind": "train", "train": {"loop": "m:f", "workers": {"min": 2, "max": 4}}}
SERVICE = {
    "kind": "inference",
    "priority_class": "low",
    "serve": {"app": "app:app", "replicas": {"max": 2}},
}
# field -> (how a case's job sets it, the value a rule reads as CEL)
JOB: dict[str, tuple[dict[str, Any], str]] = {
    "name": ({}, '"{name}"'),
    "kind": ({"kind": "train"}, '"train"'),
    "team": ({"team": "vision"}, '"vision"'),
    "criticality": ({"criticality": "critical"}, '"critical"'),
    "priority_class": ({"priority_class": "low"}, '"low"'),
    "labels.*": ({"metadata": {"labels": {"team": "x"}}}, '"x"'),
    "accelerator.vendor": (
        {"resources": {"gpus": 1, "accelerator": {"vendor": "nvidia", "any_of": ["A100"]}}},
        '"nvidia"',
    ),
    "accelerator.models": (
        {"resources": {"gpus": 1, "accelerator": {"any_of": ["A100"]}}},
        '["A100"]',
    ),
    "accelerator.memory_gib": ({"resources": {"gpus": 1, "gpu_memory_gib": "40GiB"}}, "40.0"),
    "resources.gpus": ({"resources": {"gpus": 2}}, "2.0"),
    "resources.total_gpus": ({"resources": {"gpus": 2, "nodes": 3}}, "6.0"),
    "resources.gpu_memory_gib": ({"resources": {"gpus": 1, "gpu_memory_gib": "40GiB"}}, "40.0"),
    "resources.accelerators": (
        {"resources": {"gpus": 1, "accelerator": {"any_of": ["A100"]}}},
        '["A100"]',
    ),
    "resources.cpus": ({"resources": {"cpus": 3}}, "3.0"),
    "resources.memory_gib": ({"resources": {"memory_gib": "8GiB"}}, "8.0"),
    "resources.nic_gbps": ({"resources": {"nic_gbps": "100Gbps"}}, "100.0"),
    "resources.nodes": ({"resources": {"gpus": 1, "nodes": 2}}, "2"),
    "resources.topology": (
        {"resources": {"gpus": 1, "nodes": 2, "topology": {"domain": "rack"}}},
        '"rack"',
    ),
    "data.tags": ({"data": [DATA]}, '["pii"]'),
    "data.residency": ({"data": [DATA]}, '["eu"]'),
    "data.sets[].name": ({"data": [DATA]}, '"d"'),
    "data.sets[].location": ({"data": [DATA]}, '"s3://x"'),
    "data.sets[].residency": ({"data": [DATA]}, '"eu"'),
    "data.sets[].tags": ({"data": [DATA]}, '["pii"]'),
    "data.sets[].size_gib": ({"data": [DATA]}, "5.0"),
    "limits.max_usd_per_hour": ({"limits": {"max_usd_per_hour": 3}}, "3.0"),
    "limits.max_runtime_s": ({"limits": {"max_runtime_s": "1h"}}, "3600.0"),
    "elastic": (ELASTIC, "true"),
    "workers.min": (ELASTIC, "2"),
    "workers.max": ({"resources": {"nodes": 3}}, "3"),
    "service": (SERVICE, "true"),
}
VICTIM_ONLY: dict[str, tuple[dict[str, Any], str]] = {
    "priority": ({"priority": 3}, "3"),
    "runtime_s": ({"runtime_s": "2h"}, "7200.0"),
    "since_checkpoint_s": ({"since_checkpoint_s": "5m"}, "300.0"),
    "pool": ({"pool": "aws-burst"}, '"aws-burst"'),
}
# mesh field -> (the case's state, the value); None: set by the mesh file the test uses
MESH_FIELDS: dict[str, tuple[dict[str, Any] | None, str]] = {
    "pools.*.provider": (None, '"local"'),
    "pools.*.cloud": (None, "false"),
    "pools.*.labels.*": (None, '"strategic"'),
    "pools.*.gpus": ({"pools": {"onprem": {"gpus": 6}}}, "6"),
    "pools.*.free_gpus": ({"pools": {"onprem": {"free_gpus": 2}}}, "2.0"),
    "pools.*.queued_jobs": ({"pools": {"onprem": {"queued_jobs": 4}}}, "4"),
    "pools.*.expected_wait_s": ({"pools": {"onprem": {"expected_wait_s": "15m"}}}, "900.0"),
    "pools.*.spend_usd_month": ({"pools": {"onprem": {"spend_usd_month": 12}}}, "12.0"),
    "teams.*.gpus_in_use": ({"teams": {"vision": {"gpus_in_use": 3}}}, "3.0"),
    "teams.*.gpu_memory_gib_in_use": ({"teams": {"vision": {"gpu_memory_gib_in_use": 40}}}, "40.0"),
    "teams.*.spend_usd_month": ({"teams": {"vision": {"spend_usd_month": 5}}}, "5.0"),
}
# pool field -> the case's state, or None: the mesh file and the catalogs set it
POOL: dict[str, dict[str, Any] | None] = {
    "name": None,
    "provider": None,
    "cloud": None,
    "region": None,
    "labels.*": None,
    "accelerators": None,
    "vendors": None,
    "accelerator_types[].vendor": None,
    "accelerator_types[].model": None,
    "accelerator_types[].memory_gib": None,
    "gpus": {"pools": {"aws-burst": {"gpus": 5}}},
    "usd_per_gpu_hour": None,
}
# the key a `*` reads: a job's label `team`, a pool's `tier`, the pool onprem, the team vision
KEYS = {"job": "team", "victim": "team", "mesh": "tier", "pool": "tier"}
MAP_KEYS = {"pools": "onprem", "teams": "vision"}


def leaves(node: Any, prefix: str = "") -> list[str]:
    if isinstance(node, str):
        return [prefix]
    if "*" in node:
        return leaves(node["*"], prefix + ".*")
    if "[]" in node:
        return leaves(node["[]"], prefix + "[]")
    return [leaf for key, child in node.items() for leaf in leaves(child, f"{prefix}.{key}")]


def read(root: str, path: str) -> str:
    """`labels.*` -> `labels.team`, `data.sets[].name` -> `data.sets[0].name`."""
    parts = path.split(".")
    keys = [
        (MAP_KEYS.get(parts[i - 1]) or KEYS[root]) if p == "*" else p for i, p in enumerate(parts)
    ]
    return f"{root}." + ".".join(keys).replace("[]", "[0]")


def test_the_table_covers_every_field_of_the_schema() -> None:
    assert sorted(JOB) == sorted(p.lstrip(".") for p in leaves(SCHEMA["job"]))
    victim = sorted(p.lstrip(".") for p in leaves(SCHEMA["victim"]))
    assert victim == sorted([*JOB, *VICTIM_ONLY])
    assert sorted(MESH_FIELDS) == sorted(p.lstrip(".") for p in leaves(SCHEMA["mesh"]))
    assert sorted(POOL) == sorted(p.lstrip(".") for p in leaves(SCHEMA["pool"]))
    assert SCHEMA["now"] == "timestamp"  # a case's `now`, below


# What the mesh file above and the shipped aws catalog make of the aws-burst pool, as CEL
# literals. providers/aws.yaml: g6.xlarge has one nvidia L4 of 24 GiB at 0.8048 USD an hour on
# demand in us-east-1, so 0.8048 USD per GPU-hour; gpus is the case's own state (POOL above).
AWS_BURST: dict[str, str] = {
    "name": '"aws-burst"',
    "provider": '"aws"',
    "cloud": "true",
    "region": '"us-east-1"',
    "labels.*": '"burst"',
    "accelerators": '["L4"]',
    "vendors": '["nvidia"]',
    "accelerator_types[].vendor": '"nvidia"',
    "accelerator_types[].model": '"L4"',
    "accelerator_types[].memory_gib": "24.0",
    "gpus": "5",
    "usd_per_gpu_hour": "0.8048",
}


def _cases() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(rules, cases): each rule fires for its own case only, and the case expects it to."""
    rules: list[dict[str, Any]] = []
    cases: list[dict[str, Any]] = []

    def add(rule: dict[str, Any], case: dict[str, Any]) -> None:
        name = f"c{len(cases)}"
        rule = {k: v.replace("{name}", name) if isinstance(v, str) else v for k, v in rule.items()}
        rules.append({"name": name, "when": f'job.name == "{name}"', **rule})
        case["job"] = {"name": name, **case.get("job", {})}
        cases.append({"name": name, **case})

    deny_aws = {"deny": 'pool.name == "aws-burst"'}
    for path, (sets, value) in JOB.items():
        rule = {"when": f'job.name == "{{name}}" && {read("job", path)} == {value}', **deny_aws}
        add(rule, {"job": sets, "expect": {"denied": ["aws-burst"]}})
    for path, (sets, value) in {**JOB, **VICTIM_ONLY}.items():
        victim = {"pool": "onprem", "name": "victim", **sets}
        value = '"victim"' if path == "name" else value
        rule = {"victims": f"{read('victim', path)} == {value}"}
        add(rule, {"job": {"kind": "inference"}, "victim": victim, "expect": {"preempt": True}})
    for path, (state, value) in MESH_FIELDS.items():
        rule = {"when": f'job.name == "{{name}}" && {read("mesh", path)} == {value}', **deny_aws}
        add(rule, {"state": state or {}, "expect": {"denied": ["aws-burst"]}})
    for path, value in AWS_BURST.items():
        rule = {"deny": f'pool.name == "aws-burst" && {read("pool", path)} == {value}'}
        add(rule, {"state": POOL[path] or {}, "expect": {"denied": ["aws-burst"]}})
    moment = "2026-02-01T00:00:00Z"
    rule = {"when": f'job.name == "{{name}}" && now == timestamp("{moment}")', **deny_aws}
    add(rule, {"now": moment, "expect": {"denied": ["aws-burst"]}})
    return rules, cases


def test_every_field_a_rule_reads_can_be_set_from_a_case_file(cli, tmp_path: Path) -> None:
    rules, cases = _cases()
    pools = [r for r in rules if "deny" in r]
    preemption = [r for r in rules if "victims" in r]
    policy = {
        "apiVersion": "meshctl/v1",
        "kind": "Policy",
        "metadata": {"name": "probe"},
        "spec": {
            "priority_classes": [{"name": "high", "value": 10}, {"name": "low", "value": 1}],
            "default_priority_class": {"inference": "high", "train": "low", "batch": "low"},
            "pools": pools,
            "preemption": preemption,
        },
    }
    test = {"apiVersion": "meshctl/v1", "kind": "PolicyTest", "metadata": {"name": "t"},
            "spec": {"cases": cases}}  # fmt: skip
    (tmp_path / "mesh.yaml").write_text(MESH)
    (tmp_path / "policies" / "tests").mkdir(parents=True)
    (tmp_path / "policies" / "probe.yaml").write_text(json.dumps(policy))
    (tmp_path / "policies" / "tests" / "probe.yaml").write_text(json.dumps(test))
    result = cli.invoke(
        app,
        ["--providers", str(PROVIDERS), "policy", "test", str(tmp_path / "policies"), "-o", "json"],
    )
    assert result.exit_code == 0, result.output
    outcomes = json.loads(result.stdout)
    assert len(outcomes) == len(cases) == len(JOB) * 2 + len(VICTIM_ONLY) + 11 + len(AWS_BURST) + 1
    assert [o["failures"] for o in outcomes if not o["passed"]] == []
