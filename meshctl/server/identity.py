"""Who calls a shared mesh: users, their API tokens, and the principal a request acts as.

A token is ``mct_<id>_<secret>``: ``id`` names its ``TokenRecord``, the store keeps only the
SHA-256 of ``secret`` (``digest``), so a copy of the store gives no one a working token. A
token is shown once, when it is made. ``authenticate`` finds the token by its id and compares
digests in constant time; a revoked token, or one whose user is gone, authenticates no one.

A server process keeps who a token stood for ``CHECKED_FOR_S`` seconds (``Authenticator``): a
token revoked, or a user's role or teams changed, takes effect within that on every process
(Kubernetes keeps a webhook's answer for two minutes). An unknown token is never kept.

Users are managed on the server's host against its store (``meshctl admin users``), never over
HTTP: whoever can run that can read the store anyway.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from meshctl.errors import InvalidInput
from meshctl.state import (
    AuditEntry,
    ConflictError,
    Role,
    Store,
    TokenRecord,
    UserRecord,
)

TOKEN_PREFIX = "mct_"
_TOKEN = re.compile(r"mct_([0-9a-f]{16})_([A-Za-z0-9_-]{43})")
NAME = re.compile(r"[a-z][a-z0-9._-]{0,62}")
"""A user's or a team's name: what shows in tables, audit entries and job records."""
SYSTEM = "local"
"""The actor of an action taken on the server's host, not through a token."""


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a request acts as: a user, their role and the teams their jobs may be charged to."""

    name: str
    role: Role
    teams: tuple[str, ...]


LOCAL = Principal(SYSTEM, Role.PLATFORM_ADMIN, ())
"""The home's owner on its own host: ``meshctl submit`` in process, or through the home's
local API socket, whose caller is known by the socket's peer credentials, not by a token
(``meshctl.server.local``). Whoever runs as that user can read and write the home's store
anyway. Its jobs may be charged to any team (``access.charged_team``)."""


def digest(secret: str) -> str:
    """The SHA-256 of a token's secret half, as the store keeps it."""
    return hashlib.sha256(secret.encode()).hexdigest()


def new_token(username: str, now_s: float) -> tuple[TokenRecord, str]:
    """A fresh token for ``username``: the record to store, and the token to show once."""
    token_id, secret = secrets.token_hex(8), secrets.token_urlsafe(32)
    return TokenRecord(
        token_id, username, digest(secret), now_s
    ), f"{TOKEN_PREFIX}{token_id}_{secret}"


def authenticate(store: Store, token: str) -> Principal | None:
    """The principal a bearer token stands for; None for a malformed, unknown or revoked
    token, or one whose user is gone."""
    found = _TOKEN.fullmatch(token)
    if found is None:
        return None
    record = store.get(TokenRecord, found[1])
    if record is None or record.revoked_at_s is not None:
        return None
    if not hmac.compare_digest(record.digest, digest(found[2])):
        return None
    user = store.get(UserRecord, record.username)
    if user is None:
        return None
    return Principal(user.name, Role(user.role), tuple(user.teams))


CHECKED_FOR_S = 2.0
KEPT = 10_000  # tokens kept at most; past it, those checked longest ago go first


class Authenticator:
    """``authenticate`` on one store, its answers for valid tokens kept ``kept_for_s`` seconds
    (0: none kept). A server answers hundreds of requests a second from a few users; each
    check is two reads of the store. Not thread-safe: one event loop calls it."""

    def __init__(
        self,
        store: Store,
        kept_for_s: float = CHECKED_FOR_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store, self.kept_for_s, self._clock = store, kept_for_s, clock
        self._kept: dict[str, tuple[float, Principal]] = {}

    def __call__(self, token: str) -> Principal | None:
        now = self._clock()
        held = self._kept.get(token)
        if held is not None and now - held[0] < self.kept_for_s:
            return held[1]
        found = authenticate(self.store, token)
        if found is None:
            self._kept.pop(token, None)
        elif self.kept_for_s > 0:
            if len(self._kept) >= KEPT and token not in self._kept:
                oldest = sorted(self._kept, key=lambda t: self._kept[t][0])[: KEPT // 2]
                for gone in oldest:
                    del self._kept[gone]
            self._kept[token] = (now, found)
        return found


def check_name(field: str, value: str) -> str:
    """``value`` if it is a valid user or team name, else an ``InvalidInput`` naming ``field``."""
    if not NAME.fullmatch(value):
        raise InvalidInput(
            f"{field}: expected a lower-case name (letters, digits, '.', '_', '-'; "
            f"at most 63, starting with a letter), got {value!r}"
        )
    return value


def check_role(value: str) -> Role:
    try:
        return Role(value)
    except ValueError:
        roles = ", ".join(r.value for r in Role)
        raise InvalidInput(f"--role: expected one of {roles}, got {value!r}") from None


def add_user(
    store: Store, name: str, teams: Sequence[str], role: Role, now_s: float
) -> tuple[UserRecord, str]:
    """Store a new user and a first token for them; return the user and the token (shown
    once). The user and the audit entry commit together; a name taken is an ``InvalidInput``
    and nothing is written."""
    check_name("NAME", name)
    if name == SYSTEM:  # a user by that name would reach the jobs the home's owner submitted
        raise InvalidInput(f"NAME: {SYSTEM!r} is the home's owner on its own host; pick another")
    if not teams:
        raise InvalidInput("--team: a user needs at least one team to charge jobs to")
    for team in teams:
        check_name("--team", team)
    user = UserRecord(name, role, list(dict.fromkeys(teams)), now_s, now_s)
    entry = AuditEntry(
        now_s, SYSTEM, "host", "users.add", name, "allowed", {"role": role.value, "teams": teams}
    )
    try:
        stored = store.create(user, events=[entry])
    except ConflictError:
        raise InvalidInput(
            f"NAME: user {name!r} exists already (meshctl admin users list)"
        ) from None
    return stored, issue_token(store, name, now_s, audited=False)


def issue_token(store: Store, name: str, now_s: float, *, audited: bool = True) -> str:
    """A new token for an existing user; the token (shown once)."""
    if store.get(UserRecord, name) is None:
        raise InvalidInput(f"NAME: no user {name!r} (meshctl admin users list)")
    record, token = new_token(name, now_s)
    events = [AuditEntry(now_s, SYSTEM, "host", "tokens.add", name, "allowed", {"id": record.id})]
    store.create(record, events=events if audited else [])
    return token


def revoke_tokens(store: Store, name: str, now_s: float) -> int:
    """Revoke every live token of a user; how many were revoked."""
    from dataclasses import replace

    if store.get(UserRecord, name) is None:
        raise InvalidInput(f"NAME: no user {name!r} (meshctl admin users list)")
    revoked = 0
    for token in store.list(TokenRecord, username=name):
        if token.revoked_at_s is None:
            entry = AuditEntry(
                now_s, SYSTEM, "host", "tokens.revoke", name, "allowed", {"id": token.id}
            )
            store.update(
                replace(token, revoked_at_s=now_s), expected_version=token.version, events=[entry]
            )
            revoked += 1
    return revoked
