"""The ``Store`` contract, run against ``MemoryStore``, ``SqliteStore`` and ``PostgresStore``.

The Postgres cases run on a throwaway server (``tests/pgserver.py``): they are marked
``integration``, the others ``unit``."""

from __future__ import annotations

import itertools
import multiprocessing
import re
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from types import MappingProxyType
from typing import Any, cast

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from meshctl.state import (
    AttemptDetail,
    AttemptRecord,
    AuditEntry,
    ConflictError,
    Decision,
    Event,
    FencedError,
    Held,
    InstanceRecord,
    JobRecord,
    JobState,
    LeaseRecord,
    LoanRecord,
    MemoryStore,
    NodeDetail,
    NodeRecord,
    NotFoundError,
    PoolRecord,
    Record,
    Role,
    SqliteStore,
    Store,
    StoreError,
    TokenRecord,
    UserRecord,
    Write,
    open_store_at,
)
from meshctl.state.kinds import key_of
from meshctl.state.lease import CONTROLLER, acquire, release

JOB = JobRecord(
    id="j1",
    name="train",
    team="ml",
    state=JobState.PENDING,
    priority=5,
    spec={"image": "ray:2", "resources": {"gpu": 8}, "args": ["-x", 1, 2.5, None, True]},
    pool=None,
    submitted_at_s=1_700_000_000.25,
    updated_at_s=1_700_000_001.5,
)
SAMPLES: dict[str, Record] = {
    "job": JOB,
    "attempt": AttemptRecord("j1-1", "j1", 1, "onprem", "raysubmit_1", "running", 10.0, None),
    "pool": PoolRecord("onprem", "slurm", "ready", {"gpus_free": 12, "nodes": ["a", "b"]}, 10.0),
    "node": NodeRecord("n1", "onprem", "healthy", {"zone": "a"}, {"gpu": 8, "mem_gib": 512.0}, 1.0),
    "instance": InstanceRecord("i-1", "aws", "aws", "req-1", "p5.48xlarge", "pending", None, 1.0),
}
KIND_IDS = list(SAMPLES)
DETAILED: list[Record] = [  # the typed details, every field set or left at its default
    AttemptRecord(
        "j1-2", "j1", 2, "onprem", "raysubmit_2", "running", 10.0, None, "",
        AttemptDetail(
            allocations=(Held("n1", (0, 1), 1.0, 4.0, 32.0, 0.0), Held("n2", (3,), 0.5)),
            failures_before=1,
            runtime_s=None,
            checkpoint_uri="s3://b/j1",
            stop_at_s=20.5,
            for_job="j9",
            extra={"from_a_newer_meshctl": [1, "x"]},
        ),
    ),
    NodeRecord(
        "n2", "onprem", "unhealthy", {}, {}, 1.0,
        NodeDetail(first_seen_s=0.5, failures=2, reason="GPU XID 79", was="cordoned"),
    ),
]  # fmt: skip


def at_version(record: Record, version: int) -> Record:
    """``dataclasses.replace`` for any mutable record (mypy cannot replace on a union)."""
    new: Record = replace(cast(Any, record), version=version)
    return new


def changed(record: Record) -> Record:
    """The same record in another state (every mutable kind has a ``state`` field)."""
    new_state = JobState.RUNNING if isinstance(record, JobRecord) else "changed"
    new: Record = replace(cast(Any, record), state=new_state)
    return new


def ev(message: str, job_id: str | None = "j1", at_s: float = 1.0, **data: Any) -> Event:
    return Event(at_s=at_s, kind="test", job_id=job_id, message=message, data=data)


# --- the three backends -----------------------------------------------------------------------


@dataclass
class Backend:
    """A store under test, and how to run writers against it at the same time."""

    store: Store
    where: str | None  # None: in memory (writers are threads); a file or a URL (processes)

    def run_concurrently(self, target: Callable[..., None], *arg_sets: tuple[Any, ...]) -> None:
        """Run ``target(store, barrier, *args)`` once per arg set, all at once."""
        if self.where is None:
            _run_threads(self.store, target, arg_sets)
        else:
            _run_processes(self.where, target, arg_sets)


def _run_threads(store: Store, target: Callable[..., None], arg_sets: tuple[Any, ...]) -> None:
    barrier, errors = threading.Barrier(len(arg_sets)), []

    def run(args: tuple[Any, ...]) -> None:
        try:
            target(store, barrier, *args)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(args,)) for args in arg_sets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors, errors


def _in_process(where: str, target: Callable[..., None], barrier: Any, *args: Any) -> None:
    with open_store_at(where, Path("unused")) as store:
        target(store, barrier, *args)


def _run_processes(where: str, target: Callable[..., None], arg_sets: tuple[Any, ...]) -> None:
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(len(arg_sets))
    procs = [
        ctx.Process(target=_in_process, args=(where, target, barrier, *args)) for args in arg_sets
    ]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout=60)
    assert [proc.exitcode for proc in procs] == [0] * len(procs)


@pytest.fixture(
    params=[
        pytest.param("memory", marks=pytest.mark.unit),
        pytest.param("sqlite", marks=pytest.mark.unit),
        pytest.param("postgres", marks=pytest.mark.integration),
    ]
)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    where: str | None = None
    if request.param == "memory":
        store: Store = MemoryStore()
    elif request.param == "sqlite":
        where = str(tmp_path / "state.db")
        store = SqliteStore(where)
    else:  # psycopg is imported only where a Postgres store is opened
        from meshctl.state.postgres_dialect import PostgresStore

        where = request.getfixturevalue("pg_url")
        store = PostgresStore(where)
    with store:
        yield Backend(store, where)


