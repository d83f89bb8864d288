"""A job's working directory as a gzipped tar: what ``meshctl submit`` sends with a job
(``working_dir`` in ``POST /v1/jobs``) and what a shared store keeps of a job's files
(``controller/packages.py``). The standard library only: the submit client packs a folder
before anything heavy is imported."""

from __future__ import annotations

import io
import tarfile
from collections.abc import Sequence
from fnmatch import fnmatch
from pathlib import Path

IGNORED = (".git", "__pycache__", ".venv", "venv", "node_modules", "*.pyc", ".mypy_cache")
"""What a job's folder leaves out, wherever it goes (copied, packed, uploaded)."""


def archive(folder: Path, ignored: Sequence[str] = (), left_out: Sequence[Path] = ()) -> bytes:
    """A folder's contents as a gzipped tar, less what matches ``ignored`` (``fnmatch``
    patterns, each tried on every part of a member's path) and less the folders ``left_out``
    (meshctl's own home where it lies inside the folder: never shipped with a job, whose
    uploads would otherwise travel again with every submission)."""
    folder = folder.resolve()
    skipped = [p.resolve() for p in left_out]

    def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        parts = Path(info.name).parts
        if any(fnmatch(p, pat) for p in parts for pat in ignored):
            return None
        return None if any((folder / info.name).is_relative_to(s) for s in skipped) else info

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=6) as tar:
        for child in sorted(folder.iterdir()):
            tar.add(child, arcname=child.name, filter=keep)
    return buffer.getvalue()
