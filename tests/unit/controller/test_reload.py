"""One policy set from the files to the controller: a running controller takes a valid change
(asked for or noticed), refuses an invalid one and keeps the old set, publishes the hash it
enforces, records it with every decision, and raises an event for a rule that fails."""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from meshctl.app.context import rules_from
from meshctl.controller.deciding.decide import Rules
from meshctl.controller.loop import Controller
from meshctl.controller.reload import (
    WATCH_S,
    Reloader,
    RuleFiles,
    ask,
    git_commit,
    rule_hashes,
)
from meshctl.state import AttemptRecord, JobRecord, JobState, MemoryStore
from tests.conftest import EXAMPLES, onprem_policies

from .test_loop import Clock, FakePool, queue

pytestmark = pytest.mark.unit

LOCAL_MESH = """\
apiVersion: meshctl/v1
kind: Mesh
metadata: {name: t}
spec:
  pools:
    - name: onprem
      provider: local
      labels: {tier: strategic}
      nodes:
        - {name: n, gpus: 4, cpus: 2, memory_gib: 8GiB,
           accelerator: {vendor: nvidia, model: A100, memory_gib: 80GiB}}
"""


@dataclass
class Setup:
    base: Path
    files: RuleFiles
    store: MemoryStore
    clock: Clock
    loop: Controller
    loads: list[RuleFiles]

    @property
    def burst_yaml(self) -> Path:
        return Path(self.files.policies) / "burst.yaml"

    def beat(self) -> dict[str, object]:
        data: dict[str, object] = json.loads((self.base / "heartbeat").read_text())
        return data

    def cycle(self) -> None:
        self.clock.now += WATCH_S
        self.loop.cycle()

    def events(self, kind: str) -> list[tuple[str, dict[str, object]]]:
        return [(e.message, dict(e.data)) for e in self.store.events() if e.kind == kind]


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


def policies_in(base: Path, name: str = "policies") -> Path:
    """The shipped policies, less what names the cloud pools this test's mesh does not have
    (policies naming a pool or provider the mesh lacks are refused)."""
    return onprem_policies(base / name)


@pytest.fixture
def setup(tmp_path: Path) -> Setup:
    (tmp_path / "mesh.yaml").write_text(LOCAL_MESH)
    files = RuleFiles(str(tmp_path / "mesh.yaml"), str(policies_in(tmp_path)))
    home = tmp_path / "home"
    (home / "run").mkdir(parents=True)
    loads: list[RuleFiles] = []

    def load(f: RuleFiles) -> Rules:
        loads.append(f)
        return rules_from(home, f)

    store, clock = MemoryStore(), Clock()
    reloader = Reloader(files, home, load)
    loop = Controller(
        store,
        rules_from(home, files),
        {"onprem": FakePool()},
        clock=clock,
        heartbeat=tmp_path / "heartbeat",
        reloader=reloader,
    )
    return Setup(tmp_path, files, store, clock, loop, loads)


def hash_of(loop: Controller) -> str:
    assert loop.rules.policies is not None
    return loop.rules.policies.content_hash


def test_the_heartbeat_publishes_the_hash_and_folder_it_enforces(setup: Setup) -> None:
    setup.cycle()
    beat = setup.beat()
    assert beat["policy_hash"] == hash_of(setup.loop)
    assert (beat["policies"], beat["mesh"]) == (setup.files.policies, setup.files.mesh)
    assert beat["policy_error"] is None
    assert beat["policy_commit"] is None  # a temporary folder is in no git repository


def test_every_decision_carries_the_hash_and_is_recorded_again_after_a_reload(
    setup: Setup,
) -> None:
    record = queue(setup.store, "big", gpus=16)  # never placed: its decision stays the same
    setup.cycle()
    first = hash_of(setup.loop)
    edit(setup.burst_yaml, "> 600.0", "> 300.0")
    setup.cycle()
    second = hash_of(setup.loop)
    assert first != second
    recorded = [d.policy_hash for d in setup.store.decisions(job_id=record.id)]
    assert recorded == [first, second]