@pytest.fixture
def store(backend: Backend) -> Store:
    return backend.store


# --- versioned records ------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KIND_IDS)
def test_create_stores_version_1_and_round_trips(store: Store, kind: str) -> None:
    record = at_version(SAMPLES[kind], 7)
    created = store.create(record)
    assert created == at_version(record, 1)
    assert store.get(type(record), key_of(record)) == created
    assert store.list(type(record)) == [created]


@pytest.mark.parametrize("kind", KIND_IDS)
def test_create_existing_key_conflicts(store: Store, kind: str) -> None:
    first = store.create(SAMPLES[kind])
    with pytest.raises(ConflictError, match=rf"{kind} '{key_of(first)}' already exists"):
        store.create(changed(SAMPLES[kind]), events=[ev("must not be kept")])
    assert store.get(type(first), key_of(first)) == first
    assert store.events() == []


def test_get_missing_is_none(store: Store) -> None:
    assert store.get(JobRecord, "nope") is None


UPDATE_CASES = [
    # id, expected version given (None: record missing), error
    pytest.param(1, None, id="current-version"),
    pytest.param(0, ConflictError, id="stale-version"),
    pytest.param(2, ConflictError, id="version-from-the-future"),
    pytest.param(None, NotFoundError, id="missing-record"),
]


@pytest.mark.parametrize("kind", KIND_IDS)
@pytest.mark.parametrize(("expected", "error"), UPDATE_CASES)
def test_update(store: Store, kind: str, expected: int | None, error: type[Exception]) -> None:
    original = SAMPLES[kind]
    if expected is not None:
        store.create(original)
    new = changed(original)
    if error is None:
        assert store.update(new, expected_version=1) == at_version(new, 2)
        assert store.get(type(new), key_of(new)) == at_version(new, 2)
        return
    with pytest.raises(error):
        store.update(new, expected_version=1 if expected is None else expected)
    stored = store.get(type(new), key_of(new))
    assert stored == (None if expected is None else at_version(original, 1))


def test_conflict_message_names_kind_key_and_versions(store: Store) -> None:
    job = store.create(JOB)
    store.update(changed(job), expected_version=1)
    with pytest.raises(ConflictError) as info:
        store.update(job, expected_version=1)
    assert re.search(r"job 'j1'.*expected version 1.*found version 2", str(info.value))
    assert (info.value.kind, info.value.key, info.value.expected, info.value.actual) == (
        "job",
        "j1",
        1,
        2,
    )


def test_update_ignores_the_version_field_of_the_record(store: Store) -> None:
    job = store.create(JOB)
    assert store.update(replace(job, version=42), expected_version=1).version == 2


DELETE_CASES = [
    pytest.param(True, 1, None, id="current-version"),
    pytest.param(True, 3, ConflictError, id="stale-version"),
    pytest.param(False, 1, NotFoundError, id="missing-record"),
]


@pytest.mark.parametrize("kind", KIND_IDS)
@pytest.mark.parametrize(("exists", "expected", "error"), DELETE_CASES)
def test_delete(
    store: Store, kind: str, exists: bool, expected: int, error: type[Exception] | None
) -> None:
    record = SAMPLES[kind]
    if exists:
        store.create(record)
    if error is not None:
        with pytest.raises(error):
            store.delete(type(record), key_of(record), expected_version=expected)
        assert (store.get(type(record), key_of(record)) is not None) == exists
        return
    store.delete(type(record), key_of(record), expected_version=expected)
    assert store.get(type(record), key_of(record)) is None
    assert store.create(record).version == 1  # the key is free again


# --- writes and their events: one transaction -------------------------------------------------


def _create(store: Store) -> None:
    store.create(JOB, events=[ev("created"), ev("queued")])


def _update(store: Store) -> None:
    store.create(JOB)
    store.update(changed(JOB), expected_version=1, events=[ev("created"), ev("queued")])


def _delete(store: Store) -> None:
    store.create(JOB)
    store.delete(JobRecord, "j1", expected_version=1, events=[ev("created"), ev("queued")])


@pytest.mark.parametrize("write", [_create, _update, _delete], ids=["create", "update", "delete"])
def test_write_appends_its_events(store: Store, write: Callable[[Store], None]) -> None:
    write(store)
    assert [(e.message, e.seq) for e in store.events()] == [("created", 1), ("queued", 2)]


ROLLBACK_CASES = [
    pytest.param("update", 0, ConflictError, id="update-stale"),
    pytest.param("update", None, NotFoundError, id="update-missing"),
    pytest.param("delete", 5, ConflictError, id="delete-stale"),
    pytest.param("delete", None, NotFoundError, id="delete-missing"),
]


@pytest.mark.parametrize(("op", "expected", "error"), ROLLBACK_CASES)
def test_failed_write_appends_no_events(
    store: Store, op: str, expected: int | None, error: type[Exception]
) -> None:
    if expected is not None:
        store.create(JOB)
    events = [ev("must not be kept"), ev("nor this")]
    version = 1 if expected is None else expected
    if op == "update":
        write: Callable[..., object] = partial(store.update, changed(JOB), expected_version=version)
    else:
        write = partial(store.delete, JobRecord, "j1", expected_version=version)
    with pytest.raises(error):
        write(events=events)
    assert store.events() == []
    store.append_event(ev("next"))
    assert [e.message for e in store.events()] == ["next"]


