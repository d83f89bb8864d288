"""The bounded log copy (``meshctl.controller.logs``) against a log that grows in memory.

The source here is a stand-in for a pool's driver log (bytes read from an offset, as
``RayPoolClient.read_log`` reads a local cluster's file); the copy is written to a real
temporary folder. The same copy runs against the embedded Ray mesh in
tests/integration/controller/test_local_mesh.py.
"""

from __future__ import annotations

import re
import stat
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from meshctl.controller.deciding.world import World
from meshctl.controller.logs import (
    CAP_BYTES,
    HEAD_BYTES,
    READ_EVERY_S,
    READ_LIMIT_BYTES,
    LogCopier,
    copy_path,
    marker,
    read_copy,
)
from meshctl.pools.observed import PoolObservation
from meshctl.pools.ray import LogChunk

from .test_decide import attempt, job, pool

pytestmark = pytest.mark.unit

SID = "meshctl-j-1"
MARKED = re.compile(rb"\n\[meshctl: ([\d,]+) bytes of this log dropped here; [^\]\n]*\]\n")


@dataclass
class GrowingLog:
    """A driver log that grows; reads are counted, as a pool would serve them."""

    data: bytearray = field(default_factory=bytearray)
    reads: list[tuple[int, int]] = field(default_factory=list)  # (offset, bytes returned)

    def read_log(self, submission_id: str, offset: int, limit: int) -> LogChunk | None:
        if submission_id != SID or not self.data:
            return None
        chunk = bytes(self.data[offset : offset + limit])
        self.reads.append((offset, len(chunk)))
        return LogChunk(chunk, len(self.data))

    def write(self, n_bytes: int, line: int = 80) -> None:
        """``n_bytes`` more of numbered lines (each ``line`` bytes with its newline)."""
        start = len(self.data)
        text = bytearray()
        while len(text) < n_bytes:
            number = (start + len(text)) // line
            text += f"{number:09d} ".encode().ljust(line - 1, b"x") + b"\n"
        self.data += text[:n_bytes]


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def running(state: str = "running", reachable: bool = True) -> World:
    view = job("j", attempt=attempt("j", state=state))
    seen = pool() if reachable else PoolObservation("onprem", False, "down")
    return World(0.0, {"onprem": seen}, (view,))


def follow(copier: LogCopier, log: GrowingLog, clock: Clock, world: World | None = None) -> None:
    clock.now += READ_EVERY_S
    copier.follow(world or running(), {"onprem": log})


def copied(home: Path) -> bytes:
    return read_copy(home, "j", 1) or b""


def assert_bounded_copy_of(copy: bytes, log: bytes, lines: bool = True) -> None:
    """The copy is the log, or its head, one marker counting what was dropped, and its tail.
    ``lines``: the log is numbered lines (``GrowingLog.write``), so the cuts fall at line
    starts; without them (one endless line) they fall where they must."""
    if len(log) <= CAP_BYTES:
        assert copy == log
        return
    assert len(copy) <= CAP_BYTES
    [found] = list(MARKED.finditer(copy))
    head, tail = copy[: found.start()], copy[found.end() :]
    dropped = int(found.group(1).replace(b",", b""))
    assert len(head) <= HEAD_BYTES
    assert log.startswith(head)
    assert log.endswith(tail)
    assert len(head) + dropped + len(tail) == len(log)
    assert found.group(0) == marker(dropped)
    if lines:
        assert tail.startswith(b"0")
        assert head.endswith(b"\n")


# --- the copy -------------------------------------------------------------------------------------


def test_a_growing_log_is_copied_by_appends_of_what_is_new(tmp_path: Path) -> None:
    log, clock = GrowingLog(), Clock()
    copier = LogCopier(tmp_path, clock)
    for n in (0, 1_000, 5, 30_000):
        log.write(n)
        follow(copier, log, clock)
        assert copied(tmp_path) == bytes(log.data)
    # each read asked only for the bytes past the copy's end
    assert [offset for offset, _ in log.reads] == [0, 1_000, 1_005]


