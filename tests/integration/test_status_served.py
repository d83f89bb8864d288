"""``meshctl status`` while the home's local API serves (as beside every controller): the
command asks it and renders the answer, importing none of what counts a status (the models,
pydantic, the controller's status document); with no API it reads the store itself. Either
way it prints the same."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.test_submit_served import MESHCTL, Home

pytestmark = pytest.mark.integration

NOT_FOR_A_SERVED_STATUS = ("pydantic", "meshctl.model", "meshctl.controller.status", "sqlite3")


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Home]:
    found = Home(tmp_path, served=True)
    for name in ("first", "second"):
        done = found.submit("--gpus", "1", "--name", name, "--", "python", "-c", "pass")
        assert done.returncode == 0, done.stderr
    yield found
    found.stop()


def status(
    home: Home, *args: str, python: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*python, MESHCTL, "status", *args],
        capture_output=True, text=True, cwd=home.root, env=home.env,
    )  # fmt: skip


def test_a_served_status_imports_nothing_that_counts_one(home: Home) -> None:
    done = status(home, python=(sys.executable, "-X", "importtime"))
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()
                if line.startswith("import time:")}  # fmt: skip
    assert done.returncode == 1  # no controller runs: said after the screen
    assert "jobs: 2 pending" in done.stdout
    assert [m for m in imported if m.startswith(NOT_FOR_A_SERVED_STATUS)] == []


@pytest.mark.parametrize("mesh", [None, "apiVersion: meshctl/v1\nkind: Mesh\n"],
                         ids=["the embedded mesh", "an invalid mesh.yaml"])  # fmt: skip
def test_served_and_in_process_print_the_same(home: Home, mesh: str | None) -> None:
    """The same screen, document, errors and exit, but for the time that passed between them
    (the queue's oldest wait) and the line an in-process status shows while it checks the
    pools itself (no controller runs to say)."""
    if mesh is not None:
        (home.root / "mesh.yaml").write_text(mesh)
    served = [status(home), status(home, "-o", "json")]
    home.stop()
    assert not home.socket.exists()
    here = [status(home), status(home, "-o", "json")]
    for there, ours in zip(served, here, strict=True):
        assert (there.returncode, timeless(there.stdout), there.stderr) == (
            ours.returncode, timeless(ours.stdout), ours.stderr.replace(CHECKING, ""))  # fmt: skip
    if mesh is None:
        assert CHECKING in here[0].stderr
        assert "no controller is running" in here[0].stderr
    else:  # no controller runs with a set it took: the files' problems are errors
        assert here[0].returncode == 2
        assert here[0].stderr.startswith("error: mesh.yaml:1: ")


CHECKING = "checking 3 pools\n"


def timeless(out: str) -> str:
    """``out`` without the queue's oldest wait: ``"oldest_wait_s": 1.0`` in the document,
    ``1 s`` in the table's queue row."""
    out = re.sub(r'"oldest_wait_s": [0-9.]+', '"oldest_wait_s": T', out)
    return re.sub(r"\d+ s(?= +│\n)", "T s", out)
