"""The mesh as a whole: ``GET /v1/whoami``, ``GET /v1/status``, ``GET /v1/queues``, ``GET
/v1/policies``, ``POST /v1/policies/reload``, ``POST /v1/mesh/up``, ``POST /v1/mesh/down``, ``GET
/v1/audit``."""

from __future__ import annotations

from dataclasses import asdict, replace
from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from meshctl.app.policies import reload_rules
from meshctl.app.remote import warning_header
from meshctl.app.status import collect
from meshctl.server import hostcommands, jobs
from meshctl.server.access import Verb
from meshctl.server.errors import invalid
from meshctl.server.routes.common import Caller, Served, allowed, audited

router = APIRouter(prefix="/v1")


class UpBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    interval: float = Field(1.0, gt=0, le=3600)


class DownBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    force: bool = False
    drain: bool = False
    deadline: str | None = Field(None, max_length=32)


class ReloadBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    timeout_s: float = Field(30.0, ge=1, le=600)


@router.get("/whoami")
def whoami(caller: Caller) -> dict[str, Any]:
    return {"name": caller.name, "role": caller.role.value, "teams": list(caller.teams)}


@router.get("/status")
def status(caller: Caller, server: Served) -> Any:
    """The status document; each warning of reading the files (an invalid edit the running
    controller refused: it runs the set it took last) a ``Warning`` header, as a submission's
    (``meshctl status`` prints them as it does in its own process)."""
    allowed(server, caller, Verb.STATUS_READ)
    warnings: list[str] = []
    told = replace(server.context, warn=warnings.extend)
    response = JSONResponse(collect(told, server.store, server.health))
    for line in warnings:
        response.headers.append("Warning", warning_header(line))
    return response


@router.get("/queues")
def queues(caller: Caller, server: Served) -> Any:
    """The teams' quotas by cohort, with what each holds, borrows, lends and waits for."""
    from meshctl.app.queues import queues as collect

    allowed(server, caller, Verb.STATUS_READ)
    return collect(server.context)


@router.get("/policies")
def policies(caller: Caller, server: Served) -> Any:
    allowed(server, caller, Verb.POLICIES_READ)
    _, _, checked = server.planner.planning()
    return {"enforced": server.context.enforced(), "checked_against": checked.content_hash}


@router.post("/policies/reload")
def reload_policies(caller: Caller, server: Served, body: ReloadBody | None = None) -> Any:
    allowed(server, caller, Verb.POLICIES_MANAGE, "policies")
    said = reload_rules(server.context, None, (body or ReloadBody()).timeout_s)
    detail = {"result": said["outcome"], "policy_hash": said["policy_hash"]}
    server.store.append_audit(
        jobs.audit_entry(caller, "policies.reload", said["policies"], "allowed", **detail)
    )
    return said


@router.post("/mesh/up")
def mesh_up(caller: Caller, server: Served, body: UpBody | None = None) -> Any:
    allowed(server, caller, Verb.MESH_MANAGE, "mesh")
    args = ["up", "--interval", str((body or UpBody()).interval)]
    return audited(server, caller, "mesh.up", hostcommands.run(server.context, args))


@router.post("/mesh/down")
def mesh_down(caller: Caller, server: Served, body: DownBody | None = None) -> Any:
    allowed(server, caller, Verb.MESH_MANAGE, "mesh")
    asked = body or DownBody()
    args = [
        "down",
        *(["--force"] if asked.force else []),
        *(["--drain"] if asked.drain else []),
    ]
    if asked.deadline is not None:
        args += ["--deadline", asked.deadline]
    waits = _drain_s(asked.deadline) if asked.drain else 0.0
    return audited(server, caller, "mesh.down", hostcommands.run(server.context, args, waits + 300))


@router.get("/audit")
def audit(
    caller: Caller,
    server: Served,
    after: Annotated[int, Query(ge=0)] = 0,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
) -> Any:
    allowed(server, caller, Verb.AUDIT_READ)
    return [asdict(e) for e in server.store.audit(after_seq=after, limit=limit)]


def _drain_s(deadline: str | None) -> float:
    """How long a ``down --drain`` may wait: its deadline (10 minutes unless given)."""
    from meshctl.units import parse_duration_s

    try:
        return parse_duration_s(deadline or "10m")
    except ValueError as err:
        raise invalid(f"deadline: {err}") from None