def test_reads_wait_read_every_s_and_skip_unreachable_pools(tmp_path: Path) -> None:
    log, clock = GrowingLog(), Clock()
    copier = LogCopier(tmp_path, clock)
    log.write(100)
    copier.follow(running(), {"onprem": log})
    log.write(100)
    clock.now += READ_EVERY_S / 2
    copier.follow(running(), {"onprem": log})  # too soon
    assert copied(tmp_path) == bytes(log.data[:100])
    clock.now += READ_EVERY_S
    copier.follow(running(reachable=False), {"onprem": log})  # pool not answering
    assert len(log.reads) == 1
    copier.follow(running(), {"onprem": log})
    assert copied(tmp_path) == bytes(log.data)


GROWTH = [
    pytest.param([3 * CAP_BYTES], id="one big write: head, marker, newest tail"),
    pytest.param([100_000] * 40, id="many writes past the cap: cut again and again"),
    pytest.param([CAP_BYTES - 10, 20, 5 * 1024**2], id="just over the cap, then far over"),
    pytest.param([READ_LIMIT_BYTES] * 6, id="exactly the read limit each time"),
]


@pytest.mark.parametrize("writes", GROWTH)
def test_a_log_over_the_cap_keeps_its_head_and_newest_tail(
    tmp_path: Path, writes: list[int]
) -> None:
    log, clock = GrowingLog(), Clock()
    copier = LogCopier(tmp_path, clock)
    for n in writes:
        log.write(n)
        follow(copier, log, clock)
        assert len(copied(tmp_path)) <= CAP_BYTES
    follow(copier, log, clock, running(state="succeeded"))  # ended: read to its end
    assert_bounded_copy_of(copied(tmp_path), bytes(log.data))
    assert max(n for _, n in log.reads) <= READ_LIMIT_BYTES * 2  # bounded reads


def test_a_log_far_behind_is_not_read_through(tmp_path: Path) -> None:
    """A job that wrote 50 MiB since the last read costs one bounded read, not 50 MiB."""
    log, clock = GrowingLog(), Clock()
    copier = LogCopier(tmp_path, clock)
    log.write(HEAD_BYTES * 2)
    follow(copier, log, clock)
    log.write(50 * 1024**2)
    follow(copier, log, clock)
    assert sum(n for _, n in log.reads) < 2 * CAP_BYTES
    assert_bounded_copy_of(copied(tmp_path), bytes(log.data))


def test_a_line_longer_than_everything_is_still_bounded(tmp_path: Path) -> None:
    log, clock = GrowingLog(), Clock()
    copier = LogCopier(tmp_path, clock)
    log.data += b"y" * (5 * CAP_BYTES)  # no newline at all: cuts fall where they must
    for _ in range(8):
        follow(copier, log, clock)
    assert_bounded_copy_of(copied(tmp_path), bytes(log.data), lines=False)


@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.integers(1, 700_000), min_size=1, max_size=12),
    st.sampled_from([1, 17, 80, 4096]),
)
def test_any_growth_gives_a_bounded_copy_of_the_log(writes: list[int], line: int) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as home:
        log, clock = GrowingLog(), Clock()
        copier = LogCopier(Path(home), clock)
        for n in writes:
            log.write(n, line)
            follow(copier, log, clock)
        follow(copier, log, clock, running(state="failed"))
        assert_bounded_copy_of(copied(Path(home)), bytes(log.data))


# --- the lifecycle: active attempts, ended ones, a restarted controller ---------------------------


def test_an_ended_attempt_is_read_to_its_end_once_then_closed(tmp_path: Path) -> None:
    log, clock = GrowingLog(), Clock()
    copier = LogCopier(tmp_path, clock)
    log.write(1_000)
    follow(copier, log, clock)
    note = copy_path(tmp_path, "j", 1).with_suffix(".open")
    assert note.is_file()
    log.write(500)  # its last words, written as it ended
    copier.follow(running(state="succeeded"), {"onprem": log})  # no wait for a final read
    assert copied(tmp_path) == bytes(log.data)
    assert not note.exists()
    reads = len(log.reads)
    follow(copier, log, clock, running(state="succeeded"))
    follow(copier, log, clock, World(0.0, {"onprem": pool()}, ()))  # finished: not in the world
    assert len(log.reads) == reads  # never read again