def test_unserialisable_payload_stores_nothing(store: Store) -> None:
    with pytest.raises(TypeError):
        store.create(replace(JOB, spec={"bad": object()}), events=[ev("x")])
    with pytest.raises(TypeError):
        store.create(JOB, events=[ev("x", bad=object())])
    assert store.get(JobRecord, "j1") is None
    assert store.events() == []


@pytest.mark.parametrize("record", DETAILED, ids=["attempt", "node"])
def test_details_round_trip(store: Store, record: Record) -> None:
    created = store.create(record)
    assert created == at_version(record, 1)
    assert store.get(type(record), key_of(record)) == created
    again = store.update(changed(created), expected_version=1)
    assert store.get(type(record), key_of(record)) == again == at_version(changed(record), 2)


@pytest.mark.parametrize(
    "record",
    [
        replace(SAMPLES["attempt"], detail=cast(Any, {"stop_at_s": 1.0})),
        replace(SAMPLES["node"], detail=cast(Any, {"reason": "x"})),
    ],
    ids=["attempt", "node"],
)
def test_a_detail_that_is_not_its_type_stores_nothing(store: Store, record: Record) -> None:
    with pytest.raises(TypeError, match="detail: expected"):
        store.create(record, events=[ev("x")])
    assert store.get(type(record), key_of(record)) is None
    assert store.events() == []


def test_job_state_may_be_a_plain_string_but_must_be_valid(store: Store) -> None:
    created = store.create(replace(JOB, state=cast(JobState, "running")))
    assert created.state is JobState.RUNNING
    with pytest.raises(ValueError, match="bogus"):
        store.update(replace(JOB, state=cast(JobState, "bogus")), expected_version=1)
    assert store.get(JobRecord, "j1") == created


# --- append-only logs -------------------------------------------------------------------------


def test_events_get_increasing_seq_in_append_order(store: Store) -> None:
    appended = [store.append_event(ev(f"m{i}", job_id=f"j{i % 3}")) for i in range(10)]
    seqs = [e.seq for e in appended]
    assert seqs == sorted(set(seqs))
    assert len(seqs) == 10
    assert seqs[0] >= 1
    assert store.events() == appended


def _seed_log(store: Store) -> None:
    for i in range(6):
        store.append_event(ev(f"e{i}", job_id=("a", "b", None)[i % 3]))
        store.record_decision(Decision(float(i), "ab"[i % 2], f"d{i}", "h", {"rank": i}))


LOG_QUERIES = [
    pytest.param({}, ["0", "1", "2", "3", "4", "5"], id="all"),
    pytest.param({"job_id": "a"}, ["0", "3"], id="one-job"),
    pytest.param({"after_seq": 4}, ["4", "5"], id="after-seq"),
    pytest.param({"limit": 2}, ["0", "1"], id="limit"),
    pytest.param({"limit": 0}, [], id="limit-zero"),
    pytest.param({"job_id": "b", "after_seq": 2, "limit": 1}, ["4"], id="all-three"),
    pytest.param({"job_id": "zzz"}, [], id="unknown-job"),
]


@pytest.mark.parametrize(("query", "expected"), LOG_QUERIES)
def test_event_queries(store: Store, query: dict[str, Any], expected: list[str]) -> None:
    _seed_log(store)
    assert [e.message for e in store.events(**query)] == [f"e{i}" for i in expected]


@pytest.mark.parametrize(
    ("limit", "expected"),
    [(0, ""), (2, "45"), (6, "012345"), (50, "012345")],
    ids=["none", "the-last-two", "all-exactly", "more-than-there-are"],
)
def test_the_newest_events_are_the_log_s_end_in_order(
    store: Store, limit: int, expected: str
) -> None:
    _seed_log(store)  # decisions between them: another log, never counted here
    assert [e.message for e in store.newest_events(limit)] == [f"e{i}" for i in expected]


DECISION_QUERIES = [
    pytest.param({}, "012345", id="all"),
    pytest.param({"job_id": "b"}, "135", id="one-job"),
    pytest.param({"after_seq": 3, "limit": 2}, "34", id="page"),
]


@pytest.mark.parametrize(("query", "expected"), DECISION_QUERIES)
def test_decision_queries(store: Store, query: dict[str, Any], expected: str) -> None:
    _seed_log(store)
    found = store.decisions(**query)
    assert [d.outcome for d in found] == [f"d{i}" for i in expected]
    assert [d.seq for d in found] == sorted(d.seq for d in found)
    assert all(d.explanation == {"rank": int(d.outcome[1])} for d in found)


def test_decisions_recorded_together_get_seqs_in_order_after_earlier_ones(store: Store) -> None:
    first = store.record_decision(Decision(1.0, "j0", "d0", "h", {}))
    batch = [Decision(2.0, f"j{i}", f"d{i}", "h", {"rank": i}) for i in range(1, 4)]
    recorded = store.record_decisions(batch)
    assert [d.outcome for d in recorded] == ["d1", "d2", "d3"]
    assert [d.seq for d in recorded] == sorted({d.seq for d in recorded})
    assert recorded[0].seq > first.seq
    assert store.decisions() == [first, *recorded]
    assert store.record_decisions([]) == []


