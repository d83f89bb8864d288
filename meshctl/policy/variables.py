"""The variables a policy's CEL expressions see, and their schema.

Expressions see plain maps, built once from the typed models: ``job``, ``pool``, ``mesh``,
``victim`` (in preemption rules) and ``now``. ``SCHEMA`` describes them for validation:
a leaf is a type name; a mapping is an object with those fields; ``{"*": X}`` is a map with
any keys (pool and team names) whose values are X; ``{"[]": X}`` is a list of X. Validation
rejects a reference to a field that is not here (``job.gpu``), before anything runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

Schema = Mapping[str, Any]

_RESOURCES: Final[Schema] = {
    "gpus": "double",
    "total_gpus": "double",
    "gpu_memory_gib": "double",
    "accelerators": "list<string>",
    "cpus": "double",
    "memory_gib": "double",
    "nic_gbps": "double",
    "nodes": "int",
    "topology": "string",
}
# What a job asks of each device: its vendor ("" when any), the models it accepts (none: any)
# and the memory it needs (0.0 when any)
_JOB_ACCELERATOR: Final[Schema] = {
    "vendor": "string",
    "models": "list<string>",
    "memory_gib": "double",
}
# One kind of accelerator a pool's nodes carry; a pool may have several (node groups, node
# types), so a pool has a list of them and rules ask `all` or `exists` of it
_ACCELERATOR_TYPE: Final[Schema] = {
    "vendor": "string",
    "model": "string",
    "memory_gib": "double",
}
_DATASET: Final[Schema] = {
    "name": "string",
    "location": "string",
    "residency": "string",
    "tags": "list<string>",
    "size_gib": "double",
}
JOB: Final[Schema] = {
    "name": "string",
    "kind": "string",
    "team": "string",
    "criticality": "string",
    "priority_class": "string",
    "labels": {"*": "string"},
    "accelerator": _JOB_ACCELERATOR,
    "resources": _RESOURCES,
    "data": {
        "tags": "list<string>",
        "residency": "list<string>",
        "sets": {"[]": _DATASET},
    },
    "limits": {"max_usd_per_hour": "double", "max_runtime_s": "double"},
    "elastic": "bool",
    "workers": {"min": "int", "max": "int"},
    "service": "bool",
}
VICTIM: Final[Schema] = {
    **JOB,
    "priority": "int",
    "runtime_s": "double",
    "since_checkpoint_s": "double",
    "pool": "string",
}
POOL: Final[Schema] = {
    "name": "string",
    "provider": "string",
    "cloud": "bool",
    "region": "string",
    "labels": {"*": "string"},
    "accelerators": "list<string>",
    "vendors": "list<string>",
    "accelerator_types": {"[]": _ACCELERATOR_TYPE},
    "gpus": "int",
    "usd_per_gpu_hour": "double",
}
POOL_STATE: Final[Schema] = {
    "provider": "string",
    "cloud": "bool",
    "labels": {"*": "string"},
    "gpus": "int",
    "free_gpus": "double",
    "queued_jobs": "int",
    "expected_wait_s": "double",
    "spend_usd_month": "double",
}
MESH: Final[Schema] = {
    "pools": {"*": POOL_STATE},
    "teams": {
        "*": {
            "gpus_in_use": "double",
            "gpu_memory_gib_in_use": "double",
            "spend_usd_month": "double",
        }
    },
}
SCHEMA: Final[Schema] = {
    "job": JOB,
    "victim": VICTIM,
    "pool": POOL,
    "mesh": MESH,
    "now": "timestamp",
}
