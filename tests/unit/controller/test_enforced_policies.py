"""The CLI never silently plans with other policies than the running controller's: a warning
(never an error) names both hashes and what to run. The running controller here is this test
process, recorded as the daemon with a heartbeat saying what it enforces."""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from meshctl.cli.app import app
from meshctl.controller import daemon
from meshctl.host.procs import start_ticks
from meshctl.state import PoolRecord, open_store
from tests.conftest import EXAMPLES, ROOT, closed_port, onprem_policies

pytestmark = pytest.mark.unit

JOB = str(EXAMPLES / "jobs" / "batch-embed.yaml")


def shipped_hash(cli: CliRunner) -> str:
    """The hash of the policies a command uses by default here (the shipped ones)."""
    shown = cli.invoke(app, ["policy", "validate"])
    return shown.stdout.split("policy hash ")[1].split(";")[0]


def pretend_controller(home: Path, **beat: object) -> None:
    """This process is the controller, as far as the CLI can tell; it enforces ``beat``."""
    run = home / "run"
    run.mkdir(parents=True, exist_ok=True)
    me = os.getpid()
    daemon.pid_file(home).write_text(json.dumps({"pid": me, "start_ticks": start_ticks(me)}))
    beat = {"at_s": time.time(), **beat}
    daemon.heartbeat_file(home).write_text(json.dumps({"pid": me, **beat}))


@pytest.fixture
def home(cli: CliRunner) -> Iterator[Path]:
    """MESHCTL_HOME; a nudge (SIGUSR1) to the pretended controller, this process, is ignored."""
    import signal

    previous = signal.signal(signal.SIGUSR1, lambda *_: None)
    yield Path(os.environ["MESHCTL_HOME"])
    signal.signal(signal.SIGUSR1, previous)


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(["submit", JOB, "--dry-run"], id="submit"),
        pytest.param(["explain", JOB], id="explain-job-file"),
        pytest.param(["policy", "explain", JOB], id="policy-explain"),
    ],
)
def test_files_that_differ_from_what_runs_are_a_warning_naming_both_hashes(
    cli: CliRunner, home: Path, args: list[str]
) -> None:
    ours = shipped_hash(cli)
    pretend_controller(home, policy_hash="0123456789abcdef", policies="/srv/policies")
    result = cli.invoke(app, args)
    assert result.exit_code == 0, result.output
    [line] = [w for w in result.stderr.splitlines() if w.startswith("warning:")]
    assert line == (
        f"warning: the policies in /srv/policies (hash {ours}) are not those the controller "
        "enforces (hash 0123456789abcdef): edited, not reloaded; run meshctl reload"
    )
    assert "error:" not in result.stderr


def test_naming_other_policies_says_so_and_how_to_enforce_them(
    cli: CliRunner, home: Path, tmp_path: Path
) -> None:
    other = tmp_path / "other"
    shutil.copytree(ROOT / "policies", other)
    (other / "burst.yaml").write_text((other / "burst.yaml").read_text().replace("600.0", "60.0"))
    pretend_controller(home, policy_hash=shipped_hash(cli), policies=str(ROOT / "policies"))
    result = cli.invoke(app, ["policy", "explain", JOB, "--policies", str(other)])
    assert result.exit_code == 0, result.output
    [line] = result.stderr.splitlines()
    assert line.startswith("warning: planning with the policies named (hash ")
    assert line.endswith(
        f"not those the controller enforces (hash {shipped_hash(cli)}, {ROOT / 'policies'}); "
        f"to enforce them: meshctl reload --policies {other}"
    )


def test_a_refused_change_is_named_in_the_warning(cli: CliRunner, home: Path) -> None:
    pretend_controller(
        home, policy_hash="0123456789abcdef", policies="/p", policy_error="/p/x.yaml:3: when: ..."
    )
    result = cli.invoke(app, ["policy", "test"])
    assert "(the controller refused them: /p/x.yaml:3: when: ...)" in result.stderr


