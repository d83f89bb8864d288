"""A short command leaves without the interpreter's teardown (``meshctl.cli.leave``): its
``atexit`` handlers run, stdout and stderr are flushed, the exit status is the command's; with
other threads alive, or no way to run the handlers, it exits as ever."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest

from meshctl.cli import leave
from meshctl.cli.argv import command_name

pytestmark = pytest.mark.unit

COMMANDS = [
    pytest.param(["submit", "--gpus", "1", "--", "python", "x.py"], "submit", id="a command"),
    pytest.param(["--home", "/h", "-m", "m.yaml", "train", "x.yaml"], "train", id="after options"),
    pytest.param(["--home=/h", "jobs", "list"], "jobs", id="a group"),
    pytest.param(["--help", "submit"], None, id="help first"),
    pytest.param([], None, id="nothing"),
]


@pytest.mark.parametrize(("args", "expected"), COMMANDS)
def test_the_command_a_line_runs(args: list[str], expected: str | None) -> None:
    assert command_name(args) == expected


LEAVING = """
import atexit, sys
from meshctl.cli import leave
atexit.register(lambda: print("atexit ran", flush=False))
print("buffered", end="")  # no newline, no flush: leave flushes it
sys.stdout.write(" out\\n")
sys.stderr.write("err")
class Torn:
    def __del__(self):
        print("finalized at teardown")
kept = Torn()
leave.leave({code})
"""

EXITS = [
    pytest.param("None", 0, "", id="success"),
    pytest.param("3", 3, "", id="a status"),
    pytest.param("'it failed'", 1, "it failed\n", id="a message"),
]


@pytest.mark.parametrize(("code", "status", "said"), EXITS)
def test_leaving_runs_the_exit_handlers_and_keeps_the_status(
    code: str, status: int, said: str
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", LEAVING.format(code=code)], capture_output=True, text=True
    )
    assert done.returncode == status
    assert done.stdout.splitlines() == ["buffered out", "atexit ran"]  # no teardown
    assert done.stderr == "err" + said


def test_with_another_thread_alive_the_exit_is_the_ordinary_one() -> None:
    release = threading.Event()
    other = threading.Thread(target=release.wait)
    other.start()
    try:
        with pytest.raises(SystemExit) as exit:
            leave.leave(4)
        assert exit.value.code == 4
    finally:
        release.set()
        other.join()


def test_without_a_way_to_run_the_exit_handlers_the_exit_is_the_ordinary_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(leave.threading, "active_count", lambda: 1)  # whatever else runs here
    monkeypatch.delattr(leave.atexit, "_run_exitfuncs")
    with pytest.raises(SystemExit) as exit:
        leave.leave(None)
    assert exit.value.code is None
