"""``meshctl policy diff`` on a mesh that has run jobs: the differential check's controller
side (the real loop over fake pools, the fake cloud and a virtual clock) runs a busy hour of
bursting work into a store; the diff replays that history through the simulator under two
policy sets and compares them job by job (``meshctl.app.policydiff``)."""

from __future__ import annotations

import json
import random
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from pydantic import TypeAdapter
from typer.testing import CliRunner

from meshctl.app.policydiff import read_history, replay_of
from meshctl.app.shapes.policy import PolicyDiff
from meshctl.cli.app import app
from meshctl.sim.core.engine import simulate
from meshctl.sim.core.replay import History
from meshctl.sim.core.replay_diff import compare
from meshctl.state import open_store
from tests.differential.run import controller_side
from tests.differential.scenario import EPOCH_S, Cloud, Scenario
from tests.differential.scenario import catalogs as load_catalogs
from tests.differential.table import BURST, job

pytestmark = pytest.mark.unit

# the spill rule without its wait gate's best-effort: only best-effort work may burst
BEST_EFFORT_ONLY = BURST.replace(
    'job.criticality != "critical"', 'job.criticality == "best-effort"'
)


def _busy() -> Scenario:
    """40 train jobs over about 40 minutes on two 4-GPU nodes: more than fits, so the
    spill rule bursts some to aws."""
    rng = random.Random(7)
    jobs, t = [], 0.0
    for i in range(40):
        t += rng.expovariate(1 / 60)
        criticality = rng.choice(["standard", "standard", "critical", "best-effort"])
        duration, gpus = rng.choice([200, 400, 900]), rng.choice([1, 2, 4])
        jobs.append(job(f"j{i:02d}", round(t), duration, gpus, criticality=criticality))
    return Scenario("busy", tuple(jobs), policies=BURST, cloud=Cloud(idle_s=60.0))


@dataclass
class Ran:
    scenario: Scenario
    home: Path
    mesh_file: Path
    history: History


def _policy_folder(folder: Path, spec: str | None) -> Path:
    """A folder of one policy file of ``spec`` (None: a policy with no rules)."""
    folder.mkdir(parents=True)
    text = "apiVersion: meshctl/v1\nkind: Policy\nmetadata: {name: p}\nspec:"
    body = textwrap.indent(textwrap.dedent(spec), "  ") if spec is not None else " {}\n"
    (folder / "p.yaml").write_text(text + ("\n" + body if spec is not None else body))
    return folder


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> Ran:
    scenario = _busy()
    base = tmp_path_factory.mktemp("policydiff")
    home = base / "home"
    with open_store(home) as store:
        controller_side(scenario, base, store)
        history = read_history(store, EPOCH_S, EPOCH_S + scenario.until_s)
    mesh_file = base / "mesh.yaml"
    document = scenario.mesh(f"file://{base}/checkpoints").model_dump(
        mode="json", exclude_none=True
    )
    mesh_file.write_text(yaml.safe_dump(document))
    return Ran(scenario, home, mesh_file, history)


def _report(ran: Ran, head_spec: str | None) -> dict[str, object]:
    scenario = ran.scenario
    mesh = scenario.mesh("file:///nowhere")
    sim, jobs, config = replay_of(ran.history, mesh, load_catalogs())
    base_set = scenario.policy_set()
    head_set = Scenario("head", (), policies=head_spec).policy_set()
    runs = [simulate(sim, jobs, config, p) for p in (base_set, head_set)]
    return compare(ran.history, runs[0], runs[1], sim, lambda _: [])


def test_the_history_holds_every_job_with_where_it_ran(ran: Ran) -> None:
    assert len(ran.history.jobs) == 40
    pools = {j.pool for j in ran.history.jobs}
    assert pools == {"onprem", "aws"}  # some burst: the comparisons below mean something
    assert ran.history.provision_s["aws"] > 0  # learned from the instances that joined


def test_the_base_set_as_head_moves_nothing_and_replays_the_record(ran: Ran) -> None:
    report = _report(ran, BURST)
    assert report["moved"] == 0
    assert report["changes"] == []
    fidelity = report["fidelity"]
    assert isinstance(fidelity, dict)
    assert fidelity["jobs_that_ran"] == 40
    assert fidelity["same_pool_share"] >= 0.99
    assert fidelity["start_error_p95_s"] <= 10.0  # within the controller's 10 s cycle


def test_without_the_burst_rule_exactly_the_jobs_that_burst_move_on_prem(ran: Ran) -> None:
    burst = {j.id for j in ran.history.jobs if j.pool == "aws"}
    report = _report(ran, None)
    changes = report["changes"]
    assert isinstance(changes, list)
    assert {c["job_id"] for c in changes} == burst
    assert all(c["base"]["pool"] == "aws" and c["head"]["pool"] == "onprem" for c in changes)
    spend = report["spend_usd_per_month"]
    assert isinstance(spend, dict)
    assert spend["base"] > 0
    assert spend["head"] == 0


