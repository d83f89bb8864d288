"""The state folder is private: folders 0700, files 0600, whatever the user's umask.

``$MESHCTL_HOME`` holds what another user of the machine must not read: the pools' Ray tokens,
the jobs' commands, environments and logs, copies of their working directories. Everything
meshctl writes there goes through these helpers, which set the mode when the file or folder is
created (``os.open`` with the mode, then ``chmod``, because the umask only ever removes bits),
never after: a file is not readable by others even for a moment.

A state folder made by an older meshctl (or by hand) with looser modes is tightened when it is
opened (``private_dir``): the home folder itself first, which alone shuts everyone else out of
everything below it, and its known subfolders. A warning says so once, naming the folder.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import IO

DIR_MODE = 0o700
FILE_MODE = 0o600
RUNNABLE_MODE = 0o700  # a copied working directory's scripts stay executable by their owner

log = logging.getLogger("meshctl.state")


STATE_MARKS = ("state.db", "run", "logs", "packages")  # what makes a folder a meshctl home


def private_home(home: Path) -> Path:
    """The state folder, 0700. An existing folder is tightened only when it is meshctl's (it
    holds a state.db, run/, logs/ or packages/, or nothing yet): ``--home /tmp`` or a home
    that is also something else keeps its modes (what meshctl writes inside is private all
    the same)."""
    if path_is_ours(home):
        return private_dir(home)
    return home


def path_is_ours(home: Path) -> bool:
    if not home.exists():
        return True
    if not home.is_dir() or home.stat().st_mode & stat.S_ISVTX:  # a shared folder like /tmp
        return False
    names = {p.name for p in home.iterdir()}
    return not names or bool(names & set(STATE_MARKS))


def private_dir(path: Path) -> Path:
    """``path`` as a folder of mode 0700: created (with any missing parents, each 0700) or
    tightened if it exists with looser modes. Returns ``path``."""
    missing: list[Path] = []
    probe = path
    while not probe.exists() and probe != probe.parent:
        missing.append(probe)
        probe = probe.parent
    for folder in reversed(missing):
        with contextlib.suppress(FileExistsError):  # made meanwhile by another process
            folder.mkdir(mode=DIR_MODE)
        folder.chmod(DIR_MODE)
    _tighten(path, DIR_MODE)
    return path


def write_private(path: Path, data: str | bytes) -> None:
    """Replace ``path`` atomically with ``data``, mode 0600 from the first byte."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    raw = data.encode("utf-8") if isinstance(data, str) else data
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    with open_private(tmp, "wb") as out:
        out.write(raw)
    tmp.replace(path)


def open_private(path: Path, mode: str = "ab") -> IO[bytes]:
    """Open a binary file for writing (``ab`` appends, ``wb`` truncates), created 0600; an
    existing file is tightened to 0600."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if "a" in mode else os.O_TRUNC)
    fd = os.open(path, flags | getattr(os, "O_CLOEXEC", 0), FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)  # an existing file keeps its mode through os.open
        return os.fdopen(fd, mode)
    except BaseException:
        os.close(fd)
        raise


def private_file(path: Path) -> None:
    """Tighten an existing file to 0600 (nothing if it does not exist)."""
    with contextlib.suppress(FileNotFoundError):
        _tighten(path, FILE_MODE)


def private_tree(root: Path) -> None:
    """Every folder under ``root`` (and ``root``) 0700, every file 0600, or 0700 where its
    owner could run it (a script in a copied working directory); links are left alone."""
    for path in _walk(root):
        if path.is_symlink():
            continue
        if path.is_dir():
            path.chmod(DIR_MODE)
        else:
            runnable = path.stat().st_mode & stat.S_IXUSR
            path.chmod(RUNNABLE_MODE if runnable else FILE_MODE)


def _walk(root: Path) -> Iterator[Path]:
    yield root
    for folder, dirs, files in os.walk(root):
        for name in (*dirs, *files):
            yield Path(folder) / name


def _tighten(path: Path, mode: int) -> None:
    current = stat.S_IMODE(path.stat().st_mode)
    if current & 0o077:
        path.chmod(mode)
        if path.is_dir():
            log.warning("meshctl: %s was mode %o; made it %o (private state)", path, current, mode)
