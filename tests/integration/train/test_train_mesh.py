"""Fault-tolerant training through meshctl, for real: an embedded mesh (a local Ray cluster of
three emulated 1-GPU nodes and the controller daemon) runs the example PyTorch loop
(examples/train/model.py) as a train job, and things go wrong mid-run:

- a worker crashes: Ray Train restarts it inside the attempt from the latest checkpoint;
- its node is killed: the job is evicted, requeued, placed on another node and resumes from its
  latest checkpoint; the final weights are bit-for-bit those of an uninterrupted run;
- its node's health probe says unhealthy: the node leaves service, the job is asked to
  checkpoint, evicted and resumes elsewhere from its latest checkpoint (not from step 0);
- its driver is killed: the controller resubmits it and it resumes;
- it hangs: past its hang timeout it is stopped and restarted from its checkpoint.

One mesh serves the module; each test leaves it with three live nodes.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from meshctl.model.mesh import NodeGroup
from meshctl.pools import local
from meshctl.pools.checkpoints import read_progress
from tests.conftest import ROOT
from tests.integration.controller.test_local_mesh import WAIT_S, Mesh

pytestmark = pytest.mark.integration

STEPS, EVERY = 60, 10  # a checkpoint every 10 steps
MESH = """\
apiVersion: meshctl/v1
kind: Mesh
metadata: {{name: train-test}}
spec:
  pools:
    - name: onprem
      provider: local
      checkpoint_storage: {{uri: "file://{checkpoints}"}}
      nodes:
        - {{name: n, count: 3, gpus: 1, cpus: 1, memory_gib: 2GiB,
           accelerator: {{model: A100, memory_gib: 80GiB}}}}
"""


@pytest.fixture(scope="module")
def mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mesh]:
    base = tmp_path_factory.mktemp("train")
    (base / "mesh.yaml").write_text(MESH.format(checkpoints=base / "checkpoints"))
    m = Mesh(base / "home", base)
    m.run("--mesh", str(base / "mesh.yaml"), "up", "--interval", "0.5")
    try:
        yield m
    finally:
        m.run("down", "--force", check=False)


def train(mesh: Mesh, name: str, hang_timeout: str | None = None, **config: Any) -> str:
    config = {"steps": STEPS, "checkpoint_every_steps": EVERY, "step_delay_s": 0.1, **config}
    args = ["train", "model:train_loop", "--name", name, "--no-follow", "--cpus-per-worker", "0.5",
            "--gpus-per-worker", "1", "--memory-per-worker", "512MiB",
            "--working-dir", str(ROOT / "examples" / "train")]  # fmt: skip
    for key, value in config.items():
        args += ["--config", f"{key}={json.dumps(value)}"]
    if hang_timeout:
        args += ["--hang-timeout", hang_timeout]
    return mesh.run(*args).stdout.strip().splitlines()[-1]


def final(path: Path) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(path.read_text())
    return result


def wait_for_step(mesh: Mesh, job_id: str, step: int) -> None:
    """Until the job's first attempt has reported ``step`` (and so checkpointed before it)."""
    uri = f"file://{mesh.cwd / 'checkpoints' / job_id}"
    deadline = time.monotonic() + WAIT_S
    while (seen := read_progress(uri, 1)) is None or (seen.get("step") or 0) < step:
        assert time.monotonic() < deadline, f"{job_id} never reached step {step}: {seen}"
        time.sleep(0.25)


def training(mesh: Mesh, job_id: str) -> dict[str, Any]:
    shown = mesh.show(job_id)
    data: dict[str, Any] = shown["training"]  # type: ignore[assignment]
    return data