def test_a_valid_edit_is_noticed_and_taken_with_an_event(setup: Setup) -> None:
    setup.cycle()
    old = hash_of(setup.loop)
    edit(setup.burst_yaml, "> 600.0", "> 300.0")
    setup.cycle()
    new = hash_of(setup.loop)
    assert new != old
    [(message, data)] = setup.events("policy.reloaded")
    assert data == {"old_hash": old, "new_hash": new}
    assert message.startswith(f"policies {old} -> {new} (unchanged: mesh ")
    assert setup.beat()["policy_hash"] == new


def test_an_invalid_edit_is_refused_once_and_the_old_set_keeps_running(setup: Setup) -> None:
    setup.cycle()
    old = hash_of(setup.loop)
    edit(setup.burst_yaml, 'job.criticality == "best-effort"', "job.criticality ==")
    setup.cycle()
    setup.cycle()  # the same refused files: not tried again, not told again
    assert hash_of(setup.loop) == old
    [(message, data)] = setup.events("policy.reload_refused")
    assert message.startswith(f"kept policies {old}: {setup.burst_yaml}:")
    assert data == {"old_hash": old, "new_hash": None}
    assert str(setup.beat()["policy_error"]).startswith(f"{setup.burst_yaml}:")
    assert len(setup.loads) == 1
    edit(setup.burst_yaml, "job.criticality ==", 'job.criticality == "best-effort"')
    setup.cycle()  # back as it was: valid, and the same content as what runs
    assert setup.beat()["policy_error"] is None
    assert setup.events("policy.reloaded") == []


def test_files_are_only_stat_ed_until_one_changes_and_a_touch_changes_nothing(
    setup: Setup,
) -> None:
    for _ in range(5):
        setup.cycle()
    assert setup.loads == []  # nothing read while nothing changed
    os.utime(setup.burst_yaml, ns=(1, 1))  # touched: read, compared, same content
    setup.cycle()
    assert len(setup.loads) == 1
    assert setup.events("policy.reloaded") == []


def test_a_request_switches_the_folder_answers_its_id_and_records_what_runs(
    setup: Setup,
) -> None:
    recorded: list[RuleFiles] = []
    assert setup.loop.reloader is not None
    setup.loop.reloader.taken = recorded.append
    other = policies_in(setup.base, "other")
    edit(other / "burst.yaml", "> 600.0", "> 60.0")
    switched = RuleFiles(setup.files.mesh, str(other))
    ask(setup.base / "home", "req-1", switched)
    setup.cycle()
    answer = setup.beat()["reload"]
    assert isinstance(answer, dict)
    assert (answer["request"], answer["outcome"]) == ("req-1", "reloaded")
    assert setup.beat()["policies"] == str(other)
    assert recorded == [switched]  # up.json follows, so the CLI plans with what runs


def test_a_mesh_change_is_taken_and_a_new_local_pool_is_left_to_up(setup: Setup) -> None:
    setup.cycle()
    mesh = Path(setup.files.mesh)
    mesh.write_text(
        mesh.read_text() + "    - {name: lab2, provider: local, nodes: [{name: m, gpus: 1, cpus: 1,"
        " memory_gib: 1GiB, accelerator: {model: A100, memory_gib: 80GiB}}]}\n"
    )
    setup.cycle()
    assert setup.loop.rules.mesh.pool("lab2") is not None
    [(message, _)] = setup.events("policy.reloaded")
    assert message.startswith("mesh ")
    assert message.endswith(", catalogs " + rule_hashes(setup.loop.rules)["catalogs"] + ")"
                            "; pool lab2 is new: meshctl up starts it")  # fmt: skip


def test_a_reload_after_a_change_already_noticed_says_what_it_took_and_when(
    setup: Setup,
) -> None:
    """Reported: reload printed "policies ...: no change" after a change to mesh.yaml that
    the controller had taken (noticed a moment before the request)."""
    setup.cycle()
    before = rule_hashes(setup.loop.rules)
    edit(Path(setup.files.mesh), "labels: {tier: strategic}", "labels: {tier: bulk}")
    setup.cycle()  # noticed and taken
    after = rule_hashes(setup.loop.rules)
    assert after["mesh"] != before["mesh"]
    assert after["policies"] == before["policies"]
    ask(setup.base / "home", "req-2", setup.files)
    setup.cycle()
    answer = setup.beat()["reload"]
    assert isinstance(answer, dict)
    assert (answer["request"], answer["outcome"]) == ("req-2", "unchanged")
    assert re.fullmatch(
        rf"no change: runs mesh {after['mesh']} \(taken [12] s ago\), "
        rf"policies {after['policies']}, catalogs {after['catalogs']}",
        str(answer["message"]),
    )
    assert answer["hashes"] == after
    [(taken, _)] = setup.events("policy.reloaded")
    assert taken == (
        f"mesh {before['mesh']} -> {after['mesh']} (unchanged: policies {after['policies']}, "
        f"catalogs {after['catalogs']})"
    )


