"""Users, tokens and roles of a shared mesh: the pure half of the API server's checks."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from meshctl.errors import InvalidInput
from meshctl.server.access import ALLOWED, Verb, administrative, charged_team, may, reaches
from meshctl.server.identity import (
    KEPT,
    Authenticator,
    Principal,
    add_user,
    authenticate,
    digest,
    issue_token,
    revoke_tokens,
)
from meshctl.state import JobRecord, JobState, MemoryStore, Role, TokenRecord, UserRecord

pytestmark = pytest.mark.unit

ANA = Principal("ana", Role.USER, ("vision",))
BO = Principal("bo", Role.TEAM_ADMIN, ("search", "vision"))
ROOT = Principal("root", Role.PLATFORM_ADMIN, ("ops",))


def job(owner: str, team: str) -> JobRecord:
    return JobRecord("j1", "j", team, JobState.PENDING, 0, {}, None, 1.0, 1.0, owner=owner)


# --- tokens ------------------------------------------------------------------------------------


def test_a_new_users_token_authenticates_them_and_only_its_digest_is_stored() -> None:
    store = MemoryStore()
    user, token = add_user(store, "ana", ["vision", "vision"], Role.USER, 5.0)
    assert user.teams == ["vision"]
    assert authenticate(store, token) == ANA
    (record,) = store.list(TokenRecord, username="ana")
    secret = token.split("_", 2)[2]  # the secret may hold "_" too
    assert record.digest == digest(secret) != secret
    assert secret not in repr(store.list(TokenRecord)) + repr(store.audit())
    assert [(a.action, a.target) for a in store.audit()] == [("users.add", "ana")]


TOKEN_CASES = [
    # id, how the presented token is changed from a valid one
    pytest.param(lambda t: t[:-1] + ("A" if t[-1] != "A" else "B"), id="wrong-secret"),
    pytest.param(lambda t: t.replace("mct_", "xyz_"), id="wrong-prefix"),
    pytest.param(lambda t: t + "x", id="too-long"),
    pytest.param(lambda t: "", id="empty"),
    pytest.param(lambda t: "mct_0000000000000000_" + t.split("_", 2)[2], id="unknown-id"),
]


@pytest.mark.parametrize("change", TOKEN_CASES)
def test_a_changed_token_authenticates_no_one(change: object) -> None:
    store = MemoryStore()
    _, token = add_user(store, "ana", ["vision"], Role.USER, 5.0)
    assert authenticate(store, change(token)) is None  # type: ignore[operator]


def test_a_revoked_token_or_a_gone_user_authenticates_no_one() -> None:
    store = MemoryStore()
    _, first = add_user(store, "ana", ["vision"], Role.USER, 5.0)
    second = issue_token(store, "ana", 6.0)
    assert authenticate(store, second) == ANA
    assert revoke_tokens(store, "ana", 7.0) == 2
    assert authenticate(store, first) is None
    assert authenticate(store, second) is None
    third = issue_token(store, "ana", 8.0)
    user = store.get(UserRecord, "ana")
    assert user is not None
    store.delete(UserRecord, "ana", expected_version=user.version)
    assert authenticate(store, third) is None


class Reads(MemoryStore):
    """A memory store that counts the records read."""

    reads = 0

    def get(self, kind: Any, key: str) -> Any:
        self.reads += 1
        return super().get(kind, key)


def test_an_authenticator_keeps_a_valid_tokens_principal_for_its_seconds_only() -> None:
    store, now = Reads(), [0.0]
    _, token = add_user(store, "ana", ["vision"], Role.USER, 5.0)
    check = Authenticator(store, kept_for_s=2.0, clock=lambda: now[0])
    assert check(token) == ANA
    read = store.reads
    now[0] = 1.9
    assert check(token) == ANA
    assert store.reads == read  # kept: not read again
    revoke_tokens(store, "ana", 7.0)
    assert check(token) == ANA  # within its seconds, as documented
    now[0] = 2.0
    assert check(token) is None  # read again: revoked
    now[0] = 2.5
    assert check(token) is None  # a refusal is never kept
    assert store.reads > read + 1


def test_an_authenticator_keeping_nothing_reads_the_store_each_time() -> None:
    store = Reads()
    _, token = add_user(store, "ana", ["vision"], Role.USER, 5.0)
    check = Authenticator(store, kept_for_s=0.0, clock=lambda: 0.0)
    assert check(token) == ANA
    read = store.reads
    revoke_tokens(store, "ana", 7.0)
    assert check(token) is None
    assert store.reads > read


def test_an_authenticator_keeps_at_most_so_many_tokens() -> None:
    store, now = Reads(), [0.0]
    check = Authenticator(store, clock=lambda: now[0])
    _, first = add_user(store, "ana", ["vision"], Role.USER, 5.0)
    check(first)
    for _ in range(KEPT):  # tokens the store knows, so each is kept
        now[0] += 1e-6
        check(issue_token(store, "ana", 6.0))
    assert len(check._kept) <= KEPT
    read = store.reads
    check(first)  # the oldest went first
    assert store.reads > read


BAD_USERS = [
    # id, name, teams, error
    pytest.param("Ana", ["vision"], "NAME: expected a lower-case name", id="upper-case-name"),
    pytest.param("ana", [], "--team: a user needs at least one team", id="no-team"),
    pytest.param("local", ["vision"], "NAME: 'local' is the home's owner", id="the-local-name"),
    pytest.param("ana", ["vi sion"], "--team: expected a lower-case name", id="bad-team"),
]


@pytest.mark.parametrize(("name", "teams", "error"), BAD_USERS)
def test_a_bad_user_is_refused_and_nothing_is_written(
    name: str, teams: list[str], error: str
) -> None:
    store = MemoryStore()
    with pytest.raises(InvalidInput, match=error):
        add_user(store, name, teams, Role.USER, 1.0)
    assert store.list(UserRecord) == []
    assert store.list(TokenRecord) == []


def test_a_name_taken_is_refused() -> None:
    store = MemoryStore()
    add_user(store, "ana", ["vision"], Role.USER, 1.0)
    with pytest.raises(InvalidInput, match="exists already"):
        add_user(store, "ana", ["search"], Role.PLATFORM_ADMIN, 2.0)
    assert len(store.list(TokenRecord)) == 1


# --- roles -------------------------------------------------------------------------------------

ROLE_VERBS = [
    # role, verb, allowed
    (Role.USER, Verb.JOBS_SUBMIT, True),
    (Role.USER, Verb.JOBS_READ, True),
    (Role.USER, Verb.JOBS_CANCEL, True),
    (Role.USER, Verb.STATUS_READ, True),
    (Role.USER, Verb.NODES_READ, True),
    (Role.USER, Verb.POOLS_READ, True),
    (Role.USER, Verb.NODES_MANAGE, False),
    (Role.USER, Verb.AUDIT_READ, False),
    (Role.USER, Verb.POOLS_CHECK, False),
    (Role.TEAM_ADMIN, Verb.JOBS_SUBMIT, True),
    (Role.TEAM_ADMIN, Verb.JOBS_CANCEL, True),
    (Role.TEAM_ADMIN, Verb.NODES_MANAGE, False),
    (Role.TEAM_ADMIN, Verb.AUDIT_READ, False),
    (Role.TEAM_ADMIN, Verb.POOLS_CHECK, False),
    (Role.PLATFORM_ADMIN, Verb.NODES_MANAGE, True),
    (Role.PLATFORM_ADMIN, Verb.AUDIT_READ, True),
    (Role.PLATFORM_ADMIN, Verb.POOLS_CHECK, True),
]


@pytest.mark.parametrize(("role", "verb", "allowed"), ROLE_VERBS)
def test_what_each_role_may_do(role: Role, verb: Verb, allowed: bool) -> None:
    assert may(Principal("p", role, ("t",)), verb) is allowed


def test_every_role_and_verb_is_in_the_table() -> None:
    assert set(ALLOWED) == set(Role)
    assert {(r, v) for r, v, _ in ROLE_VERBS} >= {(r, Verb.NODES_MANAGE) for r in Role}


REACH = [
    # principal, job owner, job team, reached
    pytest.param(ANA, "ana", "vision", True, id="user-own"),
    pytest.param(ANA, "cy", "vision", False, id="user-teammates"),
    pytest.param(ANA, "dee", "search", False, id="user-other-team"),
    pytest.param(BO, "cy", "vision", True, id="team-admin-teams-job"),
    pytest.param(BO, "dee", "search", True, id="team-admin-second-team"),
    pytest.param(BO, "eve", "ops", False, id="team-admin-other-team"),
    pytest.param(BO, "bo", "ops", True, id="team-admin-own-in-other-team"),
    pytest.param(ROOT, "eve", "ops", True, id="platform-admin-any"),
    pytest.param(ROOT, "", "default", True, id="platform-admin-local-job"),
]


@pytest.mark.parametrize(("who", "owner", "team", "reached"), REACH)
def test_whose_jobs_each_role_reaches(who: Principal, owner: str, team: str, reached: bool) -> None:
    assert reaches(who, job(owner, team)) is reached


AUDITED = [
    # principal, verb, job owner (None: no job), audited
    pytest.param(ANA, Verb.JOBS_CANCEL, "ana", False, id="own-cancel"),
    pytest.param(BO, Verb.JOBS_CANCEL, "cy", True, id="cancel-of-another"),
    pytest.param(BO, Verb.JOBS_READ, "cy", False, id="reading-anothers"),
    pytest.param(ROOT, Verb.NODES_MANAGE, None, True, id="nodes"),
    pytest.param(ANA, Verb.NODES_MANAGE, None, True, id="nodes-refused-too"),
    pytest.param(ANA, Verb.JOBS_SUBMIT, None, False, id="submit"),
]


@pytest.mark.parametrize(("who", "verb", "owner", "audited"), AUDITED)
def test_which_actions_are_audited(who: Principal, verb: Verb, owner: str | None, audited: bool):
    target = None if owner is None else job(owner, "vision")
    assert administrative(who, verb, target) is audited


CHARGED = [
    # principal, team asked, team charged, or the error's type
    pytest.param(ANA, None, "vision", id="the-only-team"),
    pytest.param(ANA, "vision", "vision", id="asked-own"),
    pytest.param(ANA, "search", PermissionError, id="asked-another"),
    pytest.param(BO, "search", "search", id="one-of-several"),
    pytest.param(BO, None, ValueError, id="several-none-picked"),
    pytest.param(ROOT, "vision", PermissionError, id="platform-admin-is-charged-too"),
]


@pytest.mark.parametrize(("who", "asked", "expected"), CHARGED)
def test_the_team_a_job_is_charged_to(who: Principal, asked: str | None, expected: object):
    if isinstance(expected, str):
        assert charged_team(who, asked) == expected
    else:
        with pytest.raises(expected, match=r"spec\.team"):  # type: ignore[call-overload]
            charged_team(who, asked)


@given(
    teams=st.lists(st.sampled_from(["a", "b", "c", "d"]), min_size=1, max_size=4, unique=True),
    asked=st.one_of(st.none(), st.sampled_from(["a", "b", "c", "d", "e"])),
)
def test_a_job_is_only_ever_charged_to_one_of_the_users_teams(
    teams: list[str], asked: str | None
) -> None:
    who = replace(ANA, teams=tuple(teams))
    try:
        charged = charged_team(who, asked)
    except (PermissionError, ValueError):
        return
    assert charged in teams
    assert asked is None or charged == asked