def test_a_jobs_files_are_kept_once_and_forgotten(store: Store) -> None:
    archive = bytes(range(256)) * 1000  # not text: every byte value
    assert store.package("j1") is None
    store.put_package("j1", archive)
    store.put_package("j2", b"other")
    assert store.package("j1") == archive
    with pytest.raises(ConflictError, match="package 'j1' already exists"):
        store.put_package("j1", b"again")  # an id drawn twice: the first job's files stay
    assert (store.package("j1"), store.package("j2")) == (archive, b"other")
    store.delete_package("j1")
    store.delete_package("j1")  # none kept: nothing to do
    assert (store.package("j1"), store.package("j2")) == (None, b"other")
    store.put_package("j1", b"new")
    assert store.package("j1") == b"new"


@pytest.mark.parametrize("query", [{"after_seq": -1}, {"limit": -1}], ids=["after", "limit"])
def test_bad_log_paging_is_value_error(store: Store, query: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=next(iter(query))):
        store.events(**query)


# --- list and its filters ---------------------------------------------------------------------


def _seed_records(store: Store) -> None:
    jobs: list[tuple[str, JobState, str, str | None]] = [
        ("j3", JobState.RUNNING, "ml", "onprem"),
        ("j1", JobState.PENDING, "ml", None),
        ("j2", JobState.RUNNING, "infra", "aws"),
        ("j4", JobState.RUNNING, "ml", "aws"),
    ]
    for key, job_state, team, pool in jobs:
        store.create(replace(JOB, id=key, state=job_state, team=team, pool=pool))
    for key, job_id, state in [
        ("j1-1", "j1", "failed"),
        ("j1-2", "j1", "running"),
        ("j2-1", "j2", "running"),
    ]:
        store.create(AttemptRecord(key, job_id, int(key[-1]), "p", "s", state, None, None))
    for key, pool, state in [
        ("n2", "onprem", "healthy"),
        ("n1", "onprem", "cordoned"),
        ("n3", "aws", "healthy"),
    ]:
        store.create(NodeRecord(key, pool, state, {}, {}, 1.0))
        store.create(InstanceRecord(f"i-{key}", pool, "aws", "r", "t", state, None, 1.0))
    for name, provider, state in [
        ("onprem", "slurm", "ready"),
        ("aws", "aws", "ready"),
        ("gcp", "gcp", "down"),
    ]:
        store.create(PoolRecord(name, provider, state, {}, 1.0))


LIST_CASES = [
    pytest.param(JobRecord, {}, ["j1", "j2", "j3", "j4"], id="jobs-all-ordered-by-key"),
    pytest.param(JobRecord, {"state": JobState.RUNNING}, ["j2", "j3", "j4"], id="jobs-by-state"),
    pytest.param(JobRecord, {"state": "running", "team": "ml"}, ["j3", "j4"], id="jobs-state-team"),
    pytest.param(JobRecord, {"pool": "aws"}, ["j2", "j4"], id="jobs-by-pool"),
    pytest.param(JobRecord, {"pool": None}, ["j1"], id="jobs-without-pool"),
    pytest.param(JobRecord, {"team": "nobody"}, [], id="jobs-no-match"),
    pytest.param(AttemptRecord, {"job_id": "j1"}, ["j1-1", "j1-2"], id="attempts-by-job"),
    pytest.param(AttemptRecord, {"state": "running"}, ["j1-2", "j2-1"], id="attempts-by-state"),
    pytest.param(NodeRecord, {"pool": "onprem"}, ["n1", "n2"], id="nodes-by-pool"),
    pytest.param(NodeRecord, {"pool": "onprem", "state": "healthy"}, ["n2"], id="nodes-by-both"),
    pytest.param(InstanceRecord, {"state": "healthy"}, ["i-n2", "i-n3"], id="instances-by-state"),
    pytest.param(InstanceRecord, {"pool": "aws"}, ["i-n3"], id="instances-by-pool"),
    pytest.param(PoolRecord, {"provider": "aws"}, ["aws"], id="pools-by-provider"),
    pytest.param(PoolRecord, {"state": "ready"}, ["aws", "onprem"], id="pools-by-state"),
    pytest.param(
        JobRecord, {"state": {JobState.PENDING, "running"}}, ["j1", "j2", "j3", "j4"], id="any-of"
    ),
    pytest.param(
        JobRecord, {"state": ("pending",), "team": ["ml", "infra"]}, ["j1"], id="any-of-each"
    ),
    pytest.param(AttemptRecord, {"job_id": ["j2", "j9"]}, ["j2-1"], id="attempts-of-jobs"),
    pytest.param(AttemptRecord, {"job_id": []}, [], id="none-of-nothing"),
    pytest.param(JobRecord, {"id": ["j4", "j2", "j9"]}, ["j2", "j4"], id="jobs-by-key"),
    pytest.param(NodeRecord, {"id": "n2", "pool": "onprem"}, ["n2"], id="nodes-by-key-and-pool"),
    pytest.param(JobRecord, {"after": "j2"}, ["j3", "j4"], id="page-after"),
    pytest.param(JobRecord, {"limit": 2}, ["j1", "j2"], id="page-limit"),
    pytest.param(JobRecord, {"after": "j1", "limit": 2}, ["j2", "j3"], id="page-after-limit"),
    pytest.param(JobRecord, {"state": "running", "after": "j2"}, ["j3", "j4"], id="page-filter"),
    pytest.param(JobRecord, {"limit": 0}, [], id="page-empty"),
]


@pytest.mark.parametrize(("kind", "filters", "expected"), LIST_CASES)
def test_list_filters(
    store: Store, kind: type[Record], filters: dict[str, Any], expected: list[str]
) -> None:
    _seed_records(store)
    assert [key_of(r) for r in store.list(kind, **filters)] == expected


