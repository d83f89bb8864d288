"""The API server's application: ``/v1/`` routes over one state store (FastAPI).

Every ``/v1/`` request carries ``Authorization: Bearer <token>`` (``meshctl admin users add``
prints one): without a valid one, 401; on the home's local API socket the caller is the home's
owner, known by the socket's peer credentials (``server/local.py``). A verb the principal's
role lacks, or a job out of their reach, is a 403 (``meshctl.server.access``). A malformed body
or query is a 422 naming the field (a job file's problems each in ``problems``, with its file
and line), a body over the cap a 413; every error is ``{"error": "one line"}`` and writes
nothing (a refused administrative action writes its audit entry, nothing else).

Routes: ``GET /v1/whoami``; ``POST /v1/jobs`` (submit), ``GET /v1/jobs``, ``GET
/v1/jobs/{job}``, ``GET /v1/jobs/{job}/logs``, ``GET /v1/jobs/{job}/explain``, ``POST
/v1/jobs/{job}/cancel``; ``GET /v1/status``; ``GET /v1/queues``; ``GET /v1/pools``, ``GET
/v1/pools/{pool}``, ``POST /v1/pools/check`` (preflights); ``GET /v1/policies``, ``POST
/v1/policies/reload``; ``POST /v1/mesh/up``, ``POST /v1/mesh/down``; ``GET /v1/nodes``, ``GET
/v1/nodes/{pool}/{node}``, ``POST /v1/nodes/{pool}/{node}/{cordon|drain|uncordon|health}``;
``GET /v1/audit``; ``GET /healthz`` and ``GET /metrics`` (no token).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.routing import Route

from meshctl.errors import Failure, InvalidInput, NotAllowedError, NotFoundError
from meshctl.problems import InvalidFileError
from meshctl.server.errors import ApiError
from meshctl.server.identity import Authenticator
from meshctl.server.routes import jobs, mesh, nodes, pools
from meshctl.server.served import Server
from meshctl.state import StoreError


def create_app(
    server: Server, metrics: Any | None = None, local_owner: int | None = None
) -> FastAPI:
    """The application, its routes one module per resource (``meshctl.server.routes``);
    ``metrics``: an ASGI app mounted at ``/metrics`` (no token: it holds counts per class,
    pool and team, never a job). ``local_owner``: the uid of the home's owner, for the home's
    local API socket (``server/local.py``), where that user, known by the socket's peer
    credentials, is the caller (``identity.LOCAL``) and no token is taken; None (the API
    server): every caller shows a token."""
    app = FastAPI(title="meshctl", version="1", docs_url=None, redoc_url=None,
                  openapi_url="/v1/openapi.json")  # fmt: skip
    app.state.server = server
    app.state.authenticate = Authenticator(server.loop_store or server.store, server.tokens_kept_s)
    app.state.local_owner = local_owner
    _handlers(app)
    if metrics is not None:  # at /metrics itself: a mount would redirect it to /metrics/
        app.router.routes.append(Route("/metrics", endpoint=_Asgi(metrics), methods=["GET"]))

    @app.get("/healthz")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    for resource in (jobs, pools, nodes, mesh):
        app.include_router(resource.router)
    return app


class _Asgi:
    """An ASGI application as a route's endpoint (Starlette takes a plain function for a
    request handler, and prometheus_client's application is one)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.app(scope, receive, send)


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
        if not isinstance(err, InvalidFileError):
            return answer(422, str(err))
        located = [{"file": p.path, "line": p.line, "field": p.field or None,
                    "message": p.message} for p in err.problems]  # fmt: skip
        return JSONResponse({"error": str(err.problems[0]), "problems": located}, 422)

    @app.exception_handler(NotFoundError)  # the most specific handler answers (by the MRO)
    async def not_found(_: Request, err: NotFoundError) -> JSONResponse:
        return answer(404, str(err))

    @app.exception_handler(NotAllowedError)
    async def not_allowed(_: Request, err: NotAllowedError) -> JSONResponse:
        return answer(403, str(err))

    @app.exception_handler(StoreError)
    async def store_error(_: Request, err: StoreError) -> JSONResponse:
        return answer(503, f"state store: {err}")

    @app.exception_handler(Failure)  # the world failed: no controller running, a pool down
    async def failure(_: Request, err: Failure) -> JSONResponse:
        return answer(503, str(err))
