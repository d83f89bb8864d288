"""The API server's application: ``/v1/`` routes over one state store (FastAPI).

Every ``/v1/`` request carries ``Authorization: Bearer <token>`` (``meshctl admin users add``
prints one): without a valid one, 401. A verb the principal's role lacks, or a job out of their
reach, is a 403 (``meshctl.server.access``). A malformed body or query is a 422 naming the
field, a body over the cap a 413; every error is ``{"error": "one line"}`` and writes nothing
(a refused administrative action writes its audit entry, nothing else).

Routes: ``GET /v1/whoami``; ``POST /v1/jobs`` (submit), ``GET /v1/jobs``, ``GET
/v1/jobs/{job}``, ``GET /v1/jobs/{job}/logs``, ``GET /v1/jobs/{job}/explain``, ``POST
/v1/jobs/{job}/cancel``; ``GET /v1/status``; ``GET /v1/pools``, ``GET /v1/pools/{pool}``,
``POST /v1/pools/check`` (preflights); ``GET /v1/policies``, ``POST
/v1/policies/reload``; ``POST /v1/mesh/up``, ``POST /v1/mesh/down``; ``GET /v1/nodes``, ``GET
/v1/nodes/{pool}/{node}``, ``POST /v1/nodes/{pool}/{node}/{cordon|drain|uncordon|health}``;
``GET /v1/audit``; ``GET /healthz`` and ``GET /metrics`` (no token).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool
from starlette.routing import Route

from meshctl.errors import Failure, InvalidInput
from meshctl.server import jobs
from meshctl.server.access import ADMINISTRATIVE, Verb, may
from meshctl.server.errors import ApiError, forbidden, invalid, too_large, unauthorised
from meshctl.server.identity import CHECKED_FOR_S, Authenticator, Principal
from meshctl.server.planning import Planner
from meshctl.state import Store, StoreError


@dataclass(frozen=True, slots=True)
class Service:
    """What the application serves: the store, and the ``AppContext`` (home, mesh, policies,
    catalogs) jobs are checked against, as ``meshctl submit`` on the server's host would.

    ``loop_store``: what the event loop reads and writes through (tokens, submissions without
    files), its own connection, so that a long read in a request thread (a list of 10,000
    jobs) never holds it up; default ``store``."""

    context: Any
    store: Store
    max_body_bytes: int
    tokens_kept_s: float = CHECKED_FOR_S  # a valid token's principal, kept (``Authenticator``)
    loop_store: Store | None = None
    planner: Planner = field(init=False)
    health: Any = field(init=False)  # whether each pool can be used: checked at most every 30 s

    def __post_init__(self) -> None:
        from meshctl.app.pools import PoolHealth

        object.__setattr__(self, "planner", Planner(self.context))
        object.__setattr__(self, "health", PoolHealth(self.context))


async def principal(request: Request) -> Principal:
    """Who the request's bearer token stands for; 401 without a valid one. Run on the event
    loop, not in a thread: a token checked in the last seconds is not read again, and two
    indexed reads of the store cost less than the hand-off."""
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise unauthorised()
    found: Principal | None = request.app.state.authenticate(token.strip())
    if found is None:
        raise unauthorised("the token is not valid (revoked, or not this server's)")
    return found


Caller = Annotated[Principal, Depends(principal)]


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


class HealthBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    unhealthy: str | None = Field(..., min_length=1, max_length=500)  # None: healthy again


class CheckBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    pool: str | None = Field(None, min_length=1, max_length=63)  # None: every pool


class DrainBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    deadline: str = "10m"


def create_app(service: Service, metrics: Any | None = None) -> FastAPI:
    """The application; ``metrics``: an ASGI app mounted at ``/metrics`` (no token: it holds
    counts per class, pool and team, never a job)."""
    app = FastAPI(title="meshctl", version="1", docs_url=None, redoc_url=None,
                  openapi_url="/v1/openapi.json")  # fmt: skip
    store = service.store
    quick = service.loop_store or store
    app.state.authenticate = Authenticator(quick, service.tokens_kept_s)
    _handlers(app)
    if metrics is not None:  # at /metrics itself: a mount would redirect it to /metrics/
        app.router.routes.append(Route("/metrics", endpoint=_Asgi(metrics), methods=["GET"]))

    def allowed(caller: Principal, verb: Verb, target: str = "") -> None:
        if may(caller, verb):
            return
        why = f"{verb}: not allowed to a {caller.role.value}"
        if verb in ADMINISTRATIVE:
            raise jobs.refuse(store, caller, verb, target, why)
        raise forbidden(why)

    @app.get("/healthz")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/v1/whoami")
    def whoami(caller: Caller) -> dict[str, Any]:
        return {"name": caller.name, "role": caller.role.value, "teams": list(caller.teams)}

    @app.post("/v1/jobs", status_code=201)
    async def submit(request: Request, caller: Caller) -> Any:
        allowed(caller, Verb.JOBS_SUBMIT)
        raw = await _capped_body(request, service.max_body_bytes)
        body = jobs.parse_submission(raw)
        if jobs.light(body) and not service.planner.reads_pools():
            # on the event loop: a check and a write, about 1.5 ms of CPU; handing them to a
            # thread cost a third more (the hand-off, and the two contending for the GIL)
            done = jobs.submit(service.planner, quick, caller, body, service.max_body_bytes)
            return JSONResponse(done, status_code=201)
        return await run_in_threadpool(  # files, a loop to import, pools to ask over HTTP
            jobs.submit, service.planner, store, caller, body, service.max_body_bytes
        )

    @app.get("/v1/jobs")
    def list_jobs(caller: Caller, state: str | None = None, team: str | None = None) -> Any:
        allowed(caller, Verb.JOBS_READ)
        return jobs.rows(store, caller, state, team)

    @app.get("/v1/jobs/{ref}")
    def show_job(ref: str, caller: Caller) -> Any:
        allowed(caller, Verb.JOBS_READ)
        return jobs.show(service.context.home, store, caller, ref)

    @app.get("/v1/jobs/{ref}/logs")
    def job_logs(
        ref: str,
        caller: Caller,
        attempt: Annotated[int | None, Query(ge=1)] = None,
        offset: Annotated[int, Query(ge=0)] = 0,
    ) -> Any:
        allowed(caller, Verb.JOBS_READ)
        return jobs.logs(service.planner, store, caller, ref, attempt, offset)

    @app.get("/v1/jobs/{ref}/explain")
    def explain_job(ref: str, caller: Caller) -> Any:
        allowed(caller, Verb.JOBS_READ)
        return jobs.explain(service.context, store, caller, ref)

    @app.get("/v1/pools")
    def list_pools(caller: Caller) -> Any:
        from meshctl.app.pools import pool_rows

        allowed(caller, Verb.POOLS_READ)
        mesh, catalogs, _ = service.planner.planning()
        return pool_rows(mesh, catalogs, store)

    @app.get("/v1/pools/{name}")
    def show_pool(name: str, caller: Caller) -> Any:
        from meshctl.app.pools import pool_data

        allowed(caller, Verb.POOLS_READ)
        mesh, catalogs, _ = service.planner.planning()
        return pool_data(mesh, catalogs, name)

    @app.post("/v1/pools/check")
    def check_pools(body: CheckBody, caller: Caller) -> Any:
        from meshctl.app.pools import checked

        allowed(caller, Verb.POOLS_CHECK)
        mesh, catalogs, _ = service.planner.planning()
        return checked(service.context, mesh, catalogs, body.pool)

    @app.post("/v1/jobs/{ref}/cancel")
    def cancel_job(ref: str, caller: Caller) -> Any:
        allowed(caller, Verb.JOBS_CANCEL)
        return jobs.cancel(service.context, store, caller, ref)

    @app.get("/v1/status")
    def status(caller: Caller) -> Any:
        from meshctl.app.status import collect

        allowed(caller, Verb.STATUS_READ)
        return collect(service.context, store, service.health)

    @app.get("/v1/nodes")
    def list_nodes(caller: Caller) -> Any:
        from meshctl.app.nodes import node_rows

        allowed(caller, Verb.NODES_READ)
        return node_rows(service.context.home, store)

    @app.get("/v1/nodes/{pool}/{node}")
    def show_node(pool: str, node: str, caller: Caller) -> Any:
        from meshctl.app.nodes import node_data

        allowed(caller, Verb.NODES_READ)
        return node_data(service.context.home, store, f"{pool}/{node}")

    @app.post("/v1/nodes/{pool}/{node}/health")
    def node_health(pool: str, node: str, caller: Caller, body: HealthBody) -> Any:
        from meshctl.app.nodes import find_node, set_health

        target = f"{pool}/{node}"
        allowed(caller, Verb.NODES_MANAGE, target)
        found = find_node(store, target).id
        set_health(service.context.home, found, body.unhealthy)
        entry = jobs.audit_entry(caller, "nodes.health", found, "allowed", unhealthy=body.unhealthy)
        store.append_audit(entry)
        service.context.nudge()
        return {"node": found, "unhealthy": body.unhealthy}

    @app.post("/v1/nodes/{pool}/{node}/{action}")
    def manage_node(
        pool: str, node: str, action: str, caller: Caller, body: DrainBody | None = None
    ) -> Any:
        target = f"{pool}/{node}"
        allowed(caller, Verb.NODES_MANAGE, target)
        return _manage(service, caller, target, action, body or DrainBody())

    @app.get("/v1/policies")
    def policies(caller: Caller) -> Any:
        allowed(caller, Verb.POLICIES_READ)
        _, _, checked = service.planner.planning()
        return {"enforced": service.context.enforced(), "checked_against": checked.content_hash}

    @app.post("/v1/policies/reload")
    def reload_policies(caller: Caller, body: ReloadBody | None = None) -> Any:
        from meshctl.app.policies import reload_rules

        allowed(caller, Verb.POLICIES_MANAGE, "policies")
        said = reload_rules(service.context, None, (body or ReloadBody()).timeout_s)
        detail = {"result": said["outcome"], "policy_hash": said["policy_hash"]}
        store.append_audit(
            jobs.audit_entry(caller, "policies.reload", said["policies"], "allowed", **detail)
        )
        return said

    @app.post("/v1/mesh/up")
    def mesh_up(caller: Caller, body: UpBody | None = None) -> Any:
        from meshctl.server import mesh

        allowed(caller, Verb.MESH_MANAGE, "mesh")
        args = ["up", "--interval", str((body or UpBody()).interval)]
        return _audited(caller, "mesh.up", mesh.run(service.context, args))

    @app.post("/v1/mesh/down")
    def mesh_down(caller: Caller, body: DownBody | None = None) -> Any:
        from meshctl.server import mesh

        allowed(caller, Verb.MESH_MANAGE, "mesh")
        asked = body or DownBody()
        args = [
            "down",
            *(["--force"] if asked.force else []),
            *(["--drain"] if asked.drain else []),
        ]
        if asked.deadline is not None:
            args += ["--deadline", asked.deadline]
        waits = _drain_s(asked.deadline) if asked.drain else 0.0
        return _audited(caller, "mesh.down", mesh.run(service.context, args, waits + 300))

    def _audited(caller: Principal, action: str, said: dict[str, Any]) -> dict[str, Any]:
        entry = jobs.audit_entry(caller, action, "mesh", "allowed", exit_code=said["exit_code"])
        store.append_audit(entry)
        return said

    @app.get("/v1/audit")
    def audit(
        caller: Caller,
        after: Annotated[int, Query(ge=0)] = 0,
        limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
    ) -> Any:
        from dataclasses import asdict

        allowed(caller, Verb.AUDIT_READ)
        return [asdict(e) for e in store.audit(after_seq=after, limit=limit)]

    return app


def _drain_s(deadline: str | None) -> float:
    """How long a ``down --drain`` may wait: its deadline (10 minutes unless given)."""
    from meshctl.units import parse_duration_s

    try:
        return parse_duration_s(deadline or "10m")
    except ValueError as err:
        raise invalid(f"deadline: {err}") from None


def _manage(service: Service, caller: Principal, target: str, action: str, body: DrainBody) -> Any:
    """Cordon, drain or uncordon a node, audited in the same write."""
    import time

    from meshctl.app import nodes
    from meshctl.state import NodeState
    from meshctl.units import parse_duration_s

    store = service.store
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
        node = nodes.back_in_service(service.context.home, store, target, also=[entry])
    else:
        raise invalid(f"action: expected cordon, drain or uncordon, got {action!r}")
    service.context.nudge()
    return {"node": node.id, "state": node.state}


class _Asgi:
    """An ASGI application as a route's endpoint (Starlette takes a plain function for a
    request handler, and prometheus_client's application is one)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.app(scope, receive, send)