UNKNOWN_FILTERS = [
    pytest.param(JobRecord, "submitted_at_s", id="job-submitted"),
    pytest.param(JobRecord, "priority", id="job-priority"),
    pytest.param(AttemptRecord, "pool", id="attempt-pool"),
    pytest.param(NodeRecord, "labels", id="node-labels"),
    pytest.param(InstanceRecord, "provider", id="instance-provider"),
    pytest.param(PoolRecord, "observed", id="pool-observed"),
]


@pytest.mark.parametrize(("kind", "name"), UNKNOWN_FILTERS)
def test_unknown_filter_is_value_error(store: Store, kind: type[Record], name: str) -> None:
    with pytest.raises(ValueError, match=rf"cannot filter \w+ by {name}; use: "):
        store.list(kind, **{name: "x"})
    with pytest.raises(ValueError, match=rf"cannot filter \w+ by {name}; use: "):
        store.versions(kind, **{name: "x"})


@pytest.mark.parametrize(("kind", "filters", "expected"), LIST_CASES[:-5])  # not the pages
def test_versions_name_what_list_finds_at_its_versions(
    store: Store, kind: type[Record], filters: dict[str, Any], expected: list[str]
) -> None:
    _seed_records(store)
    j1 = store.get(JobRecord, "j1")
    assert j1 is not None
    store.update(j1, expected_version=1)  # j1 at version 2, where it was
    found = store.versions(kind, **filters)
    assert sorted(found) == expected
    assert found == {key_of(r): r.version for r in store.list(kind, **filters)}


def test_a_negative_limit_is_value_error(store: Store) -> None:
    with pytest.raises(ValueError, match="limit must be >= 0"):
        store.list(JobRecord, limit=-1)


def test_many_values_of_one_filter(store: Store) -> None:
    """More values than one SQLite statement takes are asked in parts, still one sorted list."""
    ids = [f"j{i:05d}" for i in range(25_000)]
    store.create_all([replace(JOB, id=i) for i in ids[::2]])
    found = store.list(JobRecord, state=JobState.PENDING, after="j00010", limit=3)
    assert [r.id for r in found] == ["j00012", "j00014", "j00016"]
    everything = store.list(JobRecord, state=[s.value for s in JobState])
    assert [r.id for r in everything] == ids[::2]
    assert store.versions(JobRecord, id=ids) == dict.fromkeys(ids[::2], 1)


def test_create_all_writes_every_record_or_none(store: Store) -> None:
    attempt = SAMPLES["attempt"]
    store.create_all([JOB, attempt, replace(JOB, id="j2")])
    assert store.get(JobRecord, "j2") == at_version(replace(JOB, id="j2"), 1)
    assert store.get(AttemptRecord, key_of(attempt)) == at_version(attempt, 1)
    for clash in ([replace(JOB, id="j3"), JOB], [replace(JOB, id="j4"), replace(JOB, id="j4")]):
        with pytest.raises(ConflictError, match=r"job 'j[14]' already exists"):
            store.create_all(clash)
    assert [r.id for r in store.list(JobRecord)] == ["j1", "j2"]


def test_write_all_writes_in_order_and_answers_each_write(store: Store) -> None:
    attempt = SAMPLES["attempt"]
    store.create_all([JOB, replace(JOB, id="j2")])
    moved = replace(JOB, state=JobState.ADMITTED)
    answer = store.write_all(
        [
            Write(moved, 1, [ev("j1 admitted")]),
            Write(replace(moved, state=JobState.DISPATCHED), 2, [ev("j1 dispatched")]),
            Write(replace(JOB, id="j2"), 7, [ev("lost")]),  # a version moved
            Write(replace(JOB, id="gone"), 1),  # never stored
            Write(JOB),  # a key taken
            Write(attempt, None, [ev("attempt")]),
        ]
    )
    assert answer[:2] == [at_version(moved, 2), at_version(replace(moved, state="dispatched"), 3)]
    assert isinstance(answer[2], ConflictError)
    assert answer[2].actual == 1
    assert isinstance(answer[3], NotFoundError)
    assert isinstance(answer[4], ConflictError)
    assert answer[4].expected is None
    assert answer[5] == at_version(attempt, 1) == store.get(AttemptRecord, key_of(attempt))
    assert store.get(JobRecord, "j1") == answer[1]
    assert store.get(JobRecord, "j2") == at_version(replace(JOB, id="j2"), 1)
    assert [e.message for e in store.events()] == ["j1 admitted", "j1 dispatched", "attempt"]
    assert store.write_all([]) == []


@pytest.mark.parametrize("kind", [Event, Decision, dict], ids=["event", "decision", "dict"])
def test_not_a_record_kind_is_type_error(store: Store, kind: type[Any]) -> None:
    with pytest.raises(TypeError, match="not a state record type"):
        store.get(kind, "x")


# --- JSON payloads ----------------------------------------------------------------------------


JSON_CASES = [
    pytest.param({"a": {"b": [1, 2.5, None, True, "x"]}}, None, id="nested"),
    pytest.param({"emoji": "\u2713 \u00fc \U0001f680", "quote": "'\\\""}, None, id="unicode"),
    pytest.param({"big": 2**62, "neg": -1, "tiny": 1e-300}, None, id="numbers"),
    pytest.param({"t": (1, 2)}, {"t": [1, 2]}, id="tuple-becomes-list"),
    pytest.param(
        MappingProxyType({"m": MappingProxyType({"x": 1})}), {"m": {"x": 1}}, id="mapping"
    ),
    pytest.param({}, None, id="empty"),
]


