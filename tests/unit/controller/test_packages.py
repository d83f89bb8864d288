"""A job's files on another host than the one that took the job in: kept in the store at
submission (on a shared store), unpacked under the controller's own home before it submits."""

from __future__ import annotations

import shutil
import tarfile
from pathlib import Path

import pytest

from meshctl.controller.deciding.decide import Rules
from meshctl.controller.loop import Controller
from meshctl.controller.packages import BadArchive, Packages, TooLarge, unpack_archive
from meshctl.controller.submit import Admission, enqueue
from meshctl.host.packing import archive
from meshctl.model import Job
from meshctl.pools.observed import Submission
from meshctl.scheduler.plan import Decision
from meshctl.state import AttemptRecord, JobRecord, MemoryStore
from tests.builders import batch_document

from .test_decide import MESH
from .test_loop import Clock, FakePool

pytestmark = pytest.mark.unit


class Recording(FakePool):
    """A pool that keeps what each submission asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[Submission] = []

    def submit(self, submission: Submission) -> str:
        self.sent.append(submission)
        return super().submit(submission)


def job(name: str = "a") -> Job:
    return Job.model_validate(batch_document(name, entrypoint="python main.py"))


def submitted(store: MemoryStore, tmp_path: Path, keep_files: bool) -> JobRecord:
    """A job with files taken in on the server's host (its home ``server``)."""
    work = tmp_path / "work"
    (work / "pkg").mkdir(parents=True)
    (work / "main.py").write_text("print('hi')\n")
    (work / "pkg" / "data.bin").write_bytes(bytes(range(256)))
    admission = Admission(0, None, Decision("a", "placed"))
    return enqueue(store, job(), admission, work, tmp_path / "server", 1.8e9, keep_files=keep_files)


def test_a_standby_on_another_host_submits_the_files_the_store_kept(tmp_path: Path) -> None:
    store, pool = MemoryStore(), Recording()
    record = submitted(store, tmp_path, keep_files=True)
    shutil.rmtree(tmp_path / "server")  # another host: the server's copy is not here
    elsewhere = tmp_path / "controller"
    controller = Controller(store, Rules(MESH, {}, None), {"onprem": pool}, clock=Clock(),
                            packages=Packages(store, elsewhere))  # fmt: skip
    controller.cycle()
    (sent,) = pool.sent
    here = elsewhere / "packages" / record.id
    assert sent.runtime_env["working_dir"] == str(here)
    assert (here / "main.py").read_text() == "print('hi')\n"
    assert (here / "pkg" / "data.bin").read_bytes() == bytes(range(256))
    assert sorted(p.name for p in (elsewhere / "packages").iterdir()) == [record.id]


def test_files_kept_nowhere_fail_the_submission_with_the_reason(tmp_path: Path) -> None:
    store, pool = MemoryStore(), Recording()
    record = submitted(store, tmp_path, keep_files=False)  # a store nobody else shares
    shutil.rmtree(tmp_path / "server")
    controller = Controller(store, Rules(MESH, {}, None), {"onprem": pool}, clock=Clock(),
                            packages=Packages(store, tmp_path / "controller"))  # fmt: skip
    errors = controller.cycle().errors
    assert pool.sent == []
    assert any("its files are not on this host" in e for e in errors), errors
    (attempt,) = store.list(AttemptRecord, job_id=record.id)
    assert attempt.detail.submit_errors == 1  # counted, tried again next cycle


def test_files_on_this_host_are_submitted_from_where_they_are(tmp_path: Path) -> None:
    store, pool = MemoryStore(), Recording()
    record = submitted(store, tmp_path, keep_files=True)
    controller = Controller(store, Rules(MESH, {}, None), {"onprem": pool}, clock=Clock(),
                            packages=Packages(store, tmp_path / "controller"))  # fmt: skip
    controller.cycle()
    (sent,) = pool.sent
    assert sent.runtime_env["working_dir"] == str(tmp_path / "server" / "packages" / record.id)
    assert not (tmp_path / "controller" / "packages").exists()


def test_a_failed_submission_keeps_no_files_in_the_store(tmp_path: Path) -> None:
    class Refusing(MemoryStore):
        def create(self, record, *, events=()):  # type: ignore[no-untyped-def]
            raise RuntimeError("the disk is full")

    store = Refusing()
    with pytest.raises(RuntimeError, match="disk is full"):
        submitted(store, tmp_path, keep_files=True)
    assert store._packages == {}
    assert list((tmp_path / "server" / "packages").iterdir()) == []


def test_an_id_whose_files_are_kept_already_is_drawn_again(tmp_path: Path) -> None:
    store = MemoryStore()
    store.put_package("a-1", b"another job's files")  # on another host, not a folder here
    ids = iter(["a-1", "a-2"])
    work = tmp_path / "work"
    work.mkdir()
    (work / "main.py").write_text("x")
    admission = Admission(0, None, Decision("a", "placed"))
    record = enqueue(store, job(), admission, work, tmp_path / "server", 1.8e9,
                     draw=lambda _: next(ids), keep_files=True)  # fmt: skip
    assert record.id == "a-2"
    assert store.package("a-1") == b"another job's files"


ARCHIVES = [
    # id, what is unpacked, the error
    pytest.param(b"not a tar", BadArchive, "expected a gzipped tar", id="not-gzip"),
    pytest.param("big", TooLarge, "unpacks to 2.0 MiB; at most 1 MiB", id="too-large"),
    pytest.param("escape", BadArchive, "cannot unpack", id="a-path-out-of-the-folder"),
]


@pytest.mark.parametrize(("data", "error", "says"), ARCHIVES)
def test_a_bad_archive_is_refused_and_nothing_is_left(
    tmp_path: Path, data: bytes | str, error: type[Exception], says: str
) -> None:
    if data == "big":
        (tmp_path / "src").mkdir()
        (tmp_path / "src" / "big").write_bytes(b"\0" * 2 * 2**20)
        data = archive(tmp_path / "src")
    elif data == "escape":
        data = _escaping(tmp_path)
    assert isinstance(data, bytes)
    with pytest.raises(error, match=says):
        unpack_archive(data, tmp_path / "out", 2**20)
    assert not (tmp_path / "out").exists()
    assert not (tmp_path / "outside").exists()


def _escaping(tmp_path: Path) -> bytes:
    import io

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        info = tarfile.TarInfo("../outside")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    return buffer.getvalue()


def test_an_archive_leaves_out_what_is_ignored(tmp_path: Path) -> None:
    (tmp_path / "src" / ".git").mkdir(parents=True)
    (tmp_path / "src" / ".git" / "config").write_text("x")
    (tmp_path / "src" / "main.py").write_text("y")
    unpack_archive(archive(tmp_path / "src", (".git",)), tmp_path / "out", 2**20)
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["main.py"]
