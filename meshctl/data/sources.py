"""A dataset's location at its source, through pyarrow's filesystems: its files and version.

A location is a folder (every file under it, recursively) or one file: ``s3://bucket/prefix``
(with an S3-compatible endpoint override), ``gs://bucket/prefix``, ``file:///path`` or an
absolute path (a shared folder). Its version is a digest of each file's relative path, size
and modification time as the source lists them (pyarrow does not expose an object's ETag):
an object rewritten at the source is a new version, so a stale copy is never served.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow.fs as pafs

from meshctl.workload.storage import filesystem

CHUNK = 8 * 1024 * 1024  # bytes read at a time from a source


class SourceError(Exception):
    """The location cannot be read: unreachable, missing, or empty."""


class SourceMissing(SourceError):
    """The source answered: nothing is there, or (``empty``) a folder with no files."""

    def __init__(self, location: str, empty: bool = False) -> None:
        super().__init__(f"{location}: {'holds no files' if empty else 'not found'}")
        self.empty = empty


@dataclass(frozen=True, slots=True)
class SourceFile:
    path: str  # relative to the location ("" when the location is one file)
    size_bytes: int
    mtime_ns: int


@dataclass(frozen=True, slots=True)
class Listing:
    location: str
    files: tuple[SourceFile, ...]

    @property
    def size_bytes(self) -> int:
        return sum(f.size_bytes for f in self.files)

    @property
    def version(self) -> str:
        h = hashlib.sha256()
        for f in self.files:
            h.update(f"{f.path}\0{f.size_bytes}\0{f.mtime_ns}\n".encode())
        return h.hexdigest()[:20]


class Source:
    """One dataset location, opened with its filesystem."""

    def __init__(
        self, location: str, endpoint_url: str | None = None, timeout_s: float | None = 30.0
    ) -> None:
        self.location = location
        try:
            self.fs, self.path = filesystem(location, endpoint_url, timeout_s)
        except Exception as err:  # a malformed URI, an unknown scheme
            raise SourceError(f"{location}: {err}") from err
        self.path = self.path.rstrip("/") or self.path

    def found(self) -> pafs.FileInfo:
        """What is at the location (one request): a file or a folder; SourceMissing when
        nothing is, SourceError when the source cannot be asked."""
        try:
            top = self.fs.get_file_info(self.path)
        except Exception as err:
            raise SourceError(f"{self.location}: {_why(err)}") from err
        if top.type not in (pafs.FileType.File, pafs.FileType.Directory):
            raise SourceMissing(self.location)
        return top

    def listing(self, top: pafs.FileInfo | None = None) -> Listing:
        """Its files, sorted by path (``top``: what ``found`` said, not asked again);
        SourceMissing when nothing is there or it holds no files, SourceError when it cannot
        be listed."""
        top = self.found() if top is None else top
        try:
            if top.type == pafs.FileType.File:
                infos = [top]
            else:
                selector = pafs.FileSelector(self.path, recursive=True)
                infos = [i for i in self.fs.get_file_info(selector) if i.type == pafs.FileType.File]
        except Exception as err:
            raise SourceError(f"{self.location}: {_why(err)}") from err
        files = tuple(
            sorted(
                (
                    SourceFile(
                        _relative(i.path, self.path, top.type),
                        int(i.size or 0),
                        int(i.mtime_ns or 0),
                    )
                    for i in infos
                ),
                key=lambda f: f.path,
            )
        )
        if not files:
            raise SourceMissing(self.location, empty=True)
        return Listing(self.location, files)

    def read(self, relative: str) -> Iterator[bytes]:
        """One file's bytes, a chunk at a time."""
        path = f"{self.path}/{relative}" if relative else self.path
        try:
            with self.fs.open_input_stream(path) as stream:
                while chunk := stream.read(CHUNK):
                    yield chunk
        except Exception as err:
            raise SourceError(f"{self.location}: {relative or 'the file'}: {_why(err)}") from err


def _relative(path: str, base: str, kind: pafs.FileType) -> str:
    if kind == pafs.FileType.File:
        return ""
    return path[len(base) :].lstrip("/")


def _why(err: Exception) -> str:
    return str(err).splitlines()[0] if str(err) else type(err).__name__