@pytest.mark.parametrize(("payload", "expected"), JSON_CASES)
def test_json_payload_round_trip(
    store: Store, payload: Mapping[str, Any], expected: dict[str, Any] | None
) -> None:
    want = payload if expected is None else expected
    store.create(replace(JOB, spec=payload))
    store.create(NodeRecord("n", "p", "healthy", {"k": "v"}, payload, 1.0))
    store.create(PoolRecord("p", "x", "ready", payload, 1.0))
    stored = store.get(JobRecord, "j1")
    assert stored is not None
    assert stored.spec == want
    assert [n.resources for n in store.list(NodeRecord)] == [want]
    assert [p.observed for p in store.list(PoolRecord)] == [want]
    assert store.append_event(ev("x", **payload)).data == want
    assert store.events()[0].data == want
    assert store.record_decision(Decision(1.0, "j1", "ok", "h", payload)).explanation == want


def test_timestamps_come_back_as_floats(store: Store) -> None:
    created = store.create(replace(JOB, submitted_at_s=3, updated_at_s=4))
    stored = store.get(JobRecord, "j1")
    assert stored == created
    assert isinstance(stored.submitted_at_s, float)


def test_timestamps_round_trip_bit_exact(store: Store) -> None:
    awkward = [0.1 + 0.2, 1e-300, 1_733_390_000.123456789, 2.0**53 + 2, 5e-324, -1.5]
    for i, at_s in enumerate(awkward):
        store.create(replace(JOB, id=f"j{i}", submitted_at_s=at_s, updated_at_s=at_s))
        store.append_event(ev(f"e{i}", at_s=at_s))
    assert [j.submitted_at_s.hex() for j in store.list(JobRecord)] == [t.hex() for t in awkward]
    assert [e.at_s.hex() for e in store.events()] == [t.hex() for t in awkward]


def test_keys_are_ordered_by_code_point(store: Store) -> None:
    """Whatever the database's collation: "Z" < "a-b" < "aB" < "ab" < "z" < "é"."""
    keys = ["ab", "a-b", "aB", "Z", "z", "\u00e9", "a b", "a_b", "a"]
    store.create_all([replace(JOB, id=k) for k in keys])
    assert [r.id for r in store.list(JobRecord)] == sorted(keys)
    assert [r.id for r in store.list(JobRecord, after="a-b")] == [
        k for k in sorted(keys) if k > "a-b"
    ]


def test_flags_and_loans_round_trip(store: Store) -> None:
    spot = store.create(InstanceRecord("i-2", "aws", "aws", "r", "t", "ready", 1.0, 2.0, True))
    assert store.get(InstanceRecord, "i-2") == spot
    assert spot.spot
    loan = LoanRecord("l1", "j1", "j2", "onprem", "n1", 2.0, 10.0)
    created = store.create(loan)
    store.create(replace(loan, id="l2", borrower="j3", pool="aws"))
    assert store.get(LoanRecord, "l1") == created == replace(loan, version=1)
    assert [x.id for x in store.list(LoanRecord, borrower="j3")] == ["l2"]
    assert [x.id for x in store.list(LoanRecord, lender="j1", pool="onprem")] == ["l1"]
    closed = store.update(replace(created, closed_at_s=20.0, lost_gpu_s=7.5), expected_version=1)
    assert store.get(LoanRecord, "l1") == closed


# --- lifecycle --------------------------------------------------------------------------------


def test_closed_store_refuses_calls(store: Store) -> None:
    store.close()
    store.close()  # twice is fine
    with pytest.raises(StoreError, match="closed"):
        store.get(JobRecord, "j1")
    with pytest.raises(StoreError, match="closed"):
        store.append_event(ev("x"))


def test_context_manager_closes(backend: Backend) -> None:
    with backend.store as store:
        store.create(JOB)
    with pytest.raises(StoreError):
        backend.store.list(JobRecord)


# --- concurrency ------------------------------------------------------------------------------


_example_ids = itertools.count()


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    ops=st.lists(
        st.tuples(st.sampled_from([0, 1]), st.sampled_from(["update", "refresh"])), max_size=25
    )
)
def test_stale_controllers_never_lose_an_update(store: Store, ops: list[tuple[int, str]]) -> None:
    key = f"job-{next(_example_ids)}"
    job = store.create(replace(JOB, id=key, spec={"counter": 0}))
    held: list[JobRecord] = [job, job]  # what each controller last read
    successes = 0
    for who, op in ops:
        if op == "refresh":
            fresh = store.get(JobRecord, key)
            assert fresh is not None
            held[who] = fresh
            continue
        mine = held[who]
        bumped = replace(mine, spec={"counter": mine.spec["counter"] + 1})
        try:
            held[who] = store.update(bumped, expected_version=mine.version)
        except ConflictError:
            assert mine.version != successes + 1  # refused only when it really was stale
            continue
        successes += 1
        assert held[who].version == successes + 1
    final = store.get(JobRecord, key)
    assert final is not None
    assert final.version == successes + 1
    assert final.spec["counter"] == successes


def _increment(store: Store, barrier: threading.Barrier, key: str, n: int, tag: str) -> None:
    """Read-modify-write ``spec.counter`` n times, retrying on conflicts; one event each."""
    barrier.wait(timeout=60)
    done = 0
    while done < n:
        current = store.get(JobRecord, key)
        assert current is not None
        bumped = replace(current, spec={"counter": current.spec["counter"] + 1})
        event = ev(f"{tag}-{done}", job_id=key)
        try:
            store.update(bumped, expected_version=current.version, events=[event])
        except ConflictError:
            continue
        done += 1


