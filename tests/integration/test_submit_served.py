"""``meshctl submit`` as a request, as real processes: the installed command sends the job to
the home's local API (``meshctl.server.local``, started here as the controller starts it,
without Ray), or, where none serves, admits it in its own process through the same
application-layer call; either way it prints the same. No controller runs: the jobs stay
queued."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from meshctl.app.remote import _unix_connection, api_socket, exchange
from meshctl.cli.submitclient import JOBS
from meshctl.host.procs import zombie
from meshctl.state import JobRecord, open_store
from tests.conftest import wait_until

pytestmark = pytest.mark.integration

MESHCTL = str(Path(sys.executable).with_name("meshctl"))
WAIT_S = 60.0
NOBODY = 65534


class Home:
    """A home, served (its local API started as the controller starts it) or not."""

    def __init__(self, root: Path, served: bool) -> None:
        self.root, self.home = root, root / "home"
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("MESHCTL_")},
            "MESHCTL_HOME": str(self.home),
            "MESHCTL_CACHE_DIR": os.environ["MESHCTL_CACHE_DIR"],
        }
        self.socket = api_socket(self.home)
        self.server = self.start() if served else None

    def start(self) -> subprocess.Popen[bytes]:
        server = subprocess.Popen(
            [sys.executable, "-m", "meshctl.server.local", str(self.home), str(os.getpid())],
            env=self.env, cwd=self.root, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        wait_until("the local API never listened", self.socket.exists, WAIT_S)
        return server

    def submit(self, *args: str, python: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*python, MESHCTL, "submit", *args],
            capture_output=True, text=True, cwd=self.root, env=self.env,
        )  # fmt: skip

    def jobs(self) -> list[JobRecord]:
        if not (self.home / "state.db").exists():
            return []
        with open_store(self.home) as store:
            return store.list(JobRecord)

    def stop(self) -> None:
        if self.server is not None:
            self.server.terminate()
            self.server.wait(WAIT_S)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Home]:
    found = Home(tmp_path_factory.mktemp("served"), served=True)
    yield found
    found.stop()


@pytest.fixture
def unserved(tmp_path: Path) -> Home:
    return Home(tmp_path, served=False)


def test_a_served_submission_is_queued_and_its_id_printed_importing_no_cli(served: Home) -> None:
    before = {j.id for j in served.jobs()}
    done = served.submit("--gpus", "1", "--name", "served", "--", "python", "-c", "pass",
                         python=(sys.executable, "-X", "importtime"))  # fmt: skip
    assert done.returncode == 0, done.stderr
    job_id = done.stdout.strip()
    assert job_id.startswith("served-")
    assert {j.id for j in served.jobs()} - before == {job_id}
    (record,) = [j for j in served.jobs() if j.id == job_id]
    assert (record.owner, record.team) == ("local", "default")
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()
                if line.startswith("import time:")}  # fmt: skip
    assert "meshctl.cli.submitclient" in imported  # sent as a request ...
    assert not {"typer", "pydantic", "rich", "yaml", "meshctl.cli.app"} & imported  # ... light


def test_a_controller_less_home_admits_in_process(unserved: Home) -> None:
    done = unserved.submit("--gpus", "1", "--name", "here", "--", "python", "-c", "pass")
    assert done.returncode == 0, done.stderr
    (record,) = unserved.jobs()
    assert done.stdout == f"{record.id}\n"
    assert (
        done.stderr == f"warning: {record.id} is queued, but no controller is running: meshctl up\n"
    )
    assert (record.owner, record.team) == ("local", "default")


SAME = [
    # id, the command line's words after submit (JOB: a valid job file)
    pytest.param(["--dry-run", "--gpus", "1", "--name", "plan", "--", "python", "x.py"],
                 id="a dry run"),
    pytest.param(["--dry-run", "-o", "json", "--gpus", "2", "--", "python", "x.py"],
                 id="a dry run as json"),
    pytest.param(["--dry-run", "--explain", "JOB"], id="a job file explained"),
    pytest.param(["--gpus", "1", "--nodes", "0", "--", "true"], id="a flag out of range"),
    pytest.param(["--gpus", "100", "--", "true"], id="a job that can never run"),
    pytest.param(["BAD"], id="a bad job file"),
    pytest.param(["BAD", "-o", "json"], id="a bad job file under json"),
    pytest.param(["JOB", "--gpus", "1"], id="a job file given flags"),
    pytest.param(["nope.yaml"], id="no such file"),
]  # fmt: skip


def job_files(root: Path) -> dict[str, str]:
    (root / "jobs").mkdir(exist_ok=True)
    (root / "jobs" / "ok.yaml").write_text(
        "apiVersion: meshctl/v1\nkind: Job\nmetadata: {name: from-a-file}\n"
        "spec: {kind: batch, entrypoint: python -c pass, resources: {gpus: 1}}\n"
    )
    (root / "bad.yaml").write_text("apiVersion: meshctl/v1\nkind: Job\n")
    return {"JOB": "jobs/ok.yaml", "BAD": "bad.yaml"}


@pytest.mark.parametrize("args", SAME)
def test_served_and_in_process_print_the_same(
    served: Home, unserved: Home, args: list[str]
) -> None:
    """The same answer, warnings and errors, whichever admitted it; nothing written."""
    words = [job_files(served.root).get(a, a) for a in args]
    job_files(unserved.root)
    before = served.jobs()
    there, here = served.submit(*words), unserved.submit(*words)
    assert (there.returncode, there.stdout, there.stderr) == (
        here.returncode, here.stdout, here.stderr)  # fmt: skip
    assert served.jobs() == before
    assert not (unserved.home / "state.db").exists()  # a dry run or a refusal writes nothing


def test_a_bad_job_file_is_one_line_a_problem_with_its_file_line_and_field(served: Home) -> None:
    job_files(served.root)
    done = served.submit("bad.yaml")
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "error: bad.yaml:1: metadata: required field is missing",
        "error: bad.yaml:1: spec: required field is missing",
    ]
    as_json = json.loads(served.submit("bad.yaml", "-o", "json").stderr)
    assert as_json["error"]["problems"][0] == {
        "file": "bad.yaml", "line": 1, "field": "metadata", "message": "required field is missing"
    }  # fmt: skip


def test_a_job_files_working_dir_goes_with_it(served: Home) -> None:
    code = served.root / "code"
    code.mkdir(exist_ok=True)
    (code / "run.py").write_text("print('hello')\n")
    (served.root / "with-code.yaml").write_text(
        "apiVersion: meshctl/v1\nkind: Job\nmetadata: {name: with-code}\n"
        "spec: {kind: batch, entrypoint: python run.py, working_dir: code, "
        "resources: {gpus: 1}}\n"
    )
    done = served.submit("with-code.yaml")
    assert done.returncode == 0, done.stderr
    packaged = served.home / "packages" / done.stdout.strip() / "run.py"
    assert packaged.read_text() == "print('hello')\n"


@pytest.mark.skipif(os.getuid() != 0, reason="needs another uid to call from (run as root)")
def test_another_uid_is_refused_with_one_line() -> None:
    """Whoever reaches the socket (here: a home under a folder all may pass, its folders and
    socket opened to all for the test) is refused unless they are the home's owner."""
    root = Path(tempfile.mkdtemp(prefix="meshctl-uid-"))
    root.chmod(0o755)
    own = Home(root, served=True)
    try:
        for folder in (own.home, own.socket.parent):
            folder.chmod(0o711)
        own.socket.chmod(0o666)
        status, said = as_nobody(own.socket)
    finally:
        own.stop()
        shutil.rmtree(root, ignore_errors=True)
    assert status == 403, said
    assert said == {"error": f"uid {NOBODY} is not this home's owner (uid 0); ask them, or use "
                             "the API server with a token"}  # fmt: skip


