"""``GET /v1/pools``, ``GET /v1/pools/{pool}``, ``POST /v1/pools/check`` (preflights)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from meshctl.app import pools
from meshctl.server.access import Verb
from meshctl.server.routes.common import Caller, Served, allowed

router = APIRouter(prefix="/v1/pools")


class CheckBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    pool: str | None = Field(None, min_length=1, max_length=63)  # None: every pool


@router.get("")
def list_pools(caller: Caller, server: Served) -> Any:
    allowed(server, caller, Verb.POOLS_READ)
    mesh, catalogs, _ = server.planner.planning()
    return pools.pool_rows(mesh, catalogs, server.store)


@router.get("/{name}")
def show_pool(name: str, caller: Caller, server: Served) -> Any:
    allowed(server, caller, Verb.POOLS_READ)
    mesh, catalogs, _ = server.planner.planning()
    return pools.pool_data(mesh, catalogs, name)


@router.post("/check")
def check_pools(body: CheckBody, caller: Caller, server: Served) -> Any:
    allowed(server, caller, Verb.POOLS_CHECK)
    mesh, catalogs, _ = server.planner.planning()
    return pools.checked(server.context, mesh, catalogs, body.pool)