def test_two_writers_at_once(backend: Backend) -> None:
    """Two threads (memory) or two processes (SQLite, Postgres) increment one record."""
    store = backend.store
    store.create(replace(JOB, id="shared", spec={"counter": 0}))
    backend.run_concurrently(_increment, ("shared", 30, "a"), ("shared", 30, "b"))
    final = store.get(JobRecord, "shared")
    assert final is not None
    assert (final.spec["counter"], final.version) == (60, 61)
    events = store.events(job_id="shared")
    seqs = [e.seq for e in events]
    assert len(events) == 60
    assert seqs == sorted(set(seqs))
    assert sorted(e.message for e in events) == sorted(
        f"{tag}-{i}" for tag in "ab" for i in range(30)
    )


def test_nan_and_infinity_are_not_json_and_are_refused(store: Store) -> None:
    record = JobRecord(
        id="nan",
        name="nan",
        team="t",
        state=JobState.PENDING,
        priority=0,
        spec={"x": float("nan")},
        pool=None,
        submitted_at_s=1.0,
        updated_at_s=1.0,
    )
    with pytest.raises(TypeError, match="spec"):
        store.create(record)
    assert store.get(JobRecord, "nan") is None


# --- users, tokens, the audit log (a shared mesh) ---------------------------------------------

USER = UserRecord("ana", Role.TEAM_ADMIN, ["vision", "search"], 10.0, 10.0)
TOKEN = TokenRecord("tok1", "ana", "ab" * 32, 10.0)


def audit(action: str, outcome: str = "allowed", **detail: Any) -> AuditEntry:
    return AuditEntry(20.0, "ana", "team-admin", action, "j1", outcome, detail)


def test_users_and_tokens_round_trip_and_filter(store: Store) -> None:
    user, token = store.create(USER), store.create(TOKEN)
    store.create(replace(USER, name="bo", role=Role.USER, teams=["search"]))
    assert store.get(UserRecord, "ana") == user
    assert user.teams == ["vision", "search"]
    assert isinstance(user.role, Role)
    assert [u.name for u in store.list(UserRecord, role=Role.USER)] == ["bo"]
    assert store.list(TokenRecord, username="ana") == [token]
    revoked = store.update(replace(token, revoked_at_s=30.0), expected_version=1)
    assert store.get(TokenRecord, "tok1") == revoked
    assert revoked.revoked_at_s == 30.0


def test_a_role_the_store_does_not_know_is_refused(store: Store) -> None:
    with pytest.raises(ValueError, match="'owner'"):
        store.create(replace(USER, role=cast(Role, "owner")))
    assert store.get(UserRecord, "ana") is None


def test_jobs_filter_by_owner(store: Store) -> None:
    store.create(replace(JOB, id="a1", owner="ana"))
    store.create(replace(JOB, id="b1", owner="bo"))
    store.create(replace(JOB, id="local"))
    assert [j.id for j in store.list(JobRecord, owner="ana")] == ["a1"]
    assert [j.id for j in store.list(JobRecord, owner="")] == ["local"]


def test_audit_entries_append_in_order_and_page(store: Store) -> None:
    first = store.append_audit(audit("nodes.cordon", reason="xid 79"))
    second = store.append_audit(audit("jobs.cancel", "denied"))
    assert 0 < first.seq < second.seq
    assert store.audit() == [first, second]
    assert store.audit(after_seq=first.seq) == [second]
    assert store.audit(limit=1) == [first]
    assert first.detail == {"reason": "xid 79"}
    assert store.events() == []  # its own log


def test_a_write_appends_its_audit_entry_with_its_events(store: Store) -> None:
    created = store.create(JOB)
    store.update(
        changed(created), expected_version=1, events=[ev("cancelled"), audit("jobs.cancel")]
    )
    assert [e.message for e in store.events()] == ["cancelled"]
    assert [a.action for a in store.audit()] == ["jobs.cancel"]


def test_a_failed_write_appends_no_audit_entry(store: Store) -> None:
    store.create(JOB)
    with pytest.raises(ConflictError):
        store.update(changed(JOB), expected_version=9, events=[audit("jobs.cancel")])
    assert store.audit() == []


def test_a_write_refuses_to_append_a_decision(store: Store) -> None:
    decision = Decision(1.0, "j1", "placed", "h", {})
    with pytest.raises(TypeError, match="events and audit entries"):
        store.create(JOB, events=[cast(Event, decision)])
    assert store.get(JobRecord, "j1") is None


# --- the lease and the fence (controllers that stand by) ---------------------------------------


def taken_by_another(store: Store, now_s: float) -> LeaseRecord:
    """Another controller takes the expired lease (written unfenced, as its own store would)."""
    fencing = getattr(store, "_fencing", None)
    store.fence(CONTROLLER, None)
    taken = acquire(store, "b", now_s, 10.0)
    assert taken is not None
    store.fence(CONTROLLER, None if fencing is None else fencing[1])
    return taken


