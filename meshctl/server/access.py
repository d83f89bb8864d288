"""What each role may do: one table, read by every route of the API server.

- ``user``: submit jobs charged to one of their teams; see and cancel their own jobs; read the
  mesh's status, nodes and pools.
- ``team-admin``: that, and see and cancel the jobs of their teams.
- ``platform-admin``: every job; nodes (cordon, drain, uncordon); reloading the policies;
  bringing the mesh up and down; checking the pools (preflights that call the clouds with
  the mesh's credentials); the audit log.

Reads of the mesh (status, nodes, pools, the policies in force) show capacity and rules, not
anyone's jobs, so every role has them. An administrative action (acting on another user's job,
on a node, on the policies, on the mesh) goes to the audit log, allowed or refused.
"""

from __future__ import annotations

from collections.abc import Collection
from enum import StrEnum
from typing import Final

from meshctl.server.identity import LOCAL, Principal
from meshctl.state import JobRecord, Role


class Verb(StrEnum):
    JOBS_SUBMIT = "jobs.submit"
    JOBS_READ = "jobs.read"
    JOBS_CANCEL = "jobs.cancel"
    STATUS_READ = "status.read"
    NODES_READ = "nodes.read"
    NODES_MANAGE = "nodes.manage"
    POOLS_READ = "pools.read"
    POOLS_CHECK = "pools.check"  # preflights: calls to the clouds, with the mesh's credentials
    POLICIES_READ = "policies.read"
    POLICIES_MANAGE = "policies.reload"
    MESH_MANAGE = "mesh.manage"
    AUDIT_READ = "audit.read"


class Reach(StrEnum):
    """Whose jobs a verb on jobs reaches."""

    OWN = "own"
    TEAMS = "teams"
    ALL = "all"


_EVERYONE: Final = {Verb.JOBS_SUBMIT, Verb.JOBS_READ, Verb.JOBS_CANCEL, Verb.STATUS_READ,
                    Verb.NODES_READ, Verb.POOLS_READ, Verb.POLICIES_READ}  # fmt: skip
ALLOWED: Final[dict[Role, frozenset[Verb]]] = {
    Role.USER: frozenset(_EVERYONE),
    Role.TEAM_ADMIN: frozenset(_EVERYONE),
    Role.PLATFORM_ADMIN: frozenset(Verb),
}
REACH: Final[dict[Role, Reach]] = {
    Role.USER: Reach.OWN,
    Role.TEAM_ADMIN: Reach.TEAMS,
    Role.PLATFORM_ADMIN: Reach.ALL,
}
ADMINISTRATIVE: Final = frozenset({Verb.NODES_MANAGE, Verb.POLICIES_MANAGE, Verb.MESH_MANAGE})
"""Verbs audited every time, allowed or refused (besides acting on another user's job)."""


def may(principal: Principal, verb: Verb) -> bool:
    """Whether the principal's role has the verb at all."""
    return verb in ALLOWED[principal.role]


def reaches(principal: Principal, job: JobRecord) -> bool:
    """Whether a verb on jobs may touch this job: one's own, a team's (team-admin), any
    (platform-admin)."""
    reach = REACH[principal.role]
    if reach is Reach.ALL or job.owner == principal.name:
        return True
    return reach is Reach.TEAMS and job.team in principal.teams


def administrative(principal: Principal, verb: Verb, job: JobRecord | None = None) -> bool:
    """Whether an action is audited: an administrative verb, or a verb on another's job."""
    if verb in ADMINISTRATIVE:
        return True
    return job is not None and verb is not Verb.JOBS_READ and job.owner != principal.name


def charged_team(principal: Principal, asked: str | None) -> str | None:
    """The team a new job of the principal is charged to: the one asked for, if it is one of
    theirs (``PermissionError`` if not); else their only team (``ValueError`` if several).
    The home's owner on its own host (``identity.LOCAL``) charges the team asked for, and a
    job that asks for none keeps its default (None)."""
    if principal == LOCAL:
        return asked
    mine: Collection[str] = principal.teams
    if asked:
        if asked not in mine:
            raise PermissionError(
                f"spec.team: {principal.name} may charge jobs to {', '.join(mine)}, not {asked!r}"
            )
        return asked
    if len(mine) == 1:
        return principal.teams[0]
    raise ValueError(f"spec.team: {principal.name} is in {', '.join(mine)}; pick one of them")