def test_an_attempt_whose_pool_went_is_closed_with_what_was_copied(tmp_path: Path) -> None:
    log, clock = GrowingLog(), Clock()
    copier = LogCopier(tmp_path, clock)
    log.write(1_000)
    follow(copier, log, clock)
    log.write(1_000)
    copier.follow(replace(running(), pools={}, jobs=()), {})  # its cluster is gone
    assert copied(tmp_path) == bytes(log.data[:1_000])
    assert not copy_path(tmp_path, "j", 1).with_suffix(".open").exists()


@pytest.mark.parametrize(
    "total", [50_000, 6 * CAP_BYTES], ids=["under the cap", "cut before the restart"]
)
def test_a_restarted_controller_continues_where_the_copy_ends(tmp_path: Path, total: int) -> None:
    log, clock = GrowingLog(), Clock()
    first = LogCopier(tmp_path, clock)
    log.write(total // 2)
    follow(first, log, clock)
    follow(first, log, clock)
    log.write(total // 2)
    second = LogCopier(tmp_path, clock)  # the controller, killed and started again
    reads = len(log.reads)
    follow(second, log, clock)
    follow(second, log, clock, running(state="succeeded"))
    assert_bounded_copy_of(copied(tmp_path), bytes(log.data))
    assert log.reads[reads][0] > 0  # it did not read the log again from its start


def test_a_copy_killed_mid_append_continues_without_repeating(tmp_path: Path) -> None:
    log, clock = GrowingLog(), Clock()
    first = LogCopier(tmp_path, clock)
    log.write(10_000)
    follow(first, log, clock)
    log.write(10_000)
    with copy_path(tmp_path, "j", 1).open("ab") as f:  # part of an append, then the kill
        f.write(bytes(log.data[10_000:12_345]))
    second = LogCopier(tmp_path, clock)
    follow(second, log, clock)
    assert copied(tmp_path) == bytes(log.data)


def test_an_attempt_that_ended_while_no_controller_ran_is_finished_by_the_next(
    tmp_path: Path,
) -> None:
    log, clock = GrowingLog(), Clock()
    first = LogCopier(tmp_path, clock)
    log.write(1_000)
    follow(first, log, clock)
    log.write(1_000)  # the controller is down; the job ends
    second = LogCopier(tmp_path, clock)
    second.follow(World(0.0, {"onprem": pool()}, ()), {"onprem": log})  # not active any more
    assert copied(tmp_path) == bytes(log.data)
    assert not copy_path(tmp_path, "j", 1).with_suffix(".open").exists()


def test_flush_copies_to_the_end_now(tmp_path: Path) -> None:
    log, clock = GrowingLog(), Clock()
    copier = LogCopier(tmp_path, clock)
    log.write(3_000)
    copier.flush([attempt("j")], {"onprem": log})
    assert copied(tmp_path) == bytes(log.data)


def test_a_failing_source_does_not_break_the_cycle(tmp_path: Path) -> None:
    class Broken:
        def read_log(self, submission_id: str, offset: int, limit: int) -> LogChunk | None:
            raise OSError("connection reset")

    copier = LogCopier(tmp_path, Clock())
    copier.follow(running(), {"onprem": Broken()})  # logged, not raised
    assert copy_path(tmp_path, "j", 1).with_suffix(".open").is_file()  # tried again later


def test_copies_are_private(tmp_path: Path) -> None:
    log, clock = GrowingLog(), Clock()
    copier = LogCopier(tmp_path / "home", clock)
    log.write(3 * CAP_BYTES)
    follow(copier, log, clock)  # a cut rewrites the file: still private
    path = copy_path(tmp_path / "home", "j", 1)
    for each in (path, path.with_suffix(".open")):
        assert stat.S_IMODE(each.stat().st_mode) == 0o600
    for folder in (path.parent, path.parent.parent, tmp_path / "home"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700


def test_the_first_append_makes_the_copys_folders_private(tmp_path: Path) -> None:
    """A copy makes its folder only when it is missing (not at every append), 0700."""
    from meshctl.controller.logs import LogCopy

    path = tmp_path / "logs" / "j" / "1.log"
    copy = LogCopy(path)
    copy.append(b"one\n")
    copy.append(b"two\n")
    assert (path.read_bytes(), copy.copied) == (b"one\ntwo\n", 8)
    for folder in (path.parent, path.parent.parent):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