@pytest.fixture(scope="module")
def reference(mesh: Mesh, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The uninterrupted run every interrupted one must match."""
    out = tmp_path_factory.mktemp("ref") / "weights.json"
    job_id = train(mesh, "reference", output=str(out))
    assert mesh.run("jobs", "wait", job_id, "--timeout", str(WAIT_S)).returncode == 0
    return final(out)


def restore_node(mesh: Mesh, name: str) -> None:
    """Start the killed node again, so the next test has three."""
    cluster = mesh.cluster()
    group = NodeGroup.model_validate(
        {"name": name, "gpus": 1, "cpus": 1, "memory_gib": 2,
         "accelerator": {"model": "A100", "memory_gib": 80}}
    )  # fmt: skip
    local.add_node(cluster, name, group, mesh.home / "run")


def test_a_worker_crash_is_recovered_inside_the_attempt_by_ray_train(
    mesh: Mesh, reference: dict[str, Any], tmp_path: Path
) -> None:
    out, marker = tmp_path / "weights.json", tmp_path / "crashed-once"
    job_id = train(mesh, "worker-crash", output=str(out), fail_at_step=25,
                   fail_marker=str(marker))  # fmt: skip
    assert mesh.run("jobs", "wait", job_id, "--timeout", str(WAIT_S)).returncode == 0
    assert marker.exists()
    shown = mesh.show(job_id)
    assert shown["attempt"] == 1  # no new attempt: Ray Train restarted the worker in place
    assert final(out)["sha256"] == reference["sha256"]
    [attempt] = training(mesh, job_id)["attempts"]
    assert attempt["restarts"] == 1
    [recovery] = training(mesh, job_id)["recoveries"]
    assert recovery["steps_lost"] <= EVERY
    kinds = [e["kind"] for e in shown["events"]]  # type: ignore[index, union-attr]
    assert "train.restarted" in kinds


def test_a_node_killed_mid_training_resumes_elsewhere_with_identical_weights(
    mesh: Mesh, reference: dict[str, Any], tmp_path: Path
) -> None:
    out = tmp_path / "weights.json"
    job_id = train(mesh, "node-kill", output=str(out))
    wait_for_step(mesh, job_id, 25)
    [victim] = mesh.show(job_id)["nodes"]
    local.remove_node(mesh.cluster(), victim, mesh.home / "run")  # the node dies
    try:
        assert mesh.run("jobs", "wait", job_id, "--timeout", str(WAIT_S)).returncode == 0
        shown = mesh.show(job_id)
        assert shown["attempt"] == 2
        assert victim not in shown["nodes"]
        assert final(out)["sha256"] == reference["sha256"]  # bit for bit
        [recovery] = training(mesh, job_id)["recoveries"]
        assert recovery["resumed_from_step"] is not None
        assert recovery["steps_lost"] <= EVERY  # at most one checkpoint interval redone
        assert recovery["resume_s"] is not None
    finally:
        restore_node(mesh, victim)


def test_an_unhealthy_node_is_left_and_the_job_resumes_from_its_checkpoint(
    mesh: Mesh,
) -> None:
    """A long run (it would not finish within the 30 s it is given to checkpoint): asked to
    checkpoint, it does at once; it is evicted and resumes on a healthy node from there."""
    job_id = train(mesh, "unhealthy", steps=2000)
    wait_for_step(mesh, job_id, 25)
    [sick] = mesh.show(job_id)["nodes"]
    mesh.run("nodes", "health", sick, "--unhealthy", "GPU XID 79")
    uri = f"file://{mesh.cwd / 'checkpoints' / job_id}"
    try:
        deadline = time.monotonic() + WAIT_S
        while read_progress(uri, 2) is None:  # the second attempt has reported
            assert time.monotonic() < deadline, "the job did not resume"
            time.sleep(0.5)
        shown = mesh.show(job_id)
        assert sick not in shown["nodes"]
        kinds = [e["kind"] for e in shown["events"]]  # type: ignore[index, union-attr]
        assert "job.checkpoint-request" in kinds
        assert "job.evicted" in kinds
        _, second = training(mesh, job_id)["attempts"]
        assert second["resumed_from_step"] > 25  # its checkpoint on request, not step 19 or 0
        nodes = json.loads(mesh.run("nodes", "list", "-o", "json").stdout)
        assert {n["node"]: n["state"] for n in nodes}[f"onprem/{sick}"].startswith("unhealthy")
    finally:
        mesh.run("jobs", "cancel", job_id, check=False)
        mesh.run("nodes", "health", sick, "--healthy")
    deadline = time.monotonic() + WAIT_S  # back in service once the probe says healthy
    while {n["node"]: n["state"] for n in json.loads(
        mesh.run("nodes", "list", "-o", "json").stdout)}[f"onprem/{sick}"] != "ready":  # fmt: skip
        assert time.monotonic() < deadline
        time.sleep(0.5)


def test_a_killed_driver_is_resubmitted_and_resumes(mesh: Mesh, tmp_path: Path) -> None:
    job_id = train(mesh, "driver-kill")
    wait_for_step(mesh, job_id, 25)
    drivers = [p for p in local.leftover(mesh.cluster()) if _is_driver(p, job_id)]
    assert drivers, "the training driver was not found"
    for pid in drivers:
        signal_pid(pid)
    assert mesh.run("jobs", "wait", job_id, "--timeout", str(WAIT_S)).returncode == 0
    shown = mesh.show(job_id)
    assert shown["attempt"] == 2
    assert training(mesh, job_id)["attempts"][-1]["resumed_from_step"] >= 19


def test_a_hung_job_is_restarted_from_its_checkpoint(mesh: Mesh, tmp_path: Path) -> None:
    marker = tmp_path / "hung-once"
    job_id = train(mesh, "hang", hang_timeout="8s", hang_at_step=25, hang_marker=str(marker))
    assert mesh.run("jobs", "wait", job_id, "--timeout", str(WAIT_S)).returncode == 0
    assert marker.exists()
    shown = mesh.show(job_id)
    assert shown["attempt"] == 2
    events = shown["events"]  # type: ignore[assignment]
    assert any("no progress report" in e["message"] for e in events)  # type: ignore[union-attr]
    assert training(mesh, job_id)["attempts"][-1]["resumed_from_step"] >= 19


def _is_driver(pid: int, job_id: str) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False
    return "meshctl.train.run" in cmdline and f"MESHCTL_JOB_ID={job_id}".encode() in environ


def signal_pid(pid: int) -> None:
    import contextlib
    import os

    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
