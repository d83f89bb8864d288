"""Job history that outlives Ray: every attempt's driver log, copied into the state folder.

``Ray`` keeps a job's driver log only as long as its cluster lives; ``meshctl down``, a lost
cloud pool or a restarted cluster take it away. So the controller copies each running
attempt's log as it grows, into ``$MESHCTL_HOME/logs/<job id>/<attempt>.log`` (0600), and
``meshctl jobs logs`` reads the copy once the pool no longer has the job.

What a cycle costs: only attempts that are active (submitting, pending, running) are read,
each at most every ``READ_EVERY_S``, and a read asks for the bytes after the copy's end, at
most ``READ_LIMIT_BYTES`` of them (an embedded or emulated cluster's log is read from its file
at that offset; a remote cluster's comes whole through Ray's Jobs API, which has no offset).
An attempt that ended is read to its end once, then closed.

The cap: a copy keeps at most ``CAP_BYTES`` (2 MiB) per attempt: the first ``HEAD_BYTES``
(512 KiB: how the job started, its configuration, its first errors) and the most recent bytes
(about 1.25 MiB, some 13,000 lines of 100 bytes: where and how it ended, with its stack
trace), with one marker line between them saying how many bytes were dropped. That keeps what
a log is read for (how the job started, how it ended) while bounding the disk at 2 GiB per
1,000 attempts in the worst case, and a copy stays small enough to page through or grep at
once; a job that writes more than that belongs in its own storage. Cuts fall at line starts.

The copy is self-describing, so a controller killed at any moment continues where the file
ends: the file is the log's first bytes, or the head, the marker (which holds the count of
bytes dropped) and the tail, and ``copied`` (bytes of the log consumed) follows from its size.
Appends are appends; a cut rewrites the file atomically (at most once per ``SLACK_BYTES`` of
new output). While an attempt is followed, ``<attempt>.open`` names its pool and submission,
so that a restarted controller finishes the copies the last one left open.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Protocol

from meshctl.controller.deciding.world import JobView, World
from meshctl.pools.observed import PoolObservation
from meshctl.pools.ray import LogChunk
from meshctl.state.private import open_private, private_dir, write_private
from meshctl.state.records import ACTIVE_ATTEMPT, AttemptRecord
from meshctl.workload import exits

KIB, MIB = 1024, 1024**2
CAP_BYTES = 2 * MIB
HEAD_BYTES = 512 * KIB
SLACK_BYTES = 256 * KIB  # a cut leaves this much room, so cuts are rare
MARKER_MAX = 200
TAIL_BYTES = CAP_BYTES - HEAD_BYTES - MARKER_MAX - SLACK_BYTES
LINE_SEARCH_BYTES = 64 * KIB  # how far a cut looks for a line start
READ_EVERY_S = 2.0
READ_LIMIT_BYTES = MIB
FOLDER = "logs"
MARKER = re.compile(rb"\n\[meshctl: ([\d,]+) bytes of this log dropped here; [^\]\n]*\]\n")

log = logging.getLogger("meshctl.controller")


class LogSource(Protocol):
    """Where an attempt's driver log is read (``meshctl.pools.ray.RayPoolClient``)."""

    def read_log(self, submission_id: str, offset: int, limit: int) -> LogChunk | None: ...


def marker(dropped: int) -> bytes:
    return (
        f"\n[meshctl: {dropped:,} bytes of this log dropped here; the copy keeps its first "
        f"{HEAD_BYTES // KIB} KiB and its most recent bytes]\n"
    ).encode()


def copy_path(home: Path, job_id: str, attempt: int) -> Path:
    return home / FOLDER / job_id / f"{attempt}.log"


def read_copy(home: Path, job_id: str, attempt: int) -> bytes | None:
    """The copied log of one attempt; None when there is none."""
    try:
        return copy_path(home, job_id, attempt).read_bytes()
    except FileNotFoundError:
        return None


# --- one attempt's copy --------------------------------------------------------------------------


