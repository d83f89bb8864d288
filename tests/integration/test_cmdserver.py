"""``meshctl submit`` served by a home's command server (``meshctl.cli.cmdserver``) as real
processes: the installed command hands its streams, folder, environment and arguments to the
server, whose child runs the command warm; what is stored, printed and returned is what the
command alone gives. No controller runs: the server is started here, as the controller starts
it, and the jobs stay queued."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from meshctl.cli import relay
from meshctl.host.procs import zombie
from meshctl.state import JobRecord, open_store
from tests.conftest import wait_until

pytestmark = pytest.mark.integration

MESHCTL = str(Path(sys.executable).with_name("meshctl"))
WAIT_S = 60.0


class Served:
    def __init__(self, root: Path) -> None:
        self.root, self.home = root, root / "home"
        self.env = {
            **os.environ,
            "MESHCTL_HOME": str(self.home),
            "MESHCTL_CACHE_DIR": str(root / "cache"),
        }
        self.socket = relay.socket_path(self.home)
        self.server = self.start()

    def start(self) -> subprocess.Popen[bytes]:
        server = subprocess.Popen(
            [sys.executable, "-m", "meshctl.cli.cmdserver", str(self.home), str(os.getpid())],
            env=self.env, cwd=self.root, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        wait_until("the command server never listened", self.socket.exists, WAIT_S)
        return server

    def submit(
        self, *args: str, cwd: Path | None = None, **env: str
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [MESHCTL, "submit", *args],
            capture_output=True, text=True, cwd=cwd or self.root, env={**self.env, **env},
        )  # fmt: skip

    def jobs(self) -> list[JobRecord]:
        with open_store(self.home) as store:
            return store.list(JobRecord)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    found = Served(tmp_path_factory.mktemp("served"))
    yield found
    found.server.terminate()
    found.server.wait(WAIT_S)


# The importtime lines of the caller's own process: a served command imports none of the CLI.
IMPORTED = "-X importtime"


def test_a_served_submission_is_queued_and_its_id_printed(served: Served) -> None:
    before = {j.id for j in served.jobs()}
    done = subprocess.run(
        [sys.executable, *IMPORTED.split(), MESHCTL, "submit", "--gpus", "1", "--name", "served",
         "--", "python", "-c", "pass"],
        capture_output=True, text=True, cwd=served.root, env=served.env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    job_id = done.stdout.strip()
    assert job_id.startswith("served-")
    assert {j.id for j in served.jobs()} - before == {job_id}
    assert "no controller is running" in done.stderr  # the command's own warning, as ever
    imported = [line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()
                if line.startswith("import time:")]  # fmt: skip
    assert "meshctl.cli.relay" in imported  # the caller handed it over ...
    assert not {"typer", "pydantic", "meshctl.cli.app"} & set(imported)  # ... imported none


def test_bad_input_is_the_commands_own_error(served: Served) -> None:
    before = served.jobs()
    flag = served.submit("--gpus", "1", "--nodes", "0", "--", "true")
    job = served.root / "bad.yaml"
    job.write_text("apiVersion: meshctl/v1\nkind: Job\n")
    file = served.submit("bad.yaml")
    assert (flag.returncode, file.returncode) == (2, 2)
    assert flag.stderr.splitlines() == [
        "error: --nodes: expected greater than or equal to 1 (meshctl submit --help)"
    ]
    assert file.stderr.splitlines() == [
        "error: bad.yaml:1: metadata: required field is missing",
        "error: bad.yaml:1: spec: required field is missing",
    ]
    assert served.jobs() == before


def test_the_callers_folder_and_environment_are_the_commands(
    served: Served, tmp_path: Path
) -> None:
    """A job file named from the caller's folder; a mesh file named in its environment."""
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "mine.yaml").write_text(
        "apiVersion: meshctl/v1\nkind: Job\nmetadata: {name: from-my-folder}\n"
        "spec: {kind: batch, entrypoint: python -c pass, resources: {gpus: 1}}\n"
    )
    done = served.submit("jobs/mine.yaml", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith("from-my-folder-")
    missing = served.submit("--gpus", "1", "--", "true", MESHCTL_MESH=str(tmp_path / "no.yaml"))
    assert missing.returncode == 2
    assert "no.yaml" in missing.stderr


def test_output_goes_where_the_callers_went(served: Served, tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    with out.open("w") as sink:
        done = subprocess.run(
            [MESHCTL, "submit", "--gpus", "1", "--dry-run", "--", "true"],
            stdout=sink, stderr=subprocess.PIPE, text=True, cwd=served.root, env=served.env,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert out.read_text().strip()  # the plan, written to the caller's file


def test_a_server_whose_meshctl_changed_stops_and_the_command_runs_itself(
    tmp_path: Path,
) -> None:
    """A module the server loaded changes on disk: the next submission is refused, runs in
    its own process all the same, and the server stops; the module is left as it was."""
    own = Served(tmp_path)
    module = Path(relay.__file__)
    before = module.stat()
    try:
        os.utime(module, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000_000))
        done = own.submit("--gpus", "1", "--", "python", "-c", "pass")
        assert done.returncode == 0, done.stderr
        assert len(own.jobs()) == 1
        assert own.server.wait(WAIT_S) == 0
        assert not own.socket.exists()
    finally:
        os.utime(module, ns=(before.st_atime_ns, before.st_mtime_ns))
        own.server.kill()


def test_sigterm_stops_the_server_and_removes_its_socket(tmp_path: Path) -> None:
    """Twice, as at ``meshctl down``: the controller's session, then the controller."""
    own = Served(tmp_path)
    own.server.send_signal(signal.SIGTERM)
    own.server.send_signal(signal.SIGTERM)
    assert own.server.wait(WAIT_S) == 0
    assert not own.socket.exists()
    done = own.submit("--gpus", "1", "--", "python", "-c", "pass")
    assert done.returncode == 0, done.stderr  # in its own process, as before any server


# Starts a server and leaves once it listens.
ORPHAN = """
import os, subprocess, sys, time
from pathlib import Path
from meshctl.cli import relay
from meshctl.host.procs import zombie
subprocess.Popen([sys.executable, "-m", "meshctl.cli.cmdserver", sys.argv[1], str(os.getpid())])
deadline = time.monotonic() + 60
while not relay.socket_path(Path(sys.argv[1])).exists() and time.monotonic() < deadline:
    time.sleep(0.05)
"""


def test_a_server_whose_parent_is_gone_stops(tmp_path: Path) -> None:
    home = tmp_path / "home"
    subprocess.run([sys.executable, "-c", ORPHAN, str(home)], check=True, cwd=tmp_path)
    path = relay.socket_path(home)
    assert path.exists()
    wait_until("the orphaned server kept serving", lambda: not path.exists(), WAIT_S)


def test_a_request_that_is_not_one_is_refused_and_the_server_goes_on(served: Served) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as sock:
        sock.connect(str(served.socket))
        socket.send_fds(sock, [b"not json"], [0, 1, 2])
        assert json.loads(sock.recv(relay.MAX_MESSAGE)) == {"refused": "not a request"}
    done = served.submit("--gpus", "1", "--", "python", "-c", "pass")
    assert done.returncode == 0, done.stderr


# Starts a server and leaves at once, while it still warms up: as a controller that died and
# was restarted at once leaves its server behind.
LEFT_AT_ONCE = """
import os, subprocess, sys
command = [sys.executable, "-m", "meshctl.cli.cmdserver", sys.argv[1], str(os.getpid())]
print(subprocess.Popen(command).pid)
"""


def test_a_server_left_while_it_warmed_up_leaves_the_live_servers_socket(tmp_path: Path) -> None:
    live = Served(tmp_path)
    try:
        started = subprocess.run(
            [sys.executable, "-c", LEFT_AT_ONCE, str(live.home)],
            capture_output=True, text=True, check=True, cwd=tmp_path, env=live.env,
        )  # fmt: skip
        left = int(started.stdout)
        wait_until(
            "the server left behind kept running",
            lambda: zombie(left),
            WAIT_S,
        )
        assert live.socket.exists()
        assert live.server.poll() is None
        done = live.submit("--gpus", "1", "--", "python", "-c", "pass")
        assert done.returncode == 0, done.stderr
    finally:
        live.server.terminate()
        live.server.wait(WAIT_S)