def test_a_lease_is_taken_renewed_refused_and_taken_over(store: Store) -> None:
    first = acquire(store, "a", 100.0, 10.0)
    assert first is not None
    assert (first.holder, first.epoch, first.expires_at_s) == ("a", 1, 110.0)
    renewed = acquire(store, "a", 105.0, 10.0)
    assert renewed is not None
    assert (renewed.epoch, renewed.expires_at_s) == (1, 115.0)
    assert acquire(store, "b", 114.9, 10.0) is None  # a holds it
    replaced = acquire(store, "b", 114.9, 10.0, replacing="a")  # a is known dead
    assert replaced is not None
    assert (replaced.holder, replaced.epoch) == ("b", 2)
    assert acquire(store, "a", 120.0, 10.0) is None
    later = acquire(store, "a", 124.9 + 0.2, 10.0)  # b's ran out at 124.9
    assert later is not None
    assert (later.holder, later.epoch) == ("a", 3)
    assert release(store, "a", 126.0)
    assert not release(store, "b", 126.0)
    freed = acquire(store, "b", 126.0, 10.0)
    assert freed is not None
    assert freed.epoch == 4
    taken = [e.data["holder"] for e in store.events() if e.kind == "controller.leading"]
    assert taken == ["a", "b", "a", "b"]


def test_a_fenced_store_stamps_its_epoch_on_dispatches_and_decisions(store: Store) -> None:
    lease = acquire(store, "a", 100.0, 10.0)
    assert lease is not None
    store.fence(CONTROLLER, lease.epoch)
    attempt = store.create(SAMPLES["attempt"])
    decision = store.record_decision(Decision(1.0, "j1", "placed", "h", {}))
    store.create(JOB)  # other kinds carry no epoch, and are fenced all the same
    assert attempt.epoch == decision.epoch == lease.epoch == 1
    assert store.get(AttemptRecord, attempt.id) == attempt
    assert store.decisions() == [decision]


FENCED_WRITES: list[tuple[str, Callable[[Store], object]]] = [
    ("create", lambda s: s.create(replace(JOB, id="j2"), events=[ev("x")])),
    ("update", lambda s: s.update(changed(JOB), expected_version=1, events=[ev("x")])),
    ("delete", lambda s: s.delete(JobRecord, "j1", expected_version=1, events=[ev("x")])),
    ("create_all", lambda s: s.create_all([replace(JOB, id="j3")])),
    ("write_all", lambda s: s.write_all([Write(replace(JOB, id="j3")), Write(changed(JOB), 1)])),
    ("append_event", lambda s: s.append_event(ev("x"))),
    ("put_package", lambda s: s.put_package("j1", b"files")),
    ("delete_package", lambda s: s.delete_package("j1")),
    ("record_decision", lambda s: s.record_decision(Decision(1.0, "j1", "placed", "h", {}))),
    ("record_decisions", lambda s: s.record_decisions([Decision(1.0, "j1", "x", "h", {})] * 2)),
    ("append_audit", lambda s: s.append_audit(AuditEntry(1.0, "a", "r", "x", "t", "allowed"))),
]


@pytest.mark.parametrize("write", [w for _, w in FENCED_WRITES], ids=[n for n, _ in FENCED_WRITES])
def test_a_deposed_leader_can_no_longer_write(
    store: Store, write: Callable[[Store], object]
) -> None:
    store.create(JOB)
    lease = acquire(store, "a", 100.0, 10.0)
    assert lease is not None
    store.fence(CONTROLLER, lease.epoch)
    taken_by_another(store, 111.0)  # a paused past its lease; b took it
    before = (store.list(JobRecord), store.events(), store.decisions(), store.audit())
    with pytest.raises(FencedError, match=r"leads no more \(epoch 1; epoch 2\)"):
        write(store)
    assert (store.list(JobRecord), store.events(), store.decisions(), store.audit()) == before
    assert acquire(store, "a", 112.0, 10.0) is None  # and it cannot take the lease back


def test_a_store_fenced_before_it_leads_writes_nothing(store: Store) -> None:
    store.fence(CONTROLLER, 0)
    with pytest.raises(FencedError, match="no lease"):
        store.create(JOB)
    assert store.list(JobRecord) == []
    lease = acquire(store, "a", 1.0, 10.0)  # a lease is not fenced: it is how one leads
    assert lease is not None
    with pytest.raises(FencedError):
        store.create(JOB)
    store.fence(CONTROLLER, lease.epoch)
    assert store.create(JOB).version == 1


def _write_until_fenced(store: Store, barrier: Any, epoch: int) -> None:
    store.fence(CONTROLLER, epoch)
    barrier.wait()
    for i in range(100_000):
        try:
            store.append_event(ev(f"leader-{i}", job_id=None))
        except FencedError:
            return
    raise AssertionError("never fenced")


def _take_over_after(store: Store, barrier: Any, writes: int) -> None:
    barrier.wait()
    while len(store.events(limit=writes + 1)) <= writes:
        pass
    assert acquire(store, "b", 1e9, 10.0) is not None  # the leader's lease ran out long ago


def test_no_write_of_a_deposed_leader_lands_after_the_lease_was_taken(backend: Backend) -> None:
    lease = acquire(backend.store, "a", 100.0, 10.0)
    assert lease is not None
    backend.run_concurrently(_race, ("write", lease.epoch), ("take", 20))
    events = backend.store.events()
    taken = next(e for e in events if e.kind == "controller.leading" and e.data["holder"] == "b")
    written = [e for e in events if e.message.startswith("leader-")]
    assert len(written) >= 20
    assert max(e.seq for e in written) < taken.seq


def _race(store: Store, barrier: Any, role: str, arg: int) -> None:
    if role == "write":
        _write_until_fenced(store, barrier, arg)
    else:
        _take_over_after(store, barrier, arg)