def as_nobody(path: Path) -> tuple[int, object]:
    """A dry run asked of the socket at ``path`` from a child of this process that is uid
    ``NOBODY``: the status and the answer."""
    import http.client  # noqa: F401  before the fork: as nobody, the child reads no library

    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # the child never returns to pytest
        try:
            os.close(read)
            os.setuid(NOBODY)
            body = json.dumps({"command": ["true"], "dry_run": True}).encode()
            status, said, _ = exchange(_unix_connection(path, WAIT_S), JOBS, body, None)
            os.write(write, json.dumps([status, said]).encode())
        except BaseException as err:  # said to the parent, which fails with it
            os.write(write, json.dumps([0, repr(err)]).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as answer:
        found = json.loads(answer.read() or "[0, null]")
    os.waitpid(child, 0)
    return found[0], found[1]


def test_sigterm_stops_the_server_and_removes_its_socket(tmp_path: Path) -> None:
    """Twice, as at ``meshctl down``: the controller's session, then the controller."""
    own = Home(tmp_path, served=True)
    assert own.server is not None
    own.server.send_signal(signal.SIGTERM)
    own.server.send_signal(signal.SIGTERM)
    assert own.server.wait(WAIT_S) == 0
    assert not own.socket.exists()
    done = own.submit("--gpus", "1", "--", "python", "-c", "pass")
    assert done.returncode == 0, done.stderr  # in its own process, as before any server
    assert "no controller is running" in done.stderr


# Starts a server and leaves once it listens.
ORPHAN = """
import os, subprocess, sys, time
from pathlib import Path
from meshctl.app.remote import _unix_connection, api_socket, exchange
from meshctl.cli.submitclient import JOBS
subprocess.Popen([sys.executable, "-m", "meshctl.server.local", sys.argv[1], str(os.getpid())])
deadline = time.monotonic() + 60
while not api_socket(Path(sys.argv[1])).exists() and time.monotonic() < deadline:
    time.sleep(0.05)
"""


def test_a_server_whose_parent_is_gone_stops(tmp_path: Path) -> None:
    home = tmp_path / "home"
    subprocess.run([sys.executable, "-c", ORPHAN, str(home)], check=True, cwd=tmp_path)
    path = api_socket(home)
    assert path.exists()
    wait_until("the orphaned server kept serving", lambda: not path.exists(), WAIT_S)


# Starts a server and leaves at once, while it still warms up: as a controller that died and
# was restarted at once leaves its server behind.
LEFT_AT_ONCE = """
import os, subprocess, sys
command = [sys.executable, "-m", "meshctl.server.local", sys.argv[1], str(os.getpid())]
print(subprocess.Popen(command).pid)
"""


def test_a_server_left_while_it_warmed_up_leaves_the_live_servers_socket(tmp_path: Path) -> None:
    live = Home(tmp_path, served=True)
    assert live.server is not None
    try:
        started = subprocess.run(
            [sys.executable, "-c", LEFT_AT_ONCE, str(live.home)],
            capture_output=True, text=True, check=True, cwd=tmp_path, env=live.env,
        )  # fmt: skip
        left = int(started.stdout)
        wait_until("the server left behind kept running", lambda: zombie(left), WAIT_S)
        assert live.socket.exists()
        assert live.server.poll() is None
        done = live.submit("--gpus", "1", "--", "python", "-c", "pass")
        assert done.returncode == 0, done.stderr
        assert "no controller is running" not in done.stderr  # the live server took it
    finally:
        live.stop()