@dataclass
class LogCopy:
    """The bounded copy of one attempt's log, in ``path`` (see the module's docstring)."""

    path: Path
    head: int | None = None  # bytes of head before the marker; None: not cut yet
    dropped: int = 0  # bytes of the log between the head and the tail, not kept
    size: int = 0  # bytes of the file
    before_cut: Callable[[], None] = field(default=lambda: None, repr=False)  # the first one

    @property
    def copied(self) -> int:
        """Bytes of the log consumed: where the next read starts."""
        if self.head is None:
            return self.size
        return self.size - len(marker(self.dropped)) + self.dropped

    @classmethod
    def load(cls, path: Path, cut: bool) -> LogCopy:
        """The copy as the file is (``cut``: a marker may be in it)."""
        copy = cls(path)
        try:
            copy.size = path.stat().st_size
        except FileNotFoundError:
            return copy
        if cut:
            with path.open("rb") as f:
                found = MARKER.search(f.read(HEAD_BYTES + MARKER_MAX))
            if found is not None:
                copy.head, copy.dropped = found.start(), int(found.group(1).replace(b",", b""))
        return copy

    def tail(self, size: int) -> bytes:
        """The copy's last ``size`` bytes (at most)."""
        try:
            with self.path.open("rb") as f:
                f.seek(max(0, self.size - size))
                return f.read(size)
        except FileNotFoundError:
            return b""

    def append(self, data: bytes) -> None:
        """Bytes that continue the log where the copy ends."""
        if not data:
            return
        if self.size + len(data) <= CAP_BYTES:
            with self._appending() as out:
                out.write(data)
            self.size += len(data)
            return
        head, tail = self._parts()
        self._write(head, tail + data)

    def _appending(self) -> IO[bytes]:
        """The file opened to append. Its folder is made (0700) only when it is missing: the
        first append of a copy never started by ``LogCopier`` (which makes it), or one removed
        meanwhile; an append is one open, not a stat of the folder too."""
        try:
            return open_private(self.path)
        except FileNotFoundError:
            private_dir(self.path.parent)
            return open_private(self.path)

    def jump(self, offset: int, data: bytes) -> None:
        """Bytes of the log from ``offset``, past the copy's end: everything between the head
        and them is dropped (the job wrote faster than the copy keeps). They are cut to start
        at a line."""
        head, tail = self._parts()
        newline = data.find(b"\n", 0, LINE_SEARCH_BYTES)  # the byte before is not at hand
        start = newline + 1 if newline >= 0 else 0
        self.dropped += len(tail) + (offset - self.copied) + start
        self._write(head, data[start:])

    def _parts(self) -> tuple[bytes, bytes]:
        """The head (cut at the last line end before HEAD_BYTES, the first time) and the tail."""
        content = self.path.read_bytes() if self.size else b""
        if self.head is not None:
            return content[: self.head], content[self.head + len(marker(self.dropped)) :]
        newline = content.rfind(b"\n", 0, HEAD_BYTES)
        head = newline + 1 if newline >= 0 else min(HEAD_BYTES, len(content))
        return content[:head], content[head:]

    def _write(self, head: bytes, tail: bytes) -> None:
        if len(tail) > TAIL_BYTES:
            start = _line_start(tail, len(tail) - TAIL_BYTES)
            self.dropped += start
            tail = tail[start:]
        if self.head is None:
            self.before_cut()
        mark = marker(self.dropped)
        write_private(self.path, head + mark + tail)
        self.head, self.size = len(head), len(head) + len(mark) + len(tail)


def _line_start(data: bytes, at: int) -> int:
    """The first line start at or after ``at`` (looking LINE_SEARCH_BYTES ahead), else ``at``."""
    if at == 0 or data[at - 1 : at] == b"\n":
        return at
    newline = data.find(b"\n", at, at + LINE_SEARCH_BYTES)
    return newline + 1 if newline >= 0 else at


# --- following the active attempts ---------------------------------------------------------------


@dataclass
class _Followed:
    attempt_id: str
    pool: str
    submission_id: str
    copy: LogCopy
    due_at: float = 0.0  # monotonic: when it is read next


