"""A node's data cache, as both the node agent and the simulator keep it (pure).

A dataset is cached whole, keyed by its location and its version at the source (an object's
ETag or generation, a file's size and mtime), so a changed source is a new entry and an old
copy is never served for it. The cache has a size limit; room for a new entry is made by
evicting the least recently used entries that no running or admitted job needs (pinned).
When even that is not enough, nothing is evicted and the entry is not cached: the job reads
from its source.
"""

from __future__ import annotations

import hashlib
import posixpath
import re
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Cached:
    """An entry of a node's cache."""

    key: str
    size_bytes: int  # whole; an entry still being fetched counts at its full size
    last_used_s: float  # fetched, or last handed to a job
    pinned: bool = False  # a running or admitted job reads it: never evicted


def entry_key(location: str, version: str) -> str:
    """A folder name for ``location`` at ``version``: readable, and unique by a digest."""
    tail = location.rstrip("/").rsplit("/", 1)[-1] or "data"
    readable = re.sub(r"[^A-Za-z0-9._-]+", "-", tail)[:40].strip(".-") or "data"
    digest = hashlib.sha256(f"{location}\0{version}".encode()).hexdigest()[:16]
    return f"{readable}-{digest}"


def room(entries: Sequence[Cached], capacity_bytes: int, needed_bytes: int) -> list[str] | None:
    """The keys to evict, least recently used first, so that ``needed_bytes`` more fit in
    ``capacity_bytes``; [] when they fit already; None when they cannot fit even with every
    unpinned entry gone (then nothing is evicted)."""
    used = sum(e.size_bytes for e in entries)
    over = used + needed_bytes - capacity_bytes
    if over <= 0:
        return []
    going: list[str] = []
    for entry in sorted((e for e in entries if not e.pinned), key=lambda e: (e.last_used_s, e.key)):
        if over <= 0:
            break
        going.append(entry.key)
        over -= entry.size_bytes
    return going if over <= 0 else None


def location_name(location: str) -> str:
    """The name a location's current complete copy goes by in a node's cache (what a job is
    handed: the same on every node, whatever version is cached)."""
    return entry_key(location, "")


def current_path(root: str, location: str) -> str:
    """Where a node's cache under ``root`` links the current complete copy of ``location``."""
    return f"{root.rstrip('/')}/current/{location_name(location)}"


def failed_path(current: str) -> str:
    """Where a node's cache marks that its last fetch of a location failed (the error inside),
    beside ``current``, that location's ``current_path``: ``<root>/failed/<name>``."""
    folder, name = posixpath.split(current)
    return posixpath.join(posixpath.dirname(folder), "failed", name)


def env_name(dataset: str) -> str:
    """The variable a job reads a dataset's local path from: ``MESHCTL_DATA_<NAME>``."""
    return "MESHCTL_DATA_" + re.sub(r"[^A-Za-z0-9]", "_", dataset).upper()
