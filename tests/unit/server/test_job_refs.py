"""A job reference through the API server: an id, a name (through its index) or a prefix of
an id (the keys just after it), among the jobs the principal reaches only; never a listing of
every job."""

from __future__ import annotations

import pytest

from meshctl.errors import InvalidRequestError, NotAllowedError, NotFoundError
from meshctl.server.identity import Principal
from meshctl.server.jobs import find
from meshctl.state import JobRecord, JobState, MemoryStore, Role

pytestmark = pytest.mark.unit

ALICE = Principal("alice", Role.USER, ("vision",))
LEAD = Principal("lead", Role.TEAM_ADMIN, ("vision",))


def store_of(*jobs: tuple[str, str, str, str]) -> MemoryStore:
    """(id, name, team, owner) each."""
    store = MemoryStore()
    for i, (job_id, name, team, owner) in enumerate(jobs):
        store.create(
            JobRecord(job_id, name, team, JobState.PENDING, 0, {}, None, float(i), 1.0, 0, owner)
        )
    return store


STORE = [
    ("a-100", "train", "vision", "alice"),
    ("a-101", "eval", "vision", "bob"),  # a teammate's
    ("a-102", "train2", "speech", "carol"),  # out of alice's and lead's reach
    *((f"b-{i:03d}", f"n{i}", "vision", "alice") for i in range(120)),  # more than a page
    ("c-1", "train2", "vision", "alice"),
]


@pytest.mark.parametrize(
    ("who", "ref", "found"),
    [
        pytest.param(ALICE, "a-100", "a-100", id="an id"),
        pytest.param(ALICE, "train", "a-100", id="a name"),
        pytest.param(ALICE, "train2", "c-1", id="a name another's job shares, out of reach"),
        pytest.param(ALICE, "a-1", "a-100", id="a prefix: one of the three is hers"),
        pytest.param(LEAD, "eval", "a-101", id="a teammate's job by name, for a team-admin"),
        pytest.param(ALICE, "b-119", "b-119", id="the last key of a long prefix"),
    ],
)
def test_a_reference_finds_the_one_job_it_names(who: Principal, ref: str, found: str) -> None:
    assert find(store_of(*STORE), who, ref).id == found


def test_a_prefix_of_many_names_the_first_few() -> None:
    with pytest.raises(InvalidRequestError, match=r"'b-' names more than 5 jobs \(b-000, b-001, "):
        find(store_of(*STORE), ALICE, "b-")


def test_a_prefix_of_jobs_out_of_reach_is_not_found() -> None:
    with pytest.raises(NotFoundError, match="no job with id or name 'a-10'"):
        find(store_of(*STORE[1:3]), ALICE, "a-10")


def test_a_job_out_of_reach_named_by_its_id_is_refused() -> None:
    with pytest.raises(NotAllowedError, match="job a-102: alice may not see it"):
        find(store_of(*STORE), ALICE, "a-102")
