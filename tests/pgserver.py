"""A throwaway Postgres server for the tests: ``initdb`` into a temporary folder, ``pg_ctl start``
on a free loopback port, one fresh database per test, ``pg_ctl stop -m immediate`` at the end.

Postgres refuses to run as root. When the tests run as root (containers, CI), ``initdb`` and the
server run as an unprivileged user through ``setpriv`` (the ``postgres`` system user the
postgresql package creates, else ``nobody``), in a folder that user owns, made under ``/tmp``
(a pytest ``tmp_path`` sits in a folder only root may enter). The binaries are taken from PATH,
else from the newest ``/usr/lib/postgresql/N/bin`` (Debian and Ubuntu keep them there). When
they are missing the fixture fails: CI has them, and a silent skip would hide the backend.
"""

from __future__ import annotations

import itertools
import os
import pwd
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from meshctl.host.ports import free_port

if TYPE_CHECKING:
    import psycopg

SUPERUSER = "meshctl"
START_TIMEOUT_S = 60
# The tests' databases collate with ICU's en-US rules, as a production database often does
# (not "C"): the store must order keys by code point whatever the database's collation.
CREATE_DATABASE = (
    "CREATE DATABASE {name} TEMPLATE template0 ENCODING 'UTF8' "
    "LOCALE_PROVIDER icu ICU_LOCALE 'en-US' LOCALE 'C.UTF-8'"
)
# A test's database emptied: its schema dropped (about 0.1 s with the store's tables; a new
# database per test takes 0.3 to 0.5 s), any connection a test left open ended first.
CLEAN = """
SELECT pg_terminate_backend(pid) FROM pg_stat_activity
    WHERE datname = current_database() AND pid <> pg_backend_pid();
DROP SCHEMA public CASCADE;
CREATE SCHEMA public;
"""


def binaries() -> Path:
    """The folder holding ``initdb`` and ``pg_ctl``; ``RuntimeError`` when there is none."""
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(found).resolve().parent
    installed = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"),
        key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit() else 0,
    )
    if installed:
        return installed[-1].parent
    raise RuntimeError(
        "the Postgres tests need initdb and pg_ctl (PATH or /usr/lib/postgresql/N/bin): "
        "install postgresql-15 (apt-get install postgresql-15)"
    )


def _runner() -> tuple[list[str], int | None, int | None]:
    """The command prefix that drops root (empty when not root), and the uid/gid to own files."""
    if os.geteuid() != 0:
        return [], None, None
    for name in ("postgres", "nobody"):
        try:
            user = pwd.getpwnam(name)
        except KeyError:
            continue
        prefix = ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups"]
        return [*prefix, "--"], user.pw_uid, user.pw_gid
    raise RuntimeError("running as root, and no postgres or nobody user to run Postgres as")


@dataclass
class PgServer:
    """A running throwaway server; ``database()`` gives a new empty database's URL."""

    folder: Path
    bin: Path
    port: int
    password: str
    prefix: list[str]
    _names: Iterator[int] = field(default_factory=itertools.count)
    _conns: dict[str, psycopg.Connection[Any]] = field(default_factory=dict)

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{SUPERUSER}:{self.password}@127.0.0.1:{self.port}/{database}"

    def ctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run ``pg_ctl`` on this server's data folder as the server's user."""
        command = [*self.prefix, str(self.bin / "pg_ctl"), "-D", str(self.folder / "data"), *args]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
        if check and done.returncode != 0:
            raise RuntimeError(f"pg_ctl {' '.join(args)} failed: {done.stderr}{self.log()}")
        return done

    def log(self) -> str:
        path = self.folder / "server.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    def start(self) -> None:
        options = (
            f"-p {self.port} -k {self.folder / 'socket'} -c listen_addresses=127.0.0.1 "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off "
            "-c max_connections=200"
        )
        self.ctl("-w", "-t", str(START_TIMEOUT_S), "-l", str(self.folder / "server.log"),
                 "-o", options, "start")  # fmt: skip

    def stop(self, mode: str = "immediate") -> None:
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()
        self.ctl("-w", "-m", mode, "stop")

    def execute(self, sql: str, database: str = "postgres") -> list[tuple[Any, ...]]:
        """Run SQL in a database as the superuser (one connection per database, kept open,
        opened again when a restart broke it); the rows of its last statement."""
        import psycopg

        for last in (False, True):
            conn = self._conns.get(database)
            if conn is None or conn.closed:
                conn = self._conns[database] = psycopg.connect(self.url(database), autocommit=True)
            try:
                cursor = conn.execute(sql.encode())
                return cursor.fetchall() if cursor.description else []
            except psycopg.OperationalError:
                if last or not conn.broken:
                    raise
                conn.close()
        raise AssertionError("unreachable")

    def database(self) -> str:
        """A new, empty database (created from template0, collated as above); its URL."""
        name = f"test_{next(self._names)}"
        self.execute(CREATE_DATABASE.format(name=name))
        return self.url(name)

    def clean(self, url: str) -> str:
        """Empty a database ``database()`` made; its URL."""
        self.execute(CLEAN, url.rsplit("/", 1)[1])
        return url


def _initdb(folder: Path, bin_dir: Path, prefix: list[str], password: str) -> None:
    pwfile = folder / "pwfile"
    pwfile.write_text(password + "\n")
    command = [
        *prefix, str(bin_dir / "initdb"), "-D", str(folder / "data"), "-U", SUPERUSER,
        f"--pwfile={pwfile}", "--auth-local=trust", "--auth-host=scram-sha-256",
        "-E", "UTF8", "--locale=C.UTF-8", "--no-sync",
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    pwfile.unlink()
    if done.returncode != 0:
        raise RuntimeError(f"initdb failed ({done.returncode}): {done.stdout}{done.stderr}")


@contextmanager
def pg_server() -> Iterator[PgServer]:
    """Start a throwaway server; stop it and remove its folder on exit."""
    bin_dir = binaries()
    prefix, uid, gid = _runner()
    folder = Path(tempfile.mkdtemp(prefix="meshctl-pg-"))  # 0700
    try:
        (folder / "socket").mkdir()
        if uid is not None and gid is not None:
            for path in (folder, folder / "socket"):
                os.chown(path, uid, gid)
        password = secrets.token_urlsafe(16)
        _initdb(folder, bin_dir, prefix, password)
        server = _started(folder, bin_dir, prefix, password)
        try:
            yield server
        finally:
            server.stop()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _started(folder: Path, bin_dir: Path, prefix: list[str], password: str) -> PgServer:
    """The server started on a free port (another, when one is taken between the pick and the
    start)."""
    for attempt in range(3):
        server = PgServer(folder, bin_dir, free_port(), password, prefix)
        try:
            server.start()
            return server
        except RuntimeError:
            if attempt == 2:
                raise
    raise AssertionError("unreachable")
