"""``meshctl sim sweep`` on the embedded mesh for real: ``meshctl up`` starts its Ray cluster
(one per module), the sweep's runs are Ray tasks there, gathered into one table.

- a small sweep: 2 policy sets x 2 seeds of a short synthetic trace, its table and sweep.json;
- a task killed mid-run (SIGKILL to its worker, found through the ``MESHCTL_SWEEP_HOLD``
  hook: every attempt writes its pid and waits to be released) is retried by Ray, and the
  run it retried says so (2 attempts);
- with ``--retries 0`` the killed run is listed as not finished, with why, and the sweep
  exits 1 with the other runs still reported.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import wait_until

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
POLICIES = ROOT / "examples" / "sim" / "policies"
SIM_MESH = ROOT / "examples" / "sim" / "mesh.yaml"
SHORT = ["--trace", "synthetic", "--days", "0.05", "--mesh", str(SIM_MESH)]
WAIT_S = 240


class Home:
    def __init__(self, home: Path, cwd: Path) -> None:
        self.home, self.cwd = home, cwd

    def env(self, **more: str) -> dict[str, str]:
        return {**os.environ, "MESHCTL_HOME": str(self.home), **more}

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "meshctl", *args], capture_output=True, text=True,
            cwd=self.cwd, env=self.env(), timeout=WAIT_S,
        )  # fmt: skip

    def start(self, *args: str, hold: Path) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "meshctl", *args], stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, cwd=self.cwd,
            env=self.env(MESHCTL_SWEEP_HOLD=str(hold)),
        )  # fmt: skip


@pytest.fixture(scope="module")
def mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Home]:
    base = tmp_path_factory.mktemp("sweep")
    home = Home(base / "home", base)
    up = home.run("up")
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        yield home
    finally:
        home.run("down", "--force")


def test_a_small_sweep_gathers_every_run_into_one_table(mesh: Home, tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = mesh.run(
        "sim", "sweep", *SHORT, "--seeds", "0..1", "--out", str(out), "--no-charts",
        "--policy", f"onprem-only={POLICIES / 'common'},{POLICIES / 'onprem-only.yaml'}",
        "--policy", f"burst={POLICIES / 'common'},{POLICIES / 'burst.yaml'}",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "onprem-only" in done.stdout
    assert "burst" in done.stdout
    assert "4 of 4 runs finished" in done.stdout
    assert "embedded pool onprem" in done.stdout
    assert "±" in done.stdout  # two seeds: an interval
    swept = json.loads((out / "sweep.json").read_text())
    assert swept["sweep"]["seeds"] == [0, 1]
    assert swept["unfinished"] == []
    runs = {(r["policies"], r["seed"]): r for r in swept["runs"]}
    assert sorted(runs) == [("burst", 0), ("burst", 1), ("onprem-only", 0), ("onprem-only", 1)]
    assert runs["burst", 1]["report"]["meta"]["seed"] == 1  # each task ran its own seed
    arrived = swept["figures"]["jobs.arrived"]["groups"]["burst"]
    counts = [runs["burst", s]["report"]["jobs"]["arrived"] for s in (0, 1)]
    assert arrived["n"] == 2
    assert arrived["mean"] == sum(counts) / 2
    assert arrived["low"] <= arrived["mean"] <= arrived["high"]


def kill_first_attempt(mesh: Home, retries: int, tmp_path: Path) -> tuple[int, dict, str, str]:
    """A sweep of 2 runs whose first attempt to start is killed (SIGKILL) while it runs;
    the run's index, the sweep's JSON, its stderr and exit code."""
    hold = tmp_path / "hold"
    hold.mkdir()
    args = ["sim", "sweep", *SHORT, "-p", "none", "--seeds", "0..1", "-o", "json"]
    sweep = mesh.start(*args, "--retries", str(retries), hold=hold)
    try:
        first = wait_until(
            "no sweep task started", lambda: sorted(hold.glob("run-*.1.pid")), WAIT_S
        )[0]
        os.kill(int(first.read_text()), signal.SIGKILL)
        (hold / "release").touch()
        stdout, stderr = sweep.communicate(timeout=WAIT_S)
    finally:
        if sweep.poll() is None:
            sweep.kill()
            sweep.wait()
    return int(first.name.split("-")[1].split(".")[0]), json.loads(stdout), stderr, sweep.returncode


def test_a_killed_task_is_retried_and_the_run_finishes(mesh: Home, tmp_path: Path) -> None:
    index, swept, stderr, code = kill_first_attempt(mesh, 1, tmp_path)
    assert code == 0, stderr
    assert swept["unfinished"] == []
    assert len(swept["runs"]) == 2
    attempts = {r["seed"]: r["attempts"] for r in swept["runs"]}
    assert attempts[index] == 2  # seeds 0, 1 are runs 0, 1
    assert attempts[1 - index] == 1
    assert (tmp_path / "hold" / f"run-{index}.2.pid").is_file()
    assert "will be retried" in stderr  # Ray's own word, on stderr, never in the JSON


def test_a_killed_task_without_retries_is_reported_unfinished(mesh: Home, tmp_path: Path) -> None:
    index, swept, stderr, code = kill_first_attempt(mesh, 0, tmp_path)
    assert code == 1, stderr
    assert [r["seed"] for r in swept["runs"]] == [1 - index]
    (lost,) = swept["unfinished"]
    assert (lost["seed"], lost["attempts"]) == (index, 1)
    assert lost["reason"].startswith("its worker died (WorkerCrashedError)")
    assert "1 of 2 runs did not finish" in stderr
