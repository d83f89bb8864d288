"""The command line read before the CLI is imported (``meshctl.cli.argv``), and the two ends of
a served command (``meshctl.cli.relay``, ``meshctl.cli.cmdserver``) without a server process:
what a server refuses, and what the caller makes of what it is told."""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import threading
from pathlib import Path

import pytest

from meshctl.cli import argv, cmdserver, entry, relay
from meshctl.controller.rundir import run_dir

pytestmark = pytest.mark.unit

HOMES = [
    pytest.param(["submit", "x.yaml"], {"MESHCTL_HOME": "/env"}, "/env", id="from the env"),
    pytest.param(["--home", "/h", "submit"], {"MESHCTL_HOME": "/env"}, "/h", id="option"),
    pytest.param(["--home=/h", "submit"], {}, "/h", id="option="),
    pytest.param(["--home", "/a", "--home", "/b", "submit"], {}, "/b", id="the last option"),
    pytest.param(["-m", "--home", "submit"], {"MESHCTL_HOME": "/env"}, "/env", id="a value"),
    pytest.param(["submit", "--home", "/h"], {"MESHCTL_HOME": "/env"}, "/env", id="after"),
    pytest.param(["submit"], {"MESHCTL_HOME": ""}, "~/.meshctl", id="empty env"),
    pytest.param(["submit"], {}, "~/.meshctl", id="default"),
]


@pytest.mark.parametrize(("args", "env", "expected"), HOMES)
def test_the_home_a_command_line_runs_in(args: list[str], env: dict[str, str], expected: str):
    assert argv.home(args, env) == Path(expected).expanduser()


def test_the_socket_is_in_the_run_folder(tmp_path: Path) -> None:
    assert relay.socket_path(tmp_path).parent == run_dir(tmp_path)


def test_every_served_command_is_warmed_at_start() -> None:
    assert set(cmdserver.WARM) == set(entry.SERVED)
    assert all(argv.command_name(args) == name for name, args in cmdserver.WARM.items())


def test_without_a_server_the_command_runs_here(tmp_path: Path) -> None:
    assert relay.forward(tmp_path / "home", ["submit", "x.yaml"]) is None
    stale = relay.socket_path(tmp_path / "home")
    stale.parent.mkdir(parents=True)
    left = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    left.bind(str(stale))
    left.close()  # a socket file no process listens on: a server that was killed
    assert relay.forward(tmp_path / "home", ["submit", "x.yaml"]) is None


def test_a_socket_path_too_long_for_an_address_is_reached_through_its_folder(
    tmp_path: Path,
) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    path = deep / "s.sock"
    with relay.reachable(path) as address:
        assert address.startswith("/proc/self/fd/")
        server = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        server.bind(address)
    with server, relay.reachable(path) as address:
        server.listen(1)
        client = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        client.connect(address)
        client.close()
    assert path.exists()


def _request(args: list[str]) -> dict[str, object]:
    return json.loads(json.dumps(relay.request(args)))  # as the server receives it


REFUSALS = [
    pytest.param({}, None, id="served"),
    pytest.param({"args": ["jobs", "list"]}, "not served", id="another command"),
    pytest.param({"args": "submit"}, "not served", id="not a list"),
    pytest.param({"interpreter": ["/usr/bin/python3"]}, "another interpreter", id="python"),
]


@pytest.mark.parametrize(("change", "expected"), REFUSALS)
def test_what_a_server_refuses(change: dict[str, object], expected: str | None) -> None:
    request = {**_request(["submit", "--gpus", "1", "--", "true"]), **change}
    assert cmdserver.refusal(request, {}) == expected


def test_a_server_whose_modules_changed_refuses_as_stale(tmp_path: Path) -> None:
    module = tmp_path / "module.py"
    module.write_text("x = 1\n")
    files = {str(module): module.stat().st_mtime_ns}
    request = _request(["submit", "x.yaml"])
    assert cmdserver.refusal(request, files) is None
    os.utime(module, ns=(0, module.stat().st_mtime_ns + 1_000_000_000))
    assert cmdserver.refusal(request, files) == "stale"
    module.unlink()
    assert cmdserver.refusal(request, files) == "stale"


def test_the_loaded_files_are_meshctls_own() -> None:
    files = cmdserver.loaded_files()
    assert str(Path(relay.__file__).resolve()) in files
    assert not any("site-packages" in path for path in files)


def _pair() -> tuple[socket.socket, socket.socket]:
    return socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)


OUTCOMES = [
    pytest.param([{"exit": 0}], 0, "", id="success"),
    pytest.param([{"exit": 2}], 2, "", id="its status"),
    pytest.param([], 1, "without a status", id="no status"),
]


@pytest.mark.parametrize(("told", "expected", "said"), OUTCOMES)
def test_the_status_the_caller_exits_with(
    told: list[dict[str, int]], expected: int, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    ours, theirs = _pair()
    before = {signum: signal.getsignal(signum) for signum in relay.PASSED_ON}
    with ours, theirs:
        for message in told:
            theirs.send(json.dumps(message).encode())
        theirs.shutdown(socket.SHUT_WR)
        assert relay._outcome(ours, os.getpid()) == expected
    assert said in capsys.readouterr().err
    # its handlers are gone with it: left, this process's next SIGTERM was passed to the
    # command's pid, here its own, again and again (a RecursionError in a later test)
    assert {signum: signal.getsignal(signum) for signum in relay.PASSED_ON} == before


def test_a_refusal_leaves_the_command_to_the_caller(tmp_path: Path) -> None:
    home = tmp_path / "home"
    path = relay.socket_path(home)
    path.parent.mkdir(parents=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(str(path))
    listener.listen(1)
    passed: list[int] = []

    def refuse() -> None:  # a server whose meshctl changed on disk
        server, _ = listener.accept()
        with server:
            _data, fds, _flags, _address = socket.recv_fds(server, relay.MAX_MESSAGE, 3)
            passed.extend(fds)
            for fd in fds:
                os.close(fd)
            server.send(json.dumps({"refused": "stale"}).encode())

    with listener:
        thread = threading.Thread(target=refuse)
        thread.start()
        assert relay.forward(home, ["submit", "x.yaml"]) is None
        thread.join()
    assert len(passed) == 3  # the caller passed its three standard streams


def test_the_interpreter_a_request_names_is_this_one() -> None:
    executable, package, path, *_ = relay.interpreter()
    assert executable == sys.executable
    assert Path(str(package)) == Path(relay.__file__).resolve().parent.parent
    assert path == sys.path[1:]
