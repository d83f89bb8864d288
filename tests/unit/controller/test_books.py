"""The controller's ledger kept between cycles (``charges.Books``): an instance is booked once
it has ended and never read again, and what it says equals a reading of every record."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from meshctl.controller.charges import Books
from meshctl.state import InstanceRecord, MemoryStore
from tests.unit.controller.test_history import Counting
from tests.unit.controller.test_loop import clouds_mesh

pytestmark = pytest.mark.unit
NOW = 1_800_000_000.0  # 2027-01-15
MESH, CATALOGS = clouds_mesh()[:2]


def record(n: int, state: str, launched_at_s: float, updated_at_s: float) -> InstanceRecord:
    return InstanceRecord(
        f"i-{n}", "east", "aws", f"burst-j{n % 3}-1", "g6.xlarge", state,  # type: ignore[arg-type]
        launched_at_s, updated_at_s,
    )  # fmt: skip


def every_record(store: MemoryStore, now: float) -> dict[tuple[str, str], float]:
    """What a ledger that reads every record says (a new one reads everything once)."""
    return Books(store).this_month(MESH, CATALOGS, now).usd


# Each step: launch an instance (its state, hours before now), end one (the n-th open one,
# terminated or interrupted), let time pass (hours), or read the books (a cycle): between
# two readings an instance may be launched and end.
LAUNCH = st.sampled_from(["joining", "ready", "reclaiming", "terminating"])
END = st.sampled_from(["terminated", "interrupted"])
STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("launch"), LAUNCH, st.floats(0, 2000)),
        st.tuples(st.just("end"), END, st.integers(0, 20)),
        st.tuples(st.just("tick"), st.just(""), st.floats(0, 400)),
        st.tuples(st.just("read"), st.just(""), st.just(0.0)),
    ),
    max_size=30,
)


@settings(max_examples=60, deadline=None)
@given(STEPS)
def test_the_books_kept_between_cycles_say_what_reading_every_record_says(
    steps: list[tuple[str, str, float]],
) -> None:
    store, now, made = MemoryStore(), NOW, 0
    books = Books(store)
    for kind, state, amount in [*steps, ("read", "", 0.0)]:
        if kind == "launch":
            store.create(record(made, state, now - amount * 3600, now))
            books.touched(f"i-{made}")  # as the controller's writes say
            made += 1
        elif kind == "end":
            ended = ("terminated", "interrupted")
            open_ = [r for r in store.list(InstanceRecord) if r.state not in ended]
            if open_:
                was = open_[int(amount) % len(open_)]
                store.update(replace(was, state=state, updated_at_s=now),  # type: ignore[arg-type]
                             expected_version=was.version)  # fmt: skip
        elif kind == "tick":
            now += amount * 3600
        else:
            kept = books.this_month(MESH, CATALOGS, now).usd
            assert kept == pytest.approx(every_record(store, now))


def test_a_cycle_reads_the_open_instances_and_those_that_ended_since_not_the_history() -> None:
    store = MemoryStore()
    store.create_all([record(n, "terminated", NOW - 90_000, NOW - 86_400) for n in range(200)])
    store.create_all([record(1000, "ready", NOW - 3600, NOW), record(1001, "ready", NOW, NOW)])
    counting = Counting(store)
    books = Books(counting)  # type: ignore[arg-type]
    first = books.this_month(MESH, CATALOGS, NOW)
    assert first.usd[("east", "-")] > 0  # priced from the catalogs (the jobs are gone: "-")
    assert counting.read["list InstanceRecord"] == 202  # the first reading: everything
    counting.read.clear()
    assert books.this_month(MESH, CATALOGS, NOW) is first  # the same moment: kept
    assert counting.read == {}
    books.this_month(MESH, CATALOGS, NOW + 1)  # the next cycle
    assert counting.read == {"list InstanceRecord": 2}  # the open ones
    ended = store.get(InstanceRecord, "i-1000")
    assert ended is not None
    store.update(replace(ended, state="terminated", updated_at_s=NOW + 60),  # type: ignore[arg-type]
                 expected_version=ended.version)  # fmt: skip
    counting.read.clear()
    after = books.this_month(MESH, CATALOGS, NOW + 3600)
    assert counting.read == {"list InstanceRecord": 1, "get InstanceRecord": 1}
    assert after.usd == pytest.approx(every_record(store, NOW + 3600))
    counting.read.clear()
    books.this_month(MESH, CATALOGS, NOW + 7200)
    assert counting.read == {"list InstanceRecord": 1}  # the ended one is booked: not read
    books.reset()  # new prices: everything again
    counting.read.clear()
    books.this_month(MESH, CATALOGS, NOW + 7200)
    assert counting.read["list InstanceRecord"] == 202


def test_an_instance_launched_and_ended_between_two_readings_is_booked() -> None:
    store = MemoryStore()
    books = Books(store)
    assert books.this_month(MESH, CATALOGS, NOW).usd == {}
    store.create(record(1, "ready", NOW - 3600, NOW))
    books.touched("i-1")
    ended = store.get(InstanceRecord, "i-1")
    assert ended is not None
    store.update(replace(ended, state="interrupted", updated_at_s=NOW),  # type: ignore[arg-type]
                 expected_version=ended.version)  # fmt: skip
    spent = books.this_month(MESH, CATALOGS, NOW + 60).usd
    assert spent[("east", "-")] > 0
    assert spent == pytest.approx(every_record(store, NOW + 60))


def test_a_reading_is_kept_for_its_moment_until_an_instance_is_touched() -> None:
    store = MemoryStore()
    store.create(record(1, "ready", NOW - 3600, NOW))
    books = Books(store)
    first = books.this_month(MESH, CATALOGS, NOW)
    assert books.this_month(MESH, CATALOGS, NOW) is first
    assert books.this_month(MESH, CATALOGS, NOW + 1) is not first
    again = books.this_month(MESH, CATALOGS, NOW + 1)
    books.touched("i-1")
    assert books.this_month(MESH, CATALOGS, NOW + 1) is not again
