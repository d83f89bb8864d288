"""Storing a submission: a job id drawn taken is drawn again, and nothing of another job's is
ever removed. Ids are drawn by a scripted ``draw`` (the product's is the name and 24 random
bits); the store is a real MemoryStore, the packages real folders."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

import pytest

from meshctl.controller.submit import (
    ID_TRIES,
    Admission,
    PackageTaken,
    enqueue,
    new_job_id,
)
from meshctl.model import Job
from meshctl.scheduler.plan import Decision
from meshctl.state import ConflictError, JobRecord, MemoryStore, StoreError
from tests.builders import batch_document

pytestmark = pytest.mark.unit

JOB = Job.model_validate(
    batch_document("train", entrypoint="python train.py", resources={"gpus": 1})
)
ADMITTED = Admission(0, None, Decision("train", "placed"))
NOW_S = 1_800_000_000.0


def scripted(*ids: str) -> Callable[[str], str]:
    """A ``draw`` that gives ``ids`` in order (whatever the name)."""
    given = iter(ids)
    return lambda name: next(given)


def submit(store: MemoryStore, home: Path, work: Path | None, draw: Callable[[str], str]) -> str:
    return enqueue(store, JOB, ADMITTED, work, home, NOW_S, draw=draw).id


def pending_events(store: MemoryStore, ids: Iterable[str]) -> dict[str, int]:
    return {i: sum(e.kind == "job.pending" for e in store.events(job_id=i)) for i in ids}


@pytest.fixture
def work(tmp_path: Path) -> Path:
    folder = tmp_path / "work"
    folder.mkdir()
    (folder / "train.py").write_text("print('hi')\n")
    return folder


def test_an_id_drawn_taken_by_a_stored_job_is_drawn_again(tmp_path: Path) -> None:
    store = MemoryStore()
    first = submit(store, tmp_path, None, scripted("train-000001"))
    second = submit(store, tmp_path, None, scripted("train-000001", "train-000002"))
    assert (first, second) == ("train-000001", "train-000002")
    assert [j.id for j in store.list(JobRecord)] == ["train-000001", "train-000002"]
    assert pending_events(store, ["train-000001", "train-000002"]) == {
        "train-000001": 1,
        "train-000002": 1,
    }


def test_an_id_whose_files_are_there_is_drawn_again_and_the_files_are_left_alone(
    tmp_path: Path, work: Path
) -> None:
    """Another submission has claimed train-000001's folder and not stored its job yet: its
    files stay as they are (they were deleted before, by the submission that collided)."""
    store = MemoryStore()
    theirs = tmp_path / "packages" / "train-000001"
    theirs.mkdir(parents=True)
    (theirs / "model.py").write_text("theirs\n")
    got = submit(store, tmp_path, work, scripted("train-000001", "train-000002"))
    assert got == "train-000002"
    assert (theirs / "model.py").read_text() == "theirs\n"
    assert (tmp_path / "packages" / got / "train.py").is_file()
    assert (tmp_path / "packages" / got / ".meshctl-job").read_text() == f"{got}\n"


def test_a_collision_with_a_stored_job_keeps_that_job_s_files(tmp_path: Path, work: Path) -> None:
    store = MemoryStore()
    first = submit(store, tmp_path, work, scripted("train-000001"))
    second = submit(store, tmp_path, work, scripted("train-000001", "train-000002"))
    for job_id in (first, second):
        assert (tmp_path / "packages" / job_id / ".meshctl-job").read_text() == f"{job_id}\n"


def test_after_id_tries_taken_the_conflict_is_raised_and_nothing_is_left(
    tmp_path: Path, work: Path
) -> None:
    store = MemoryStore()
    submit(store, tmp_path, work, scripted("train-000001"))
    with pytest.raises(ConflictError):
        submit(store, tmp_path, None, scripted(*["train-000001"] * ID_TRIES))
    with pytest.raises(PackageTaken):  # with files: their folder is found taken first
        submit(store, tmp_path, work, scripted(*["train-000001"] * ID_TRIES))
    assert [j.id for j in store.list(JobRecord)] == ["train-000001"]
    assert sorted(p.name for p in (tmp_path / "packages").iterdir()) == ["train-000001"]


def test_a_folder_taken_every_time_is_package_taken_an_os_error(tmp_path: Path, work: Path) -> None:
    (tmp_path / "packages" / "train-000001").mkdir(parents=True)
    with pytest.raises(PackageTaken) as raised:
        submit(MemoryStore(), tmp_path, work, scripted(*["train-000001"] * ID_TRIES))
    assert isinstance(raised.value, OSError)
    assert raised.value.filename == str((tmp_path / "packages" / "train-000001").resolve())


def test_an_id_given_by_the_caller_is_never_drawn_again(tmp_path: Path, work: Path) -> None:
    """The differential check keeps the simulator's ids: one taken is an error, and the job
    that has it keeps its files."""
    store = MemoryStore()
    enqueue(store, JOB, ADMITTED, work, tmp_path, NOW_S, "sim-7")
    with pytest.raises(PackageTaken):
        enqueue(store, JOB, ADMITTED, work, tmp_path, NOW_S, "sim-7")
    with pytest.raises(ConflictError):
        enqueue(store, JOB, ADMITTED, None, tmp_path, NOW_S, "sim-7")
    assert (tmp_path / "packages" / "sim-7" / "train.py").is_file()


class Broken(MemoryStore):
    def create(self, record, *, events=()):  # type: ignore[no-untyped-def]
        raise StoreError("state store: disk I/O error")


def test_a_store_that_fails_leaves_no_files_and_is_not_retried(tmp_path: Path, work: Path) -> None:
    drawn: list[str] = []

    def draw(name: str) -> str:
        drawn.append(new_job_id(name))
        return drawn[-1]

    with pytest.raises(StoreError, match="disk I/O error"):
        submit(Broken(), tmp_path, work, draw)
    assert len(drawn) == 1
    assert list((tmp_path / "packages").iterdir()) == []
