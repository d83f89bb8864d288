"""A cache of files already read and checked, so a command does not parse and validate the same
mesh, catalogs and policies again on every run (``meshctl submit`` spent about 60 ms of its
start-up there).

An entry is the pickled result of ``meshctl.files.load_text`` for one file, named by the
SHA-256 of its path, its text and a fingerprint of the code that reads it (the document models,
``meshctl.files``, its ``yamllines``, this module, pydantic's and Python's versions): a file
that changes, or code that changes, misses and is read again, as ``.pyc`` files work for
source. Only files that passed are kept: a file with problems reports them afresh every time.

The folder is ``$MESHCTL_CACHE_DIR`` (empty: no cache), else ``$XDG_CACHE_HOME/meshctl``, else
``~/.cache/meshctl``; it is made private to its user (0700), since what it holds is unpickled.
Anything that goes wrong with it (unwritable, full, a damaged entry) falls back to reading the
file; at most ``KEEP`` entries stay, the oldest read go first.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pickle
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

KEEP = 512
T = TypeVar("T")
_fingerprint: bytes | None = None


def folder() -> Path | None:
    """Where entries live; None when ``MESHCTL_CACHE_DIR`` is set empty (no cache)."""
    chosen = os.environ.get("MESHCTL_CACHE_DIR")
    if chosen is not None:
        return Path(chosen) / "files" if chosen else None
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "meshctl" / "files"


def fingerprint() -> bytes:
    """What the reading code is: every source file behind a document's type, by size and
    modification time (a stat each, no reading), and the versions of pydantic and Python."""
    global _fingerprint
    if _fingerprint is None:
        import pydantic

        here = Path(__file__).parent  # meshctl/files
        package = here.parent
        sources = [
            *sorted((package / "model").glob("*.py")),
            *(here / name for name in ("__init__.py", "yamllines.py", "cache.py")),
            *(package / name for name in ("units.py", "problems.py")),
        ]
        parts = [pydantic.VERSION, sys.version]
        for source in sources:
            with contextlib.suppress(OSError):
                stat = source.stat()
                parts.append(f"{source.name}:{stat.st_size}:{stat.st_mtime_ns}")
        _fingerprint = "\n".join(parts).encode()
    return _fingerprint


def key(name: str, text: str) -> str:
    digest = hashlib.sha256(fingerprint())
    for part in (name, text):
        digest.update(b"\0" + part.encode("utf-8", "surrogatepass"))
    return digest.hexdigest()


def cached(name: str, text: str, read: Callable[[str, str], T]) -> T:
    """``read(text, name)``, from the cache when the same text at the same path was read by
    the same code before; kept there when it succeeds."""
    where = folder()
    if where is None:
        return read(text, name)
    entry = where / f"{key(name, text)}.pickle"
    if _private(where):  # nothing is unpickled from a folder others can write
        with contextlib.suppress(Exception):  # a miss, or an entry damaged: read the file
            with entry.open("rb") as stream:
                found: T = pickle.load(stream)
            with contextlib.suppress(OSError):
                os.utime(entry)  # read now: the last to go
            return found
    result = read(text, name)
    with contextlib.suppress(Exception):  # unwritable, full, unpicklable: no entry, same result
        _keep(where, entry, pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL))
    return result


def _private(where: Path) -> bool:
    """The folder is this user's alone (False when it does not exist yet)."""
    try:
        stat = where.stat()
    except OSError:
        return False
    return stat.st_uid == os.getuid() and not stat.st_mode & 0o077


def _keep(where: Path, entry: Path, blob: bytes) -> None:
    where.mkdir(parents=True, exist_ok=True, mode=0o700)
    if not _private(where):
        return  # another user's, or open to others: it would never be read
    partial = entry.with_suffix(f".{os.getpid()}.partial")
    partial.write_bytes(blob)
    os.replace(partial, entry)  # whole or absent, also with several writers at once
    entries = sorted(where.glob("*.pickle"), key=lambda p: p.stat().st_mtime_ns)
    for old in entries[: max(0, len(entries) - KEEP)]:
        with contextlib.suppress(OSError):
            old.unlink()
