"""A node's dataset cache on its local disk (kept by the node's agent).

Layout under the cache folder::

    entries/<key>/...        a dataset's files, as at its source (key: location and version)
    entries/<key>.json       its manifest: location, version, each file's size and SHA-256,
                             where it came from, when it was last used
    current/<name>           a link to the newest complete entry of a location: the path a
                             job is handed (``datacache.location_name``), the same everywhere
    partial/<key>/           an entry being fetched (gone on restart)

An entry is fetched whole: from the first peer that holds it complete (its files checked
against the peer's checksums), else from its source; every file is checked against the size
the source lists. Room is made by the lifecycle's rule (``datacache.room``): least recently
used first, never an entry a job on this node needs (``pin``). A cached file found truncated
or corrupt (size, or SHA-256 when asked for a full check) is fetched again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from meshctl.data.peers import Peer, PeerError
from meshctl.data.sources import Listing, Source, SourceError
from meshctl.lifecycle.datacache import Cached, current_path, entry_key, failed_path, room


class CacheError(Exception):
    """A dataset the cache cannot hold: larger than the room it can make, or unreadable."""


@dataclass
class Entry:
    key: str
    location: str
    version: str
    files: dict[str, dict[str, Any]]  # relative path -> {"size": n, "sha256": hex}
    size_bytes: int
    complete: bool = False
    last_used_s: float = 0.0
    fetched_from: str = ""  # "source", or the peer's URL
    fetched_s: float = 0.0  # how long the fetch took
    fetched_bytes: int = 0  # written so far, while it is fetched (not kept in its manifest)

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "location": self.location,
            "version": self.version,
            "files": self.files,
            "size_bytes": self.size_bytes,
            "complete": self.complete,
            "last_used_s": self.last_used_s,
            "fetched_from": self.fetched_from,
            "fetched_s": self.fetched_s,
        }

    @classmethod
    def of(cls, data: dict[str, Any]) -> Entry:
        return cls(
            str(data["key"]),
            str(data["location"]),
            str(data["version"]),
            {str(k): dict(v) for k, v in data["files"].items()},
            int(data["size_bytes"]),
            bool(data.get("complete")),
            float(data.get("last_used_s") or 0.0),
            str(data.get("fetched_from") or ""),
            float(data.get("fetched_s") or 0.0),
        )


@dataclass
class Counters:
    source_bytes: int = 0  # read from central storage
    peer_bytes: int = 0  # read from other nodes' agents
    hits: int = 0  # asked for an entry already complete here
    misses: int = 0
    refetched: int = 0  # found truncated or corrupt, fetched again
    errors: deque[str] = field(default_factory=lambda: deque(maxlen=20))  # newest last


class NodeCache:
    def __init__(
        self,
        root: Path,
        capacity_bytes: int,
        token: str = "",
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.root, self.capacity_bytes, self.token, self.clock = root, capacity_bytes, token, clock
        for part in ("entries", "current", "partial", "failed"):
            _private_dir(root / part)
        shutil.rmtree(root / "partial", ignore_errors=True)  # fetches cut off by a restart
        _private_dir(root / "partial")
        self.counters = Counters()
        self._lock = threading.Lock()
        self._fetching: dict[str, threading.Lock] = {}  # per location
        self._in_flight: dict[str, Entry] = {}  # key -> the entry being fetched
        self._pins: set[str] = set()  # locations a job on this node needs
        self.failed: dict[str, str] = {}  # location -> why its last fetch failed
        self._entries: dict[str, Entry] = {}
        for manifest in sorted((root / "entries").glob("*.json")):
            with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
                entry = Entry.of(json.loads(manifest.read_text()))
                if entry.complete and (root / "entries" / entry.key).is_dir():
                    self._entries[entry.key] = entry
                    continue
            self._drop_files(manifest.stem)

    # --- what it holds ------------------------------------------------------------------------

    def entries(self) -> list[Entry]:
        with self._lock:
            return list(self._entries.values())

    def entry(self, key: str) -> Entry | None:
        with self._lock:
            return self._entries.get(key)

    def file(self, key: str, relative: str) -> Path | None:
        """A complete entry's file (what a peer is served); None when not held."""
        entry = self.entry(key)
        if entry is None or relative not in entry.files:
            return None
        return self.root / "entries" / key / relative if relative else self._single(key)

    def path_for(self, location: str) -> Path:
        """Where a job reads ``location`` once it is here (a link to the current entry)."""
        return Path(current_path(str(self.root), location))

    def used_bytes(self) -> int:
        with self._lock:
            return sum(e.size_bytes for e in (*self._entries.values(), *self._in_flight.values()))

    def pin(self, locations: Iterable[str]) -> None:
        """The locations jobs on this node need now (replacing the last word)."""
        with self._lock:
            self._pins = set(locations)

    def inventory(self) -> dict[str, Any]:
        """What the agent reports: every entry, complete or in flight, and the totals."""
        with self._lock:
            done = list(self._entries.values())
            flying = list(self._in_flight.values())
            pins = set(self._pins)
        c = self.counters
        return {
            "root": str(self.root),
            "capacity_bytes": self.capacity_bytes,
            "used_bytes": sum(e.size_bytes for e in (*done, *flying)),
            "entries": [
                {
                    "key": e.key,
                    "location": e.location,
                    "version": e.version,
                    "size_bytes": e.size_bytes,
                    "complete": e.complete,
                    "fetched_bytes": e.size_bytes if e.complete else e.fetched_bytes,
                    "pinned": e.location in pins,
                    "last_used_s": e.last_used_s,
                    "fetched_from": e.fetched_from,
                }
                for e in sorted((*done, *flying), key=lambda e: e.key)
            ],
            "source_bytes": c.source_bytes,
            "peer_bytes": c.peer_bytes,
            "hits": c.hits,
            "misses": c.misses,
            "refetched": c.refetched,
            "errors": list(c.errors)[-5:],
            "failed": dict(self.failed),
        }

    # --- getting data -------------------------------------------------------------------------

    def ensure(
        self,
        location: str,
        endpoint_url: str | None = None,
        peers: Sequence[str] = (),
        check: bool = False,
    ) -> Entry:
        """The location's current version, here and complete: kept if already here (its files'
        sizes checked, and their SHA-256 with ``check``), else fetched from the first of
        ``peers`` (agents' base URLs) that holds it, else from the source. CacheError when it
        cannot be read or held (and why is kept in ``failed`` until it succeeds, and written
        to ``failed/<name>``: a job waiting for the copy reads the source at once)."""
        marker = Path(failed_path(str(self.path_for(location))))
        marker.unlink(missing_ok=True)  # tried again: a job may wait for this fetch
        try:
            entry = self._ensure(location, endpoint_url, peers, check)
        except CacheError as err:
            self.failed[location] = str(err)
            with _private_file(marker) as out:
                out.write(str(err).encode() + b"\n")
            raise
        self.failed.pop(location, None)
        return entry

    def _ensure(
        self, location: str, endpoint_url: str | None, peers: Sequence[str], check: bool
    ) -> Entry:
        with self._location_lock(location):
            try:
                listing = Source(location, endpoint_url).listing()
            except SourceError as err:
                raise CacheError(str(err)) from err
            key = entry_key(location, listing.version)
            held = self.entry(key)
            if held is not None and self._intact(held, check):
                self.counters.hits += 1
                self._use(held)
                return held
            if held is not None:
                self.counters.refetched += 1
                self._forget(key)
            self.counters.misses += 1
            return self._fetch(listing, key, endpoint_url, peers)

    def _fetch(
        self, listing: Listing, key: str, endpoint_url: str | None, peers: Sequence[str]
    ) -> Entry:
        size = listing.size_bytes
        entry = Entry(key, listing.location, listing.version, {}, size)
        with self._lock:
            cached = [  # an entry being fetched is held as if pinned
                Cached(e.key, e.size_bytes, e.last_used_s, e.location in self._pins)
                for e in self._entries.values()
            ] + [Cached(e.key, e.size_bytes, 0.0, True) for e in self._in_flight.values()]
            going = room(cached, self.capacity_bytes, size)
            if going is None:
                free = self.capacity_bytes - sum(c.size_bytes for c in cached if c.pinned)
                raise CacheError(
                    f"{listing.location}: {_gib(size)} does not fit in this node's cache "
                    f"({_gib(self.capacity_bytes)}, {_gib(free)} not held by jobs)"
                )
            self._in_flight[key] = entry
        try:
            for old in going:
                self._forget(old)
            started = self.clock()
            entry.fetched_from = self._from_peers(entry, listing, peers) or self._from_source(
                entry, listing, endpoint_url
            )
            entry.fetched_s = round(self.clock() - started, 3)
            entry.complete = True
            entry.last_used_s = self.clock()
            final = self.root / "entries" / key
            shutil.rmtree(final, ignore_errors=True)
            os.replace(self.root / "partial" / key, final)
            _write_json(self.root / "entries" / f"{key}.json", entry.to_json())
            with self._lock:
                self._entries[key] = entry
            self._link(entry)
            return entry
        except Exception as err:  # a source gone, a disk full: nothing half-written stays
            shutil.rmtree(self.root / "partial" / key, ignore_errors=True)
            self.counters.errors.append(str(err))
            if isinstance(err, CacheError):
                raise
            raise CacheError(f"{listing.location}: {err}") from err
        finally:
            with self._lock:
                self._in_flight.pop(key, None)

    def _from_peers(self, entry: Entry, listing: Listing, peers: Sequence[str]) -> str | None:
        """Fetch from the first peer that holds the entry whole; None when none could."""
        for url in peers:
            peer = Peer(url, self.token)
            try:
                theirs = peer.manifest(entry.key)
                files = {str(k): dict(v) for k, v in theirs["files"].items()}
                for f in listing.files:
                    want = files.get(f.path)
                    if want is None or int(want["size"]) != f.size_bytes:
                        raise PeerError(f"{url}: {entry.key} differs from the source")
                    got = self._write(entry, f.path, f.size_bytes, peer.read(entry.key, f.path))
                    if got != want["sha256"]:
                        raise PeerError(f"{url}: {entry.key}/{f.path}: checksum differs")
                    self.counters.peer_bytes += f.size_bytes
                return url
            except PeerError as err:
                self.counters.errors.append(str(err))
                shutil.rmtree(self.root / "partial" / entry.key, ignore_errors=True)
                entry.files.clear()
                entry.fetched_bytes = 0
        return None

    def _from_source(self, entry: Entry, listing: Listing, endpoint_url: str | None) -> str:
        source = Source(listing.location, endpoint_url)
        try:
            for f in listing.files:
                self._write(entry, f.path, f.size_bytes, source.read(f.path))
                self.counters.source_bytes += f.size_bytes
        except (SourceError, PeerError) as err:  # unreadable, or not the size it listed
            raise CacheError(str(err)) from err
        return "source"

    def _write(self, entry: Entry, relative: str, size: int, chunks: Iterator[bytes]) -> str:
        """One file into the partial entry, checked against ``size``; its SHA-256."""
        target = self.root / "partial" / entry.key / (relative or _SINGLE)
        _private_dir(target.parent)
        digest, written = hashlib.sha256(), 0
        with _private_file(target) as out:
            for chunk in chunks:
                out.write(chunk)
                digest.update(chunk)
                written += len(chunk)
                entry.fetched_bytes += len(chunk)
        if written != size:
            raise PeerError(f"{entry.location}: {relative or 'the file'}: {written} of {size} B")
        entry.files[relative] = {"size": size, "sha256": digest.hexdigest()}
        return digest.hexdigest()

    # --- upkeep -------------------------------------------------------------------------------

    def _intact(self, entry: Entry, check: bool) -> bool:
        for relative, meta in entry.files.items():
            path = self.root / "entries" / entry.key / (relative or _SINGLE)
            try:
                if path.stat().st_size != int(meta["size"]):
                    return False
            except OSError:
                return False
            if check and _sha256(path) != meta["sha256"]:
                return False
        return True

    def verify(self, key: str) -> bool:
        """A full check of a held entry (sizes and SHA-256); a bad one is dropped."""
        entry = self.entry(key)
        if entry is None:
            return False
        if self._intact(entry, check=True):
            return True
        self.counters.refetched += 1
        self._forget(key)
        return False

    def _use(self, entry: Entry) -> None:
        entry.last_used_s = self.clock()
        _write_json(self.root / "entries" / f"{entry.key}.json", entry.to_json())
        self._link(entry)

    def _link(self, entry: Entry) -> None:
        """Point the location's name at this entry (atomically: a new link moved over)."""
        link = self.path_for(entry.location)
        target = Path("..") / "entries" / entry.key
        if entry.files.keys() == {""}:
            target = target / _SINGLE
        aside = link.with_name(f".{link.name}.{os.getpid()}.{threading.get_ident()}")
        aside.unlink(missing_ok=True)
        aside.symlink_to(target)
        os.replace(aside, link)

    def _forget(self, key: str) -> None:
        with self._lock:
            entry = self._entries.pop(key, None)
        if entry is not None:
            link = self.path_for(entry.location)
            with contextlib.suppress(OSError):
                if os.readlink(link).split("/")[2] == key:
                    link.unlink()
        self._drop_files(key)

    def _drop_files(self, key: str) -> None:
        (self.root / "entries" / f"{key}.json").unlink(missing_ok=True)
        shutil.rmtree(self.root / "entries" / key, ignore_errors=True)

    def _single(self, key: str) -> Path:
        return self.root / "entries" / key / _SINGLE

    def _location_lock(self, location: str) -> threading.Lock:
        with self._lock:
            return self._fetching.setdefault(location, threading.Lock())


_SINGLE = "data"  # the file name of a location that is one file


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(8 * 1024 * 1024):
            digest.update(chunk)
    return digest.hexdigest()


def _write_json(path: Path, data: dict[str, Any]) -> None:
    aside = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
    with _private_file(aside) as out:
        out.write(json.dumps(data, sort_keys=True).encode())
    os.replace(aside, path)


# A cache is private to the user its agent runs as (folders 0700, files 0600, whatever the
# umask), as meshctl's state folder is: a dataset may be one only its jobs may read.


def _private_dir(path: Path) -> None:
    """``path`` and any missing parents as folders of mode 0700."""
    missing = []
    while not path.exists() and path != path.parent:
        missing.append(path)
        path = path.parent
    for folder in reversed(missing):
        folder.mkdir(mode=0o700, exist_ok=True)
        folder.chmod(0o700)


def _private_file(path: Path) -> BinaryIO:
    """``path`` opened to write from empty, mode 0600 from its first byte."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(descriptor, 0o600)
    return os.fdopen(descriptor, "wb")


def _gib(size: int) -> str:
    return f"{size / 1024**3:.2f} GiB"