def test_a_narrower_burst_gate_moves_only_jobs_it_no_longer_lets_burst(ran: Ran) -> None:
    report = _report(ran, BEST_EFFORT_ONLY)
    changes = report["changes"]
    assert isinstance(changes, list)
    assert changes
    criticality = {j.id: j.criticality for j in ran.scenario.jobs}
    for change in changes:
        if change["base"]["pool"] == "aws":  # kept from the cloud: not best-effort work
            assert criticality[change["job_id"]] != "best-effort"


def _cli(ran: Ran, *args: str) -> tuple[int, str, str]:
    runner = CliRunner()
    done = runner.invoke(
        app,
        ["--mesh", str(ran.mesh_file), "policy", "diff", "--since", "400d", *args],
        env={"MESHCTL_HOME": str(ran.home)},
    )
    return done.exit_code, done.stdout, done.stderr


def test_the_command_names_the_rule_and_exits_1_when_jobs_move(
    ran: Ran, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("time.time", lambda: EPOCH_S + ran.scenario.until_s)
    base = _policy_folder(tmp_path / "base", BURST)
    head = _policy_folder(tmp_path / "head", BEST_EFFORT_ONLY)
    code, out, err = _cli(ran, "--base", str(base), "--head", str(head), "-o", "json",
                          "--exit-code")  # fmt: skip
    assert code == 1, err
    report = json.loads(out)
    TypeAdapter(PolicyDiff).validate_python(report)  # strictly its documented shape
    assert report["fidelity"]["same_pool_share"] >= 0.99
    assert report["moved"] == len(report["changes"]) > 0
    assert any("burst/spill" in rule for c in report["changes"] for rule in c["rules"])
    code, out, _ = _cli(ran, "--base", str(base), "--head", str(base), "--exit-code")
    assert code == 0
    assert "moved: 0 of 40 jobs" in out


def test_markdown_is_a_summary_and_tables(
    ran: Ran, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("time.time", lambda: EPOCH_S + ran.scenario.until_s)
    base = _policy_folder(tmp_path / "base", BURST)
    head = _policy_folder(tmp_path / "head", None)
    code, out, _ = _cli(ran, "--base", str(base), "--head", str(head), "-o", "markdown")
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "### meshctl policy diff"
    header = next(i for i, line in enumerate(lines) if line.startswith("| Job |"))
    assert lines[header + 1].startswith("| --- |")
    assert all(line.count("|") == lines[header].count("|") for line in lines[header:] if line)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--since", "0s"], "--since: expected a duration > 0"),
        (["--since", "1d"], "--since: no job was submitted in the last 1 days"),
        (["-o", "html"], "--output: expected one of table, json, yaml, markdown"),
        (["--base", "no-such-ref"], "--base: no-such-ref is no folder"),
        (["--head", "/nonexistent"], "--head: /nonexistent: no such folder"),
    ],
    ids=["empty-window", "no-history", "unknown-output", "unknown-ref", "missing-head"],
)
def test_bad_input_is_one_line_and_exit_2(ran: Ran, args: list[str], expected: str) -> None:
    code, out, err = _cli(ran, *args)
    assert code == 2
    assert expected in err
    assert "Traceback" not in err
    assert out == ""


def test_a_git_ref_base_is_the_head_folder_as_committed_there(
    ran: Ran, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import subprocess

    monkeypatch.setattr("time.time", lambda: EPOCH_S + ran.scenario.until_s)
    head = _policy_folder(tmp_path / "repo" / "policies", BURST)
    git = ["git", "-C", str(tmp_path / "repo"), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "burst for all but critical work"], check=True)
    _policy_folder(tmp_path / "changed", BEST_EFFORT_ONLY)
    (head / "p.yaml").write_text((tmp_path / "changed" / "p.yaml").read_text())  # uncommitted
    code, out, err = _cli(ran, "--base", "HEAD", "--head", str(head), "-o", "json")
    assert code == 0, err
    report = json.loads(out)
    assert report["base"]["policies"] == f"HEAD:{head}"
    assert report["base"]["policy_hash"] != report["head"]["policy_hash"]
    assert report["moved"] > 0  # the committed set bursts more than the changed one


def test_replays_forked_side_by_side_compare_as_replays_run_here(
    ran: Ran, monkeypatch: pytest.MonkeyPatch
) -> None:
    from meshctl.app import policydiff

    scenario = ran.scenario
    sim, jobs, config = replay_of(ran.history, scenario.mesh("file:///nowhere"), load_catalogs())
    sets = (scenario.policy_set(), Scenario("head", (), policies=BEST_EFFORT_ONLY).policy_set())
    here = [simulate(sim, jobs, config, p) for p in sets]
    monkeypatch.setattr(policydiff, "PARALLEL_FROM", 1)
    forked = policydiff.replay_both(sim, jobs, config, sets)
    reports = [compare(ran.history, a, b, sim, lambda _: []) for a, b in (here, forked)]
    assert reports[0] == reports[1]
    assert reports[0]["moved"] > 0