@dataclass
class LogCopier:
    """Called once a cycle by the controller (``follow``) and by ``meshctl down`` (``flush``)."""

    home: Path
    clock: Callable[[], float] = time.monotonic
    _open: dict[str, _Followed] | None = field(default=None, repr=False)

    def follow(self, world: World, sources: Mapping[str, LogSource]) -> None:
        """Copy what is new of each active attempt's log (each at most every READ_EVERY_S);
        finish the copies of attempts that ended. Never raises: a failed read is retried."""
        reachable = {n: s for n, s in sources.items() if _reachable(world, n)}
        active = {a.id: a for a in attempts_of(world.jobs) if a.state in ACTIVE_ATTEMPT}
        opened = self._opened()
        now = self.clock()
        for attempt in active.values():
            if attempt.pool not in reachable:
                continue  # nothing to read now; its pool may answer again
            followed = opened.get(attempt.id) or self._start(attempt)
            if followed is not None and now >= followed.due_at:
                followed.due_at = now + READ_EVERY_S
                self._pull(followed, reachable[attempt.pool], READ_LIMIT_BYTES)
        for attempt_id in [a for a in opened if a not in active]:
            followed = opened[attempt_id]
            if followed.pool in sources and followed.pool not in reachable:
                continue  # its pool may answer again: finish it then
            self._finish(followed, sources.get(followed.pool))

    def exits(
        self,
        attempts: Iterable[AttemptRecord],
        observations: Mapping[str, PoolObservation],
        sources: Mapping[str, LogSource],
    ) -> dict[str, int]:
        """The exit each active attempt its answering pool no longer knows recorded in its
        driver log, by attempt id: one that ended just before its head restarted is done,
        not lost (``meshctl/workload/exits.py``)."""
        found: dict[str, int] = {}
        for attempt in attempts:
            seen, source = observations.get(attempt.pool), sources.get(attempt.pool)
            if attempt.state not in ACTIVE_ATTEMPT or seen is None or not seen.reachable:
                continue
            if source is not None and attempt.submission_id not in seen.jobs:
                status = self.exit_of(attempt, source)
                if status is not None:
                    found[attempt.id] = status
        return found

    def exit_of(self, attempt: AttemptRecord, source: LogSource) -> int | None:
        """The exit status an active attempt's driver log ends with, read to its end now (its
        pool no longer knows it: did it end before?); None when the log records none."""
        followed = self._opened().get(attempt.id) or self._start(attempt)
        if followed is None:
            return None
        for _ in range(CAP_BYTES // READ_LIMIT_BYTES + 2):
            if self._pull(followed, source, READ_LIMIT_BYTES):
                break
        followed.due_at = self.clock() + READ_EVERY_S
        return exits.exit_status(followed.copy.tail(exits.SEARCHED_BYTES))

    def flush(self, attempts: Iterable[AttemptRecord], sources: Mapping[str, LogSource]) -> None:
        """Copy these attempts' logs to their end now (``down``, before their clusters go)."""
        opened = self._opened()
        for attempt in attempts:
            followed = opened.get(attempt.id) or self._start(attempt)
            if followed is not None:
                self._finish(followed, sources.get(attempt.pool))

    def _opened(self) -> dict[str, _Followed]:
        """The copies being followed; at the first call, those the last controller left open."""
        if self._open is None:
            self._open = {}
            for note in sorted((self.home / FOLDER).glob("*/*.open")):
                with contextlib.suppress(OSError, ValueError, KeyError):
                    raw = json.loads(note.read_text())
                    copy = LogCopy.load(note.with_suffix(".log"), bool(raw.get("cut")))
                    self._track(_Followed(raw["attempt_id"], raw["pool"], raw["sid"], copy))
        return self._open

    def _start(self, attempt: AttemptRecord) -> _Followed | None:
        path = copy_path(self.home, attempt.job_id, attempt.number)
        try:
            copy = LogCopy.load(path, cut=path.exists())  # a copy made before: as it is
            followed = _Followed(attempt.id, attempt.pool, attempt.submission_id, copy)
            self._note(followed, cut=copy.head is not None)
        except OSError as err:
            log.warning("log of %s: %s", attempt.submission_id, err)
            return None
        self._opened()
        return self._track(followed)

    def _track(self, followed: _Followed) -> _Followed:
        followed.copy.before_cut = lambda: self._note(followed, cut=True)
        assert self._open is not None
        self._open[followed.attempt_id] = followed
        return followed

    def _note(self, followed: _Followed, cut: bool) -> None:
        """``<attempt>.open``: which log this copy follows, and whether the file may hold a
        marker (written before the first cut, so a reader never misses one)."""
        note = {
            "attempt_id": followed.attempt_id,
            "pool": followed.pool,
            "sid": followed.submission_id,
            "cut": cut,
        }
        private_dir(followed.copy.path.parent)
        write_private(followed.copy.path.with_suffix(".open"), json.dumps(note))

    def _pull(self, followed: _Followed, source: LogSource, limit: int) -> bool:
        """One bounded read; True when the copy has caught up with the log (or there is none
        yet), False when there is more to read or the read failed."""
        copy = followed.copy
        try:
            chunk = source.read_log(followed.submission_id, copy.copied, limit)
            if chunk is None:
                return True
            behind = chunk.size - copy.copied
            if copy.copied >= HEAD_BYTES and behind > TAIL_BYTES + len(chunk.data):
                offset = chunk.size - TAIL_BYTES  # only the newest bytes would be kept anyway
                latest = source.read_log(followed.submission_id, offset, TAIL_BYTES)
                if latest is not None:
                    copy.jump(offset, latest.data)
                    return copy.copied >= latest.size
            copy.append(chunk.data)
            return copy.copied >= chunk.size
        except Exception as err:  # a pool that stopped answering, a disk that filled
            log.warning("log of %s: %s", followed.submission_id, err)
            return False

    def _finish(self, followed: _Followed, source: LogSource | None) -> None:
        """Read what is left of an ended attempt's log (bounded), then close its copy."""
        if source is not None:
            for _ in range(CAP_BYTES // READ_LIMIT_BYTES + 2):
                if self._pull(followed, source, READ_LIMIT_BYTES):
                    break
        with contextlib.suppress(OSError):
            followed.copy.path.with_suffix(".open").unlink(missing_ok=True)
        self._opened().pop(followed.attempt_id, None)


def attempts_of(views: Iterable[JobView]) -> list[AttemptRecord]:
    """The jobs' latest attempts that have driver logs (a service's attempt is no Ray job:
    its replicas log in Ray)."""
    return [v.attempt for v in views if v.attempt is not None and not v.job.spec.serve]


def _reachable(world: World, pool: str) -> bool:
    seen = world.pools.get(pool)
    return seen is not None and seen.reachable
