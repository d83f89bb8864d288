"""``GET /v1/nodes``, ``GET /v1/nodes/{pool}/{node}``, ``POST
/v1/nodes/{pool}/{node}/{cordon|drain|uncordon|health}``: each change audited in its write."""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from meshctl.app import nodes
from meshctl.server import jobs
from meshctl.server.access import Verb
from meshctl.server.errors import invalid
from meshctl.server.identity import Principal
from meshctl.server.routes.common import Caller, Served, allowed
from meshctl.server.served import Server

router = APIRouter(prefix="/v1/nodes")


class HealthBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    unhealthy: str | None = Field(..., min_length=1, max_length=500)  # None: healthy again


class DrainBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    deadline: str = "10m"


@router.get("")
def list_nodes(caller: Caller, server: Served) -> Any:
    allowed(server, caller, Verb.NODES_READ)
    return nodes.node_rows(server.context.home, server.store)


@router.get("/{pool}/{node}")
def show_node(pool: str, node: str, caller: Caller, server: Served) -> Any:
    allowed(server, caller, Verb.NODES_READ)
    return nodes.node_data(server.context.home, server.store, f"{pool}/{node}")


@router.post("/{pool}/{node}/health")
def node_health(pool: str, node: str, caller: Caller, server: Served, body: HealthBody) -> Any:
    target = f"{pool}/{node}"
    allowed(server, caller, Verb.NODES_MANAGE, target)
    found = nodes.find_node(server.store, target).id
    nodes.set_health(server.context.home, found, body.unhealthy)
    entry = jobs.audit_entry(caller, "nodes.health", found, "allowed", unhealthy=body.unhealthy)
    server.store.append_audit(entry)
    server.context.nudge()
    return {"node": found, "unhealthy": body.unhealthy}


@router.post("/{pool}/{node}/{action}")
def manage_node(
    pool: str, node: str, action: str, caller: Caller, server: Served, body: DrainBody | None = None
) -> Any:
    target = f"{pool}/{node}"
    allowed(server, caller, Verb.NODES_MANAGE, target)
    return _manage(server, caller, target, action, body or DrainBody())


def _manage(server: Server, caller: Principal, target: str, action: str, body: DrainBody) -> Any:
    """Cordon, drain or uncordon a node, audited in the same write."""
    from meshctl.state import NodeState
    from meshctl.units import parse_duration_s

    store = server.store
    verb = f"nodes.{action}"
    entry = jobs.audit_entry(caller, verb, target, "allowed")
    if action == "cordon":
        node = nodes.set_state(store, target, NodeState.CORDONED,
                               f"cordoned by {caller.name}", also=[entry])  # fmt: skip
    elif action == "drain":
        try:
            seconds = parse_duration_s(body.deadline)
        except ValueError as err:
            raise invalid(f"deadline: {err}") from None
        entry = jobs.audit_entry(caller, verb, target, "allowed", deadline=body.deadline)
        node = nodes.set_state(store, target, NodeState.DRAINING,
                               f"draining, deadline {body.deadline}, by {caller.name}",
                               time.time() + seconds, also=[entry])  # fmt: skip
    elif action == "uncordon":
        node = nodes.back_in_service(server.context.home, store, target, also=[entry])
    else:
        raise invalid(f"action: expected cordon, drain or uncordon, got {action!r}")
    server.context.nudge()
    return {"node": node.id, "state": node.state}
