"""One policy set from the files to a running controller, through the real CLI and a real
controller process: `meshctl reload` checks, asks and prints old -> new; an invalid change is
refused (exit 2) and the old set keeps running; a change nobody reloads is noticed; commands
that plan with other policies say so.

The controller here drives one `ray` pool whose dashboard does not answer: no Ray is started,
and the pool shows as unavailable, with why, in `status` and `pools check`.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from meshctl.app.remote import api_socket
from meshctl.controller import daemon
from meshctl.state import open_store
from tests.conftest import EXAMPLES, closed_port, onprem_policies, wait_until
from tests.integration.meshes import Mesh

pytestmark = pytest.mark.integration

WAIT_S = 60
JOB = str(EXAMPLES / "jobs" / "batch-embed.yaml")


@pytest.fixture(scope="module")
def mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mesh]:
    base = tmp_path_factory.mktemp("reload")
    (base / "mesh.yaml").write_text(
        "apiVersion: meshctl/v1\nkind: Mesh\nmetadata: {name: reload}\nspec:\n  pools:\n"
        f"    - {{name: dc, provider: ray, address: 'http://127.0.0.1:{closed_port()}'}}\n"
    )
    onprem_policies(base / "policies")
    m = Mesh(base / "home", base)
    run = m.home / "run"
    run.mkdir(parents=True)
    record = {"mesh": str(base / "mesh.yaml"), "policies": str(base / "policies")}
    (run / "up.json").write_text(json.dumps({**record, "providers": ""}))  # as up records it
    args = ["--home", str(m.home), "controller", "run", "--interval", "0.2"]
    daemon.start(m.home, args)
    wait_until(
        lambda: (run / "logs" / "controller.log").read_text(),
        lambda: daemon.heartbeat(m.home) is not None,
        WAIT_S,
    )
    try:
        yield m
    finally:
        daemon.stop(m.home)


def enforced(mesh: Mesh) -> dict[str, object]:
    data: dict[str, object] = json.loads(mesh.run("status", "-o", "json").stdout)["controller"]
    return data


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


def events(mesh: Mesh, kind: str) -> list[str]:
    with open_store(mesh.home) as store:
        return [e.message for e in store.events() if e.kind == kind]


def test_status_and_pools_check_say_the_pool_does_not_answer(mesh: Mesh) -> None:
    wait_until("the controller saw the pool", lambda: enforced(mesh)["policy_hash"])
    [pool] = json.loads(mesh.run("status", "-o", "json").stdout)["pools"]
    assert pool["available"] is False
    assert "does not answer" in pool["reason"]
    checked = mesh.run("pools", "check", check=False)
    assert checked.returncode == 1
    assert checked.stderr.splitlines()[-1] == "error: 1 of 1 pools unavailable: dc"


def test_reload_prints_old_and_new_hash_and_the_controller_runs_the_new_set(mesh: Mesh) -> None:
    before = enforced(mesh)["policy_hash"]
    same = mesh.run("reload")
    assert same.stdout.startswith("no change: runs mesh ")
    assert f", policies {before}, catalogs " in same.stdout
    pid = daemon.running(mesh.home)
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)  # so the edit is the request's to take, not the watcher's
    try:
        edit(mesh.cwd / "policies" / "burst.yaml", "> 600.0", "> 900.0")
        asking = subprocess.Popen(
            [sys.executable, "-m", "meshctl", "reload"],
            cwd=mesh.cwd,
            env={**os.environ, "MESHCTL_HOME": str(mesh.home)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        wait_until("reload asked", (mesh.home / "run" / "reload.json").exists)
    finally:
        os.kill(pid, signal.SIGCONT)
    out, err = asking.communicate(timeout=WAIT_S)
    assert asking.returncode == 0, err
    after = enforced(mesh)["policy_hash"]
    assert after != before
    assert out.startswith(f"policies {before} -> {after} (unchanged: mesh ")
    assert out.strip() in events(mesh, "policy.reloaded")


def test_an_invalid_change_is_refused_and_the_old_set_keeps_running(mesh: Mesh) -> None:
    burst = mesh.cwd / "policies" / "burst.yaml"
    running = enforced(mesh)["policy_hash"]
    good = burst.read_text()
    edit(burst, 'job.criticality == "best-effort"', "job.criticality ==")
    try:
        refused = mesh.run("reload", check=False)
        assert refused.returncode == 2
        assert refused.stderr.startswith(f"error: {burst}:")
        assert "Traceback" not in refused.stderr
        wait_until("the controller refused the edit", lambda: enforced(mesh)["policy_error"])
        assert enforced(mesh)["policy_hash"] == running
        assert str(enforced(mesh)["policy_error"]).startswith(f"{burst}:")
        assert "policy change refused" in mesh.run("status").stdout
        assert events(mesh, "policy.reload_refused")
    finally:
        burst.write_text(good)
    wait_until("the error cleared", lambda: enforced(mesh)["policy_error"] is None)


def test_an_edit_nobody_reloaded_is_a_warning_until_the_controller_takes_it(mesh: Mesh) -> None:
    pid = daemon.running(mesh.home)
    assert pid is not None
    running = enforced(mesh)["policy_hash"]
    os.kill(pid, signal.SIGSTOP)  # the controller cannot notice the edit for now
    try:
        edit(mesh.cwd / "policies" / "burst.yaml", "> 900.0", "> 1200.0")
        planned = mesh.run("policy", "explain", JOB)
        assert planned.returncode == 0
        [warning] = planned.stderr.splitlines()
        assert warning.startswith(f"warning: the policies in {mesh.cwd / 'policies'} (hash ")
        assert warning.endswith(
            f"are not those the controller enforces (hash {running}): edited, not reloaded; "
            "run meshctl reload"
        )
    finally:
        os.kill(pid, signal.SIGCONT)
    wait_until("the controller took the edit", lambda: enforced(mesh)["policy_hash"] != running)
    assert mesh.run("policy", "explain", JOB).stderr == ""


def test_reload_switches_the_folder_and_commands_follow_it(mesh: Mesh) -> None:
    other = mesh.cwd / "other"
    shutil.copytree(mesh.cwd / "policies", other)
    edit(other / "burst.yaml", "> 1200.0", "> 30.0")
    named = mesh.run("policy", "explain", JOB, "--policies", str(other))
    assert named.stderr.startswith("warning: planning with the policies named (hash ")
    mesh.run("reload", "--policies", str(other))
    assert enforced(mesh)["policies"] == str(other)
    up = json.loads((mesh.home / "run" / "up.json").read_text())
    assert up["policies"] == str(other)  # what a restarted controller and the CLI use
    assert mesh.run("policy", "explain", JOB).stderr == ""


def test_status_from_the_local_api_says_an_invalid_mesh_edit_as_warnings(mesh: Mesh) -> None:
    """``status`` asks the controller's local API (it serves beside the controller); the
    API reads the edited mesh, finds it invalid and answers with the set the controller runs,
    the problems as warnings, which the command prints as it does in its own process."""
    wait_until("the local API serves", api_socket(mesh.home).exists)
    path = mesh.cwd / "mesh.yaml"
    good = path.read_text()
    path.write_text(good.replace("{name: reload}", "{name: Not-A-Name}"))
    try:
        shown = mesh.run("status", check=False)
        assert shown.stdout.startswith("mesh reload")
        warnings = shown.stderr.splitlines()
        assert warnings[0].startswith(f"warning: {path}:3: metadata.name: ")
        assert "runs the set it took last" in warnings[-1]
    finally:
        path.write_text(good)
    wait_until("the error cleared", lambda: enforced(mesh)["policy_error"] is None)
