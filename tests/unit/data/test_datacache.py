"""The cache's rule (``meshctl.lifecycle.datacache``), pure: room is made least recently used
first, never from an entry a job needs, and not at all when it cannot be made."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from meshctl.lifecycle.datacache import Cached, entry_key, env_name, location_name, room

pytestmark = pytest.mark.unit

GIB = 1024**3


@pytest.mark.parametrize(
    ("entries", "capacity", "needed", "going"),
    [
        ([], 10, 10, []),
        ([Cached("a", 4, 1.0)], 10, 6, []),
        ([Cached("a", 4, 1.0), Cached("b", 4, 2.0)], 10, 4, ["a"]),
        ([Cached("a", 4, 3.0), Cached("b", 4, 2.0)], 10, 4, ["b"]),
        ([Cached("a", 4, 1.0, pinned=True), Cached("b", 4, 2.0)], 10, 4, ["b"]),
        ([Cached("a", 2, 1.0), Cached("b", 2, 2.0), Cached("c", 4, 3.0)], 10, 6, ["a", "b"]),
        ([Cached("a", 4, 1.0, pinned=True), Cached("b", 4, 2.0)], 10, 7, None),
        ([], 10, 11, None),
    ],
    ids=[
        "an empty cache: it fits",
        "room enough: nothing goes",
        "the least recently used goes",
        "recency, not insertion order",
        "a pinned entry stays, the next goes",
        "as many as it takes, oldest first",
        "not enough without the pinned one: nothing goes",
        "larger than the cache: nothing goes",
    ],
)
def test_room_is_made_least_recently_used_first_never_from_pinned(
    entries: list[Cached], capacity: int, needed: int, going: list[str] | None
) -> None:
    assert room(entries, capacity, needed) == going


entries_st = st.lists(
    st.builds(
        Cached,
        st.text("abcdefgh", min_size=1, max_size=3),
        st.integers(1, 10 * GIB),
        st.floats(0, 1e6),
        st.booleans(),
    ),
    max_size=12,
    unique_by=lambda e: e.key,
)


@given(entries_st, st.integers(0, 60 * GIB), st.integers(0, 20 * GIB))
def test_room_never_evicts_a_pinned_entry_and_frees_enough_or_nothing(
    entries: list[Cached], capacity: int, needed: int
) -> None:
    going = room(entries, capacity, needed)
    by_key = {e.key: e for e in entries}
    used = sum(e.size_bytes for e in entries)
    if going is None:
        unpinned = sum(e.size_bytes for e in entries if not e.pinned)
        assert used - unpinned + needed > capacity  # it truly cannot fit
        return
    assert not any(by_key[k].pinned for k in going)
    assert used - sum(by_key[k].size_bytes for k in going) + needed <= capacity
    if going:  # no more than needed: without its newest pick it would not fit
        assert used - sum(by_key[k].size_bytes for k in going[:-1]) + needed > capacity
        ages = [by_key[k].last_used_s for k in going]
        kept = [e.last_used_s for e in entries if not e.pinned and e.key not in going]
        assert ages == sorted(ages)
        assert not kept or max(ages) <= min(kept)


def test_keys_differ_by_location_and_version_and_read_as_the_data() -> None:
    a1 = entry_key("s3://corpus/v3", "1")
    assert a1 != entry_key("s3://corpus/v3", "2") != entry_key("s3://corpus/v4", "1")
    assert a1.startswith("v3-")
    assert "/" not in a1
    assert location_name("s3://corpus/v3") == entry_key("s3://corpus/v3", "")
    assert env_name("tokens-2024.v1") == "MESHCTL_DATA_TOKENS_2024_V1"
