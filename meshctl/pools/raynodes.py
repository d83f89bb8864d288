"""Every node of a Ray cluster, past what Ray's state API lists in one answer.

The state API (``GET /api/v0/nodes``) has no pages: it lists at most 10,000 nodes
(``RAY_MAX_LIMIT_FROM_DATA_SOURCE``, ray-project/ray#48251), taken in no useful order, and
says how many there were. So a pool lists its live nodes and its dead ones apart (Ray keeps
dead nodes listed for a while; they must never push live ones out), and when the live listing
is cut, the rest come from the dashboard's node summary (``GET /nodes?view=summary``, which
the pool reads every cycle anyway for the GPUs in use): it has every node the dashboard
knows, with no cap.

The summary spells every key in camel case (``neuron_cores`` becomes ``neuronCores``), its
resource names and label keys too, and that cannot be undone by rule. Names are restored from
the nodes the state API did list (a large cluster has few kinds of node) and from Ray's and
meshctl's own names; an accelerator type keeps Ray's prefix. A name seen on none of them stays
as the summary spells it.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from meshctl.pools.observed import (
    AGENT_HOST_LABEL,
    AGENT_PORT_LABEL,
    CLAIMED_RESOURCES,
    NODE_LABEL,
    NODE_TYPE_LABEL,
    ROLE_LABEL,
)

PAGE = 10_000  # the most the state API lists in one answer, by Ray's default
RAY_RESOURCES = ("CPU", "GPU", "memory", "object_store_memory", "node:__internal_head__")
KNOWN_LABELS = (NODE_LABEL, ROLE_LABEL, AGENT_PORT_LABEL, AGENT_HOST_LABEL, NODE_TYPE_LABEL)
ACCELERATOR = "accelerator_type:"


def listing(state: str, limit: int = PAGE) -> str:
    """The state API's path for the nodes in ``state`` (ALIVE or DEAD), filtered at the
    source, so nodes of the other state never take room in the answer."""
    query = urllib.parse.urlencode(
        {"detail": 1, "limit": limit, "filter_keys": "state", "filter_predicates": "=",
         "filter_values": state}
    )  # fmt: skip
    return f"/api/v0/nodes?{query}"


def listed(body: Mapping[str, Any]) -> tuple[list[Mapping[str, Any]], bool]:
    """The nodes of one state API answer, and whether the answer was cut: it says there were
    more (``total`` at the source, ``num_filtered`` after its filters) than it gives."""
    result = body.get("data", {}).get("result", {})
    rows = list(result.get("result", []))
    there = max(int(result.get("total") or 0), int(result.get("num_filtered") or 0))
    return rows, len(rows) < there


def camel(name: str) -> str:
    """How the dashboard's summary spells a key (Ray's ``to_camel_case``)."""
    first, *rest = name.split("_")
    return first + "".join(part.title() for part in rest)


def unlisted(summary: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The live nodes of the dashboard's summary that ``rows`` (the state API's live listing)
    left out, spelt as the state API spells a node."""
    have = {str(row.get("node_id", "")) for row in rows}
    resources = _restorer(
        RAY_RESOURCES, CLAIMED_RESOURCES, *(_keys(r, "resources_total") for r in rows)
    )
    labels = _restorer(KNOWN_LABELS, *(_keys(r, "labels") for r in rows))
    found = []
    for entry in summary.get("summary") or []:
        raylet = entry.get("raylet") or {}
        node_id = str(raylet.get("nodeId") or "")
        if not node_id or node_id in have or raylet.get("state") != "ALIVE":
            continue
        have.add(node_id)
        found.append(
            {
                "node_id": node_id,
                "state": "ALIVE",
                "node_ip": raylet.get("nodeManagerAddress"),
                "node_name": raylet.get("nodeName"),
                "resources_total": {
                    _resource(k, resources): float(v)
                    for k, v in (raylet.get("resourcesTotal") or {}).items()
                },
                "labels": {
                    labels.get(k, k): str(v) for k, v in (raylet.get("labels") or {}).items()
                },
                "start_time_ms": int(raylet.get("startTimeMs") or 0),
                "end_time_ms": int(raylet.get("endTimeMs") or 0),
            }
        )
    return found


def _keys(row: Mapping[str, Any], field: str) -> Iterable[str]:
    return (str(k) for k in (row.get(field) or {}))


def _restorer(*names: Iterable[str]) -> dict[str, str]:
    return {camel(name): name for group in names for name in group}


def _resource(key: str, known: Mapping[str, str]) -> str:
    if key in known:
        return known[key]
    prefix = camel(ACCELERATOR)
    if key.startswith(prefix):  # the type itself may have lost its case
        return ACCELERATOR + key[len(prefix) :]
    return key
