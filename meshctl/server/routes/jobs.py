"""``POST /v1/jobs`` (submit), ``GET /v1/jobs``, ``GET /v1/jobs/{job}``, ``GET
/v1/jobs/{job}/logs``, ``GET /v1/jobs/{job}/explain``, ``POST /v1/jobs/{job}/cancel``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from meshctl.app.remote import warning_header
from meshctl.server import jobs
from meshctl.server.access import Verb
from meshctl.server.errors import too_large
from meshctl.server.routes.common import Caller, Served, allowed

if TYPE_CHECKING:
    from meshctl.app.submitting import Answer

router = APIRouter(prefix="/v1/jobs")


@router.post("", status_code=201)
async def submit(request: Request, caller: Caller, server: Served) -> Any:
    allowed(server, caller, Verb.JOBS_SUBMIT)
    raw = await _capped_body(request, server.max_body_bytes)
    body = jobs.parse_submission(raw)
    if jobs.light(body) and not server.planner.reads_pools():
        # on the event loop: a check and a write, about 1.5 ms of CPU; handing them to a
        # thread cost a third more (the hand-off, and the two contending for the GIL)
        quick = server.loop_store or server.store
        done = jobs.submit(server.planner, quick, caller, body, server.max_body_bytes)
    else:  # files, a loop to import, datasets to list, pools to ask over HTTP
        done = await run_in_threadpool(
            jobs.submit, server.planner, server.store, caller, body, server.max_body_bytes
        )
    return answered(done)


def answered(done: Answer) -> JSONResponse:
    """The submission's document; each of its warnings a ``Warning`` header (``299``, as
    the Kubernetes API server sends its warnings), which ``meshctl submit`` prints."""
    response = JSONResponse(done.document, status_code=201)
    for line in done.warnings:
        response.headers.append("Warning", warning_header(line))
    return response


@router.get("")
def list_jobs(
    caller: Caller, server: Served, state: str | None = None, team: str | None = None
) -> Any:
    allowed(server, caller, Verb.JOBS_READ)
    return jobs.rows(server.store, caller, state, team)


@router.get("/{ref}")
def show_job(ref: str, caller: Caller, server: Served) -> Any:
    allowed(server, caller, Verb.JOBS_READ)
    return jobs.show(server.context.home, server.store, caller, ref)


@router.get("/{ref}/logs")
def job_logs(
    ref: str,
    caller: Caller,
    server: Served,
    attempt: Annotated[int | None, Query(ge=1)] = None,
    offset: Annotated[int, Query(ge=0)] = 0,
) -> Any:
    allowed(server, caller, Verb.JOBS_READ)
    return jobs.logs(server.planner, server.store, caller, ref, attempt, offset)


@router.get("/{ref}/explain")
def explain_job(ref: str, caller: Caller, server: Served) -> Any:
    allowed(server, caller, Verb.JOBS_READ)
    return jobs.explain(server.context, server.store, caller, ref)


@router.post("/{ref}/cancel")
def cancel_job(ref: str, caller: Caller, server: Served) -> Any:
    allowed(server, caller, Verb.JOBS_CANCEL)
    return jobs.cancel(server.context, server.store, caller, ref)


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
