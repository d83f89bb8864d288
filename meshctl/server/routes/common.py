"""What every route needs: the caller (``Caller``, from the bearer token), the server it runs in
(``Served``, from the application's state) and the check of the caller's role (``allowed``)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Request

from meshctl.server import jobs
from meshctl.server.access import ADMINISTRATIVE, Verb, may
from meshctl.server.errors import forbidden, unauthorised
from meshctl.server.identity import LOCAL, Principal
from meshctl.server.served import Server

PEER_UID = "meshctl.peer_uid"  # the scope's extension holding the caller's uid (local socket)


async def principal(request: Request) -> Principal:
    """Who the request's bearer token stands for; 401 without a valid one. Run on the event
    loop, not in a thread: a token checked in the last seconds is not read again, and two
    indexed reads of the store cost less than the hand-off. On the home's local API socket
    (``create_app``'s ``local_owner``): the home's owner (``LOCAL``), no token taken."""
    owner: int | None = request.app.state.local_owner
    if owner is not None:
        return local_caller(request.scope, owner)
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise unauthorised()
    found: Principal | None = request.app.state.authenticate(token.strip())
    if found is None:
        raise unauthorised("the token is not valid (revoked, or not this server's)")
    return found


def local_caller(scope: Any, owner: int) -> Principal:
    """The caller on the local socket, by the uid its peer credentials carry (``PEER_UID``,
    put in the request's scope by ``server/local.py``): the home's owner, or a 403 (401
    without credentials)."""
    uid = scope.get("extensions", {}).get(PEER_UID)
    if not isinstance(uid, int):
        raise unauthorised("the local API takes its caller from the socket's peer credentials")
    if uid != owner:
        raise forbidden(f"uid {uid} is not this home's owner (uid {owner}); ask them, or use "
                        "the API server with a token")  # fmt: skip
    return LOCAL


def server_of(request: Request) -> Server:
    """The server this application serves (``create_app`` keeps it in the app's state)."""
    found: Server = request.app.state.server
    return found


Caller = Annotated[Principal, Depends(principal)]
Served = Annotated[Server, Depends(server_of)]


def allowed(server: Server, caller: Principal, verb: Verb, target: str = "") -> None:
    """The caller's role may do ``verb``; else 403, and an administrative verb's refusal is
    written to the audit log."""
    if may(caller, verb):
        return
    why = f"{verb}: not allowed to a {caller.role.value}"
    if verb in ADMINISTRATIVE:
        raise jobs.refuse(server.store, caller, verb, target, why)
    raise forbidden(why)


def audited(server: Server, caller: Principal, action: str, said: dict[str, Any]) -> Any:
    """A command the server ran on its host (``mesh up``, ``mesh down``), audited with its
    exit code."""
    entry = jobs.audit_entry(caller, action, "mesh", "allowed", exit_code=said["exit_code"])
    server.store.append_audit(entry)
    return said