def test_a_mesh_that_drops_a_pool_still_running_jobs_is_refused(setup: Setup) -> None:
    record = queue(setup.store, "runs")
    setup.cycle()  # placed on onprem: its attempt is active
    assert [a.state for a in setup.store.list(AttemptRecord)] == ["pending"]
    edit(Path(setup.files.mesh), "name: onprem", "name: lab")
    setup.cycle()
    assert setup.loop.rules.mesh.pool("onprem") is not None
    [(message, _)] = setup.events("policy.reload_refused")
    assert message.endswith(
        f"{setup.files.mesh}: spec.pools: expected onprem while jobs or instances run there"
        " (drain first), got a mesh without"
    )
    job = setup.store.get(JobRecord, record.id)
    assert job is not None
    assert job.state is JobState.DISPATCHED  # not lost, not requeued


def test_a_reload_gives_the_burst_side_the_new_mesh(tmp_path: Path) -> None:
    from meshctl.controller.burst import Burst

    shutil.copy(EXAMPLES / "mesh.yaml", tmp_path / "mesh.yaml")
    files = RuleFiles(str(tmp_path / "mesh.yaml"), str(policies_in(tmp_path)))
    home = tmp_path / "home"
    rules = rules_from(home, files)
    store = MemoryStore()
    burst = Burst(store, rules.mesh, rules.catalogs, {}, None)
    loop = Controller(
        store, rules, {}, burst=burst, reloader=Reloader(files, home, lambda f: rules_from(home, f))
    )
    edit(tmp_path / "mesh.yaml", "idle_minutes: 10", "idle_minutes: 3")
    loop.cycle()
    pool = burst.mesh.pool("aws-burst")
    assert pool is not None
    assert pool.idle_minutes == 3  # type: ignore[union-attr]


def test_the_git_commit_of_a_policy_folder_in_a_repository(tmp_path: Path) -> None:
    import subprocess

    git: Callable[..., object] = lambda *a: subprocess.run(  # noqa: E731
        ["git", "-C", str(tmp_path), *a], check=True, capture_output=True
    )
    git("init", "-q")
    policies_in(tmp_path)
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "policies")
    head = subprocess.run(
        ["git", "-C", str(tmp_path), "rev-parse", "HEAD"], capture_output=True, text=True
    )
    assert git_commit(tmp_path / "policies") == head.stdout.strip()


FAILING = """\
apiVersion: meshctl/v1
kind: Policy
metadata: {name: labels}
spec:
  pools:
    - name: sensitive-onprem
      when: job.labels.sensitivity != "public"
      deny: pool.cloud
"""


def test_a_rule_that_fails_raises_one_event_per_job_and_failure(setup: Setup) -> None:
    (Path(setup.files.policies) / "labels.yaml").write_text(FAILING)
    first = queue(setup.store, "a", gpus=16)  # waits: decided every cycle
    setup.cycle()  # the new file is noticed and taken
    for _ in range(3):
        setup.cycle()
    second = queue(setup.store, "b", gpus=16)
    setup.cycle()
    told = [e for e in setup.store.events() if e.kind == "policy.error"]
    assert [e.job_id for e in told] == [first.id, second.id]
    event = told[0]
    assert event.data["rule"] == "sensitive-onprem"
    assert str(event.data["origin"]).startswith(f"{setup.files.policies}/labels.yaml:")
    assert "sensitivity" in event.message
    restarted = Controller(
        setup.store, setup.loop.rules, {"onprem": FakePool()}, clock=setup.clock
    )  # a new controller process: it reads what was told before
    restarted.cycle()
    assert len([e for e in setup.store.events() if e.kind == "policy.error"]) == 2
