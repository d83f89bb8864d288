"""A job's files, wherever the controller that runs it happens to be.

At submission a job's working directory is copied under the home of the host that took it in
(``packages/<job id>``, ``submit.package``), and the job's spec points there. On a shared store
(``--store``: an API server and controllers on several hosts) the copy is also kept in the
store, as a gzipped tar (``Store.put_package``). A controller about to submit a job whose folder
is not on its host (a standby that took over on another machine) unpacks that archive under its
own home, once, and submits from there (``Packages``). A job whose files are on neither fails
its submission with the reason, like any other submission error.

The archive is unpacked as an upload is: tarfile's ``data`` filter (no absolute paths, no
``..``, no links out, no devices), refused before anything is written if it would unpack to more
than it may.
"""

from __future__ import annotations

import io
import os
import secrets
import shutil
import tarfile
from dataclasses import replace
from pathlib import Path

from meshctl.pools.observed import Submission
from meshctl.state.private import private_dir, private_tree
from meshctl.state.store import Store

PACKAGES = "packages"


class BadArchive(ValueError):
    """Not a gzipped tar, or a truncated or corrupt one."""


class TooLarge(ValueError):
    """An archive that would unpack to more than allowed."""


def unpack_archive(data: bytes, target: Path, most_bytes: int) -> None:
    """Unpack a gzipped tar into ``target`` (made, private). ``BadArchive`` or ``TooLarge``
    (its members add up to more than ``most_bytes``), nothing left behind."""
    try:
        tar = tarfile.open(fileobj=io.BytesIO(data), mode="r:gz")  # noqa: SIM115
    except (tarfile.TarError, OSError, EOFError):
        raise BadArchive("expected a gzipped tar") from None
    with tar:
        try:
            members = tar.getmembers()
        except (tarfile.TarError, OSError, EOFError):
            raise BadArchive("the archive is truncated or corrupt") from None
        size = sum(m.size for m in members if m.isfile())
        if size > most_bytes:
            raise TooLarge(
                f"unpacks to {size / 2**20:.1f} MiB; at most {most_bytes / 2**20:.0f} MiB"
            )
        target.mkdir(mode=0o700)
        try:
            tar.extractall(target, filter="data")
        except (tarfile.TarError, OSError) as err:
            shutil.rmtree(target, ignore_errors=True)
            raise BadArchive(f"cannot unpack: {err}") from None
    private_tree(target)


class Packages:
    """The controller's side: a submission's working directory made local (``here``)."""

    def __init__(self, store: Store, home: Path, most_bytes: int = 8 * 100 * 1024**2) -> None:
        self.store, self.home, self.most_bytes = store, home, most_bytes

    def here(self, job_id: str, submission: Submission) -> Submission:
        """The submission, its ``working_dir`` a folder on this host."""
        given = submission.runtime_env.get("working_dir")
        if not isinstance(given, str) or not given or "://" in given:
            return submission  # none, or a URI the cluster reads itself
        found = self.folder(job_id, given)
        if found == given:
            return submission
        return replace(submission, runtime_env={**submission.runtime_env, "working_dir": found})

    def folder(self, job_id: str, given: str) -> str:
        """``given`` if it is a folder here; else the job's files from the store, unpacked
        under this home (once: kept for its next attempts)."""
        if Path(given).is_dir():
            return given
        mine = self.home / PACKAGES / job_id
        if mine.is_dir():
            return str(mine)
        data = self.store.package(job_id)
        if data is None:
            raise FileNotFoundError(
                f"job {job_id}: its files are not on this host ({given}) and the state store "
                "keeps no copy (share the store with --store, or run the controller where "
                "the job was submitted)"
            )
        private_dir(self.home / PACKAGES)
        landing = self.home / PACKAGES / f".{job_id}.{secrets.token_hex(4)}"
        unpack_archive(data, landing, self.most_bytes)
        try:
            os.rename(landing, mine)  # whole or not at all
        except OSError:
            shutil.rmtree(landing, ignore_errors=True)
            if not mine.is_dir():
                raise
        return str(mine)