async def _capped_body(request: Request, cap: int) -> bytes:
    """The request body, refused (413) as soon as it passes ``cap`` bytes (read up to there,
    not refused on its declared length, so a client that sends it whole reads the answer)."""
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > cap:
            raise too_large(f"body: over {cap} bytes (meshctl server --max-upload)")
        chunks.append(chunk)
    return b"".join(chunks)


def _handlers(app: FastAPI) -> None:
    def answer(status: int, message: str) -> JSONResponse:
        headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
        return JSONResponse({"error": message}, status_code=status, headers=headers)

    @app.exception_handler(ApiError)
    async def api_error(_: Request, err: ApiError) -> JSONResponse:
        return answer(err.status, err.message)

    @app.exception_handler(RequestValidationError)
    async def malformed(_: Request, err: RequestValidationError) -> JSONResponse:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        return answer(422, f"{where}: {first.get('msg', 'invalid')}")

    @app.exception_handler(InvalidInput)
    async def invalid_input(_: Request, err: InvalidInput) -> JSONResponse:
        return answer(422, str(err))

    @app.exception_handler(StoreError)
    async def store_error(_: Request, err: StoreError) -> JSONResponse:
        return answer(503, f"state store: {err}")

    @app.exception_handler(Failure)  # the world failed: no controller running, a pool down
    async def failure(_: Request, err: Failure) -> JSONResponse:
        return answer(503, str(err))