@pytest.mark.parametrize("running", [True, False], ids=["same-hash", "no-controller"])
def test_no_warning_when_the_files_are_what_runs_or_nothing_runs(
    cli: CliRunner, home: Path, running: bool
) -> None:
    if running:
        pretend_controller(home, policy_hash=shipped_hash(cli), policies=str(ROOT / "policies"))
    result = cli.invoke(app, ["submit", JOB, "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "warning:" not in result.stderr


def test_status_shows_what_the_controller_enforces_and_each_pools_health(
    cli: CliRunner, home: Path
) -> None:
    pretend_controller(
        home,
        policy_hash="0123456789abcdef",
        policies="/srv/policies",
        policy_commit="c0ffee" * 6 + "beef",
        policy_error=None,
        unavailable={"gcp-burst": "no credentials", "aws-burst": "AuthFailure: refused"},
    )
    data = json.loads(cli.invoke(app, ["status", "-o", "json"]).stdout)
    assert {k: data["controller"][k] for k in ("policy_hash", "policies", "policy_error")} == {
        "policy_hash": "0123456789abcdef",
        "policies": "/srv/policies",
        "policy_error": None,
    }
    health = {p["pool"]: (p["available"], p["reason"]) for p in data["pools"]}
    assert health == {
        "onprem": (True, None),
        "aws-burst": (False, "AuthFailure: refused"),
        "gcp-burst": (False, "no credentials"),
    }
    table = cli.invoke(app, ["status"]).stdout
    assert "policies 0123456789abcdef (/srv/policies, commit c0ffeec0ffee)" in table
    assert "unavailable: no credentials" in table


@pytest.mark.parametrize(
    ("last_cycle_s_ago", "code", "says"),
    [
        (None, 1, "no controller is running (meshctl up starts one)"),
        (600.0, 1, "s ago: hung?"),
        (1.0, 0, ""),
    ],
    ids=["none runs", "its last cycle 10 minutes ago", "cycling"],
)
@pytest.mark.parametrize("output", [[], ["-o", "json"]], ids=["screen", "json"])
def test_status_draws_what_it_can_and_exits_1_when_no_controller_decides(
    cli: CliRunner,
    home: Path,
    last_cycle_s_ago: float | None,
    code: int,
    says: str,
    output: list[str],
) -> None:
    """Reported: status exited 0 with the controller down."""
    if last_cycle_s_ago is not None:
        pretend_controller(home, at_s=time.time() - last_cycle_s_ago)
    shown = cli.invoke(app, ["status", *output])
    assert shown.exit_code == code, shown.output
    assert ("Pools" in shown.stdout) if not output else json.loads(shown.stdout)["pools"]
    assert says in shown.stderr


def test_a_pool_the_controller_cannot_use_reads_unavailable_in_pools_list_and_status(
    cli: CliRunner, home: Path
) -> None:
    """Reported: pools list showed a pool without credentials as idle while status said
    unavailable. One word for it everywhere, in the tables and their JSON."""
    why = "no credentials (set GOOGLE_APPLICATION_CREDENTIALS)"
    pretend_controller(home, unavailable={"gcp-burst": why})
    with open_store(home) as store:
        observed = {"nodes": 0, "gpus": 0, "available": False, "reason": why}
        store.create(PoolRecord("gcp-burst", "gcp", "idle", observed, time.time()))
    listed = json.loads(cli.invoke(app, ["pools", "list", "-o", "json"]).stdout)
    assert {r["pool"]: r["state"] for r in listed}["gcp-burst"] == "unavailable"
    status = json.loads(cli.invoke(app, ["status", "-o", "json"]).stdout)
    assert {p["pool"]: p["state"] for p in status["pools"]}["gcp-burst"] == "unavailable"
    table = cli.invoke(app, ["pools", "list"]).stdout
    assert "unavailable" in table
    assert " idle " not in table


@pytest.fixture
def scaffold(cli: CliRunner, home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``meshctl init``'s mesh, the working directory; a controller runs with its files, and
    keeps a copy of them, as it does when it takes a set."""
    from meshctl.controller.reload import RuleFiles, keep, stamp

    assert cli.invoke(app, ["init", str(tmp_path / "m")]).exit_code == 0
    monkeypatch.chdir(tmp_path / "m")
    runs = shipped_hash(cli)
    files = RuleFiles(str(tmp_path / "m" / "mesh.yaml"), str(tmp_path / "m" / "policies"))
    pretend_controller(home, policy_hash=runs, policies=files.policies)
    keep(home, files, stamp(files))
    return tmp_path / "m"


QUOTA_LOTS = ("policies/quotas.yaml", "{team: search, gpus: 1}", '{team: search, gpus: "lots"}',
              "policies/quotas.yaml:25: spec.quotas[2].gpus:")  # fmt: skip
MESH_FOUR = ("mesh.yaml", "gpus: 4", "gpus: four", "mesh.yaml:30: spec.pools[0].nodes[0].gpus:")
SUBMIT = ["submit", "--dry-run", "--gpus", "1", "--", "python", "-c", "print(1)"]


@pytest.mark.parametrize(
    ("args", "change"),
    [
        (SUBMIT, QUOTA_LOTS),
        (["explain", "jobs/batch-embed.yaml"], QUOTA_LOTS),
        (SUBMIT, MESH_FOUR),
        (["explain", "jobs/batch-embed.yaml"], MESH_FOUR),
        (["status"], MESH_FOUR),
    ],
    ids=["submit, a quota of lots", "explain, a quota of lots", "submit, a node of four GPUs",
         "explain, a node of four GPUs", "status, a node of four GPUs"],
)  # fmt: skip
def test_a_change_the_controller_refused_is_a_warning_and_the_command_plans_with_its_set(
    cli: CliRunner, scaffold: Path, args: list[str], change: tuple[str, str, str, str]
) -> None:
    """Reported: with gpus: "lots" in a quota file, every submit and explain exited 2 with
    that file's error though the controller ran on the last good set; with gpus: four in
    mesh.yaml, status printed two error lines and no screen."""
    file, old, new, problem = change
    edit = scaffold / file
    text = edit.read_text()
    assert old in text
    edit.write_text(text.replace(old, new, 1))
    result = cli.invoke(app, args)
    assert result.exit_code == 0, result.output
    warned = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert any(problem in line for line in warned), result.stderr
    assert any("the running controller refused this change" in line for line in warned)
    daemon.pid_file(Path(os.environ["MESHCTL_HOME"])).unlink()  # none runs: an error
    again = cli.invoke(app, args)
    assert again.exit_code == 2, again.output
    assert problem in again.stderr


def test_reload_checks_every_file_first_and_refuses_an_invalid_change(
    cli: CliRunner, home: Path, tmp_path: Path
) -> None:
    bad = tmp_path / "bad"
    shutil.copytree(ROOT / "policies", bad)
    burst = (bad / "burst.yaml").read_text()
    (bad / "burst.yaml").write_text(burst.replace('== "best-effort"', "==", 1))
    pretend_controller(home, policy_hash=shipped_hash(cli), policies=str(ROOT / "policies"))
    result = cli.invoke(app, ["reload", "--policies", str(bad)])
    assert result.exit_code == 2
    assert result.stderr.startswith(f"error: {bad / 'burst.yaml'}:")
    assert not (home / "run" / "reload.json").exists()  # nothing asked of the controller


def test_reload_without_a_controller_is_one_line_and_exit_1(cli: CliRunner) -> None:
    result = cli.invoke(app, ["reload"])
    assert (result.exit_code, result.stderr) == (
        1,
        "error: no controller is running (meshctl up starts one)\n",
    )


def test_pools_check_says_why_each_pool_cannot_be_used_and_exits_1(
    cli: CliRunner, tmp_path: Path
) -> None:
    port = closed_port()
    mesh = tmp_path / "mesh.yaml"
    mesh.write_text(
        "apiVersion: meshctl/v1\nkind: Mesh\nmetadata: {name: m}\nspec:\n  pools:\n"
        "    - {name: lab, provider: local, nodes: [{name: n, gpus: 0, cpus: 1,"
        " memory_gib: 1GiB}]}\n"
        f"    - {{name: dc, provider: ray, address: 'http://127.0.0.1:{port}'}}\n"
    )
    result = cli.invoke(app, ["--mesh", str(mesh), "pools", "check", "-o", "json"])
    assert result.exit_code == 1
    rows = {r["pool"]: r for r in json.loads(result.stdout)}
    lab = {
        "check": "reachable",
        "result": "fail",
        "detail": "not up",
        "fix": "meshctl up starts it",
    }
    assert rows["lab"] == {"pool": "lab", "provider": "local", "available": False,
                           "reason": "not up", "checks": [lab]}  # fmt: skip
    assert rows["dc"]["available"] is False
    assert rows["dc"]["reason"].startswith(f"dashboard at http://127.0.0.1:{port} does not answer")
    error = json.loads(result.stderr.splitlines()[-1])["error"]
    assert (error["exit_code"], error["message"]) == (1, "2 of 2 pools unavailable: lab, dc")


def test_up_with_a_controller_running_other_policies_keeps_them_and_says_how_to_switch(
    cli: CliRunner, home: Path, tmp_path: Path
) -> None:
    mesh = tmp_path / "mesh.yaml"
    mesh.write_text(
        "apiVersion: meshctl/v1\nkind: Mesh\nmetadata: {name: m}\nspec:\n  pools:\n"
        f"    - {{name: dc, provider: ray, address: 'http://127.0.0.1:{closed_port()}'}}\n"
    )
    asked = onprem_policies(tmp_path / "other")
    pretend_controller(home, policy_hash="0123456789abcdef", policies="/srv/policies")
    result = cli.invoke(app, ["--mesh", str(mesh), "up", "--policies", str(asked)])
    assert result.exit_code == 0, result.output
    warned = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert warned[0].startswith("warning: pool dc: unavailable: dashboard at http://127.0.0.1:")
    assert warned[1] == (
        "warning: the controller already runs with the policies in /srv/policies (hash "
        f"0123456789abcdef), not {asked}; to switch: meshctl reload --policies {asked}"
    )
    assert "controller: already running" in result.stdout
    recorded = json.loads((home / "run" / "up.json").read_text())
    assert recorded["policies"] == "/srv/policies"  # what runs, not what was asked
