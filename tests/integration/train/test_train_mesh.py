"""Fault-tolerant training through meshctl, for real: an embedded mesh (a local Ray cluster of
three emulated 1-GPU nodes and the controller daemon) runs the example PyTorch loop
(examples/train/model.py) as a train job, and things go wrong mid-run:

- a worker crashes: Ray Train restarts it inside the attempt from the latest checkpoint;
- its node is killed: its driver lives on the pool's head, so the controller nominates a free
  node and Ray Train resumes there from the latest checkpoint inside the same attempt; the
  final weights are bit-for-bit those of an uninterrupted run;
- its node's health probe says unhealthy: the node leaves service, the job is asked to
  checkpoint, evicted and resumes elsewhere from its latest checkpoint (not from step 0);
- its driver is killed: the controller resubmits it and it resumes;
- it hangs: past its hang timeout it is stopped and restarted from its checkpoint;
- its node's agent reports an XID (a fake one, in the fake kernel log of scripts/fake-gpu: no
  GPU driver here): the node is cordoned, the job checkpoints on request, is evicted and
  resumes elsewhere with the weights of an uninterrupted run;
- its node's agent stops answering (SIGSTOP): the node is suspect, then dead and its job
  moved, and back in service when the agent answers again.

One mesh serves the module; each node has its agent, probing through the fake nvidia-smi;
each test leaves the mesh with three live, healthy nodes.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from meshctl.model.mesh import NodeAgents, NodeGroup
from meshctl.pools import local
from meshctl.pools.checkpoints import read_progress
from tests.conftest import ROOT
from tests.integration.meshes import WAIT_S, Mesh

pytestmark = pytest.mark.integration

STEPS, EVERY = 60, 10  # a checkpoint every 10 steps
SUSPECT_S, DEAD_S = 3, 8  # a silent agent's node: suspect, then dead
UNHEALTHY_GRACE_S = 5  # a job on an unhealthy node checkpoints this long (30 s by default)
FAKE_GPU = ROOT / "scripts" / "fake-gpu"  # nvidia-smi and dmesg stand-ins (a driver mock)
MESH = """\
apiVersion: meshctl/v1
kind: Mesh
metadata: {{name: train-test}}
spec:
  pools:
    - name: onprem
      provider: local
      checkpoint_storage: {{uri: "file://{checkpoints}"}}
      agents: {{suspect_after_s: {suspect}, dead_after_s: {dead}}}
      graces: {{unhealthy_s: {grace}}}
      nodes:
        - {{name: n, count: 3, gpus: 1, cpus: 1, memory_gib: 2GiB,
           accelerator: {{model: A100, memory_gib: 80GiB}}}}
"""


@pytest.fixture(scope="module")
def mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mesh]:
    base = tmp_path_factory.mktemp("train")
    mesh_file = base / "mesh.yaml"
    mesh_file.write_text(MESH.format(checkpoints=base / "checkpoints", suspect=SUSPECT_S,
                                     dead=DEAD_S, grace=UNHEALTHY_GRACE_S))  # fmt: skip
    m = Mesh(base / "home", base)
    (base / "gpus").mkdir()
    m.run("--mesh", str(mesh_file), "up", "--interval", "0.5", env=fake_gpus(m))
    try:
        yield m
    finally:
        m.run("down", "--force", check=False)


def fake_gpus(mesh: Mesh) -> dict[str, str]:
    """The environment a node's agent starts in: the fake nvidia-smi and dmesg first on its
    PATH, each node's fake state in gpus/ (a node of one GPU unless its file says more)."""
    return {"PATH": f"{FAKE_GPU}:{os.environ['PATH']}", "MESHCTL_FAKE_GPUS": "1",
            "MESHCTL_FAKE_GPU_DIR": str(mesh.cwd / "gpus")}  # fmt: skip


def train(
    mesh: Mesh, name: str, hang_timeout: str | None = None, export: str | None = None,
    **config: Any,
) -> str:  # fmt: skip
    config = {"steps": STEPS, "checkpoint_every_steps": EVERY, "step_delay_s": 0.1, **config}
    args = ["train", "model:train_loop", "--name", name, "--no-follow", "--cpus-per-worker", "0.5",
            "--gpus-per-worker", "1", "--memory-per-worker", "512MiB",
            "--working-dir", str(ROOT / "examples" / "train")]  # fmt: skip
    for key, value in config.items():
        args += ["--config", f"{key}={json.dumps(value)}"]
    if hang_timeout:
        args += ["--hang-timeout", hang_timeout]
    if export:
        args += ["--export", export]
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
    """The uninterrupted run every interrupted one must match; its model exported to ONNX."""
    out = tmp_path_factory.mktemp("ref") / "weights.json"
    job_id = train(mesh, "reference", export="onnx", output=str(out))
    assert mesh.run("jobs", "wait", job_id, "--timeout", str(WAIT_S)).returncode == 0
    return final(out) | {"job": job_id}


def test_each_node_has_an_agent_that_answers_only_with_the_cluster_s_token(mesh: Mesh) -> None:
    """The module's first test: the mesh it starts, its three nodes, and their agents."""
    import urllib.error
    import urllib.request

    def three() -> list[str] | None:  # the controller's first cycles record them
        listed = [n.split("/", 1)[1] for n in node_list(mesh)]
        return listed if len(listed) == 3 else None

    names = mesh.until(lambda: f"the three nodes were never listed: {node_list(mesh)}", three)
    probed = [
        wait_for_node(mesh, n, "probed", lambda r: (r["agent"] or {}).get("probed_at"))
        for n in names
    ]
    assert {r["agent"]["verdict"] for r in probed} == {"healthy"}
    url = probed[0]["agent"]["url"]
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(url, timeout=10)
    assert refused.value.code == 401
    asked = urllib.request.Request(url, headers={"Authorization": f"Bearer {mesh.cluster().token}"})
    with urllib.request.urlopen(asked, timeout=10) as answer:
        probe = json.loads(answer.read())
    assert probe["source"] == "nvidia-smi"
    assert [g["uuid"] for g in probe["gpus"]] == [f"GPU-fake-{probe['node']}-0"]


def test_the_reference_run_left_its_model_in_onnx_checked_by_onnxruntime(
    mesh: Mesh, reference: dict[str, Any]
) -> None:
    """``--export onnx``: after the run, model.onnx beside the checkpoints, and onnxruntime's
    outputs on the example batch within the stated tolerance of PyTorch's; ``jobs show``
    lists it. The run was told its nodes' vendor and backend by the registry."""
    import onnxruntime

    job_id = reference["job"]
    exported: dict[str, Any] = mesh.show(job_id)["export"]  # type: ignore[assignment]
    onnx_file = mesh.cwd / "checkpoints" / job_id / "model.onnx"
    assert exported["path"] == f"file://{onnx_file}"
    assert (exported["format"], exported["error"], exported["attempt"]) == ("onnx", None, 1)
    assert exported["bytes"] == onnx_file.stat().st_size
    checked = exported["checked"]
    assert (checked["samples"], checked["rtol"], checked["atol"]) == (8, 1e-4, 1e-5)
    assert checked["max_abs_diff"] <= 1e-4
    onnxruntime.InferenceSession(str(onnx_file), providers=["CPUExecutionProvider"])
    shown = mesh.run("jobs", "show", job_id).stdout
    assert f"artifact: file://{onnx_file} (onnx," in shown
    # the registry's backend for the nodes' vendor, gloo here: the GPUs are emulated
    assert "nvidia (nccl); no GPU runtime here" in mesh.run("jobs", "logs", job_id).stdout


def restore_node(mesh: Mesh, name: str) -> None:
    """Start the killed node again, so the next test has three."""
    cluster = mesh.cluster()
    group = NodeGroup.model_validate(
        {"name": name, "gpus": 1, "cpus": 1, "memory_gib": 2,
         "accelerator": {"model": "A100", "memory_gib": 80}}
    )  # fmt: skip
    agents = NodeAgents(suspect_after_s=SUSPECT_S, dead_after_s=DEAD_S)
    with pytest.MonkeyPatch.context() as patch:  # its agent, like the others, on the fakes
        for key, value in fake_gpus(mesh).items():
            patch.setenv(key, value)
        local.add_node(cluster, name, group, mesh.home / "run", agents)


def test_a_worker_crash_is_recovered_inside_the_attempt_by_ray_train(
    mesh: Mesh, reference: dict[str, Any], tmp_path: Path
) -> None:
    """At its last step: the job ends a second after it resumed, and its record of the
    recovery is whole all the same (it is written from the run's progress files, not left to
    the controller's timing)."""
    out, marker = tmp_path / "weights.json", tmp_path / "crashed-once"
    job_id = train(mesh, "worker-crash", output=str(out), fail_at_step=STEPS - 1,
                   fail_marker=str(marker))  # fmt: skip
    assert mesh.run("jobs", "wait", job_id, "--timeout", str(WAIT_S)).returncode == 0
    assert marker.exists()
    shown = mesh.show(job_id)
    assert shown["attempt"] == 1  # no new attempt: Ray Train restarted the worker in place
    assert final(out)["sha256"] == reference["sha256"]
    [attempt] = training(mesh, job_id)["attempts"]
    assert attempt["restarts"] == 1
    [recovery] = training(mesh, job_id)["recoveries"]
    assert recovery["resumed_from_step"] == STEPS - EVERY - 1  # its last checkpoint's step
    # lost: the steps after that checkpoint up to the last report Ray Train collected before
    # the crash (a report the worker made just before it crashed may go with it, unread)
    assert STEPS - EVERY - 1 < recovery["last_step"] <= STEPS - 2
    assert recovery["steps_lost"] == recovery["last_step"] - recovery["resumed_from_step"]
    assert recovery["detect_s"] is not None
    assert recovery["resume_s"] is not None
    kinds = [e["kind"] for e in shown["events"]]  # type: ignore[index, union-attr]
    assert "train.restarted" in kinds


def test_a_node_killed_mid_training_is_replaced_inside_the_attempt_with_identical_weights(
    mesh: Mesh, reference: dict[str, Any], tmp_path: Path
) -> None:
    """Its driver runs on the pool's head: the controller nominates a free node, Ray Train
    starts the worker there from the latest checkpoint, in the same attempt and Ray job."""
    out = tmp_path / "weights.json"
    # The run must still be training when its node dies: slower steps (the weights do not
    # depend on the pace) leave it 7 s after step 25, and the node dies at once (no grace
    # to shut down in, in which the run went on and finished: a crash has none).
    job_id = train(mesh, "node-kill", output=str(out), step_delay_s=0.2)
    wait_for_step(mesh, job_id, 1)
    [victim] = mesh.show(job_id)["nodes"]
    wait_for_step(mesh, job_id, 25)
    local.remove_node(mesh.cluster(), victim, mesh.home / "run", grace_s=0)  # the node dies
    try:
        assert mesh.run("jobs", "wait", job_id, "--timeout", str(WAIT_S)).returncode == 0
        shown = mesh.show(job_id)
        assert shown["attempt"] == 1  # no new attempt
        assert victim not in shown["nodes"]
        assert final(out)["sha256"] == reference["sha256"]  # bit for bit
        kinds = [e["kind"] for e in shown["events"]]  # type: ignore[index, union-attr]
        assert "job.node-replaced" in kinds
        assert "job.evicted" not in kinds
        [recovery] = training(mesh, job_id)["recoveries"]
        assert recovery["resumed_from_step"] is not None
        assert recovery["steps_lost"] <= EVERY  # at most one checkpoint interval redone
        assert recovery["resume_s"] is not None
        assert recovery["cause"].startswith(f"node {victim} is dead;")
    finally:
        restore_node(mesh, victim)


def test_an_unhealthy_node_is_left_and_the_job_resumes_from_its_checkpoint(
    mesh: Mesh,
) -> None:
    """A long run (it would not finish within the grace it is given to checkpoint): asked to
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
    wait_for_node(mesh, sick, "ready", lambda r: r["state"] == "ready")  # the probe says healthy


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


class TestAHungJob:
    """One story in two stages (each a minute's work on a loaded machine, together more): a
    train job's loop hangs at step 25; no report for its hang timeout gets it evicted; it
    runs again in a new attempt from its checkpoint."""

    @pytest.fixture(scope="class")
    def hung(self, mesh: Mesh, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
        """The job, once the controller has evicted it for its hang."""
        marker = tmp_path_factory.mktemp("hang") / "hung-once"
        job_id = train(mesh, "hang", hang_timeout="8s", hang_at_step=25, hang_marker=str(marker))
        try:
            mesh.until(
                f"{job_id} was never evicted for its hang",
                lambda: "job.evicted" in _kinds(mesh, job_id),
                job_id,
            )
            assert marker.exists()  # it hung where it was told to
            yield job_id
        finally:
            mesh.run("jobs", "cancel", job_id, check=False)  # unless it finished

    def test_no_report_for_its_hang_timeout_evicts_it(self, mesh: Mesh, hung: str) -> None:
        events: list[dict[str, Any]] = mesh.show(hung)["events"]  # type: ignore[assignment]
        assert [e["kind"] for e in events].count("job.evicted") == 1, events
        assert any("no progress report" in e["message"] for e in events), events

    def test_it_resumes_from_its_checkpoint_in_a_new_attempt(self, mesh: Mesh, hung: str) -> None:
        assert mesh.run("jobs", "wait", hung, "--timeout", str(WAIT_S)).returncode == 0
        assert mesh.show(hung)["attempt"] == 2
        assert training(mesh, hung)["attempts"][-1]["resumed_from_step"] >= 19


def _kinds(mesh: Mesh, job_id: str) -> list[str]:
    events: list[dict[str, Any]] = mesh.show(job_id)["events"]  # type: ignore[assignment]
    return [str(e["kind"]) for e in events]


def node_list(mesh: Mesh) -> dict[str, dict[str, Any]]:
    return mesh.nodes()


def wait_for_node(mesh: Mesh, node: str, what: str, ready: Any) -> dict[str, Any]:
    """Until the node's ``nodes list`` row is ``ready``; that row."""

    def row() -> dict[str, Any] | None:
        found = node_list(mesh)[f"onprem/{node}"]
        return found if ready(found) else None

    found: dict[str, Any] = mesh.until(
        lambda: f"{node} never became {what}: {node_list(mesh)[f'onprem/{node}']}", row
    )
    return found


XID = "[ 4242.0] NVRM: Xid (PCI:0000:1b:00): 79, pid=4242, GPU has fallen off the bus.\n"
XID_REASON = "agent: XID 79 on GPU 0000:1b:00"


@dataclass
class Xid:
    """A train job whose node's kernel log reports an XID: the job, the node, its weights."""

    job_id: str
    sick: str
    out: Path


class TestAnXidFoundByTheAgent:
    """One story in stages: a job's node reports an XID; the node leaves service, the job is
    asked to checkpoint, evicted and resumes elsewhere with the weights of an uninterrupted
    run; the operator overrules the agent. Class-scoped, so the node is healthy again before
    the module's next test."""

    @pytest.fixture(scope="class")
    def xid(self, mesh: Mesh, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Xid]:
        out = tmp_path_factory.mktemp("xid") / "weights.json"
        # slow enough to outlive the grace a job on an unhealthy node has to checkpoint
        job_id = train(mesh, "xid", output=str(out), step_delay_s=0.3)
        wait_for_step(mesh, job_id, 12)
        [sick] = mesh.show(job_id)["nodes"]
        kernel_log = mesh.cwd / "gpus" / f"{sick}.kmsg"
        kernel_log.write_text(XID)
        try:
            yield Xid(job_id, sick, out)
        finally:
            kernel_log.unlink()  # the node rebooted: its kernel log starts afresh
        wait_for_node(mesh, sick, "healthy", lambda r: r["agent"]["verdict"] == "healthy")

    def test_its_node_leaves_service_with_the_xid_as_the_reason(self, mesh: Mesh, xid: Xid) -> None:
        row = wait_for_node(mesh, xid.sick, "unhealthy", lambda r: r["state"] == "unhealthy")
        assert row["reason"] == XID_REASON

    def test_the_job_resumes_elsewhere_with_identical_weights(
        self, mesh: Mesh, xid: Xid, reference: dict[str, Any]
    ) -> None:
        assert mesh.run("jobs", "wait", xid.job_id, "--timeout", str(WAIT_S)).returncode == 0
        shown = mesh.show(xid.job_id)
        assert shown["attempt"] == 2, shown["events"]
        assert xid.sick not in shown["nodes"]
        kinds = [e["kind"] for e in shown["events"]]  # type: ignore[index, union-attr]
        assert "job.checkpoint-request" in kinds
        assert "job.evicted" in kinds
        assert final(xid.out)["sha256"] == reference["sha256"]  # bit for bit
        row = node_list(mesh)[f"onprem/{xid.sick}"]
        assert row["state"] == "unhealthy"
        assert row["reason"] == XID_REASON
        assert row["agent"]["verdict"] == "unhealthy"

    def test_the_operator_overrules_its_agent(self, mesh: Mesh, xid: Xid) -> None:
        mesh.run("nodes", "health", xid.sick, "--healthy")
        row = wait_for_node(mesh, xid.sick, "ready", lambda r: r["state"] == "ready")
        assert row["agent"]["verdict"] == "unhealthy"  # the agent still says so


def test_a_silent_agent_makes_its_node_suspect_then_dead_and_back_when_it_answers(
    mesh: Mesh,
) -> None:
    job_id = train(mesh, "silent", steps=2000)
    wait_for_step(mesh, job_id, 5)
    [node] = mesh.show(job_id)["nodes"]
    [agent] = [p.pid for p in mesh.cluster().processes if p.node == node and _is_agent(p.pid)]
    uri = f"file://{mesh.cwd / 'checkpoints' / job_id}"
    os.kill(agent, signal.SIGSTOP)  # hung: its port accepts, nothing answers
    try:
        row = wait_for_node(mesh, node, "suspect", lambda r: r["agent"]["verdict"] != "healthy")
        assert row["agent"]["verdict"] == "suspect", row
        assert row["state"] == "ready"  # no new work goes there; what runs stays
        row = wait_for_node(mesh, node, "dead", lambda r: r["state"] == "unhealthy")
        assert row["reason"] == f"agent: silent for over {DEAD_S} s"
        # dead to meshctl though Ray lists it: the train job moves inside its attempt, its
        # run ends the worker there (it still runs) and Ray Train restarts it on the stand-in
        deadline = time.monotonic() + WAIT_S
        while (
            (seen := read_progress(uri, 1)) is None
            or not seen["failures"]
            or (seen["failures"][0]["resumed_s"] is None)
        ):
            assert time.monotonic() < deadline, f"the job did not resume: {seen}"
            time.sleep(0.5)
        assert "NodeReplaced" in seen["failures"][0]["error"]
        shown = mesh.show(job_id)
        assert node not in shown["nodes"]
        assert shown["attempt"] == 1
        assert read_progress(uri, 2) is None
        kinds = [e["kind"] for e in shown["events"]]  # type: ignore[index, union-attr]
        assert "job.node-replaced" in kinds
        assert "job.evicted" not in kinds
    finally:
        os.kill(agent, signal.SIGCONT)
        mesh.run("jobs", "cancel", job_id, check=False)
    row = wait_for_node(mesh, node, "ready", lambda r: r["state"] == "ready")
    assert row["agent"]["verdict"] == "healthy"


def test_two_half_gpu_jobs_share_one_gpu_and_a_third_waits(mesh: Mesh, tmp_path: Path) -> None:
    """One node in service (the others cordoned): two 0.5-GPU jobs run on its GPU together,
    Ray holding half of it for each (the same GPU in CUDA_VISIBLE_DEVICES); a third waits.
    Each runs until the test releases it: how fast jobs start on a loaded machine decides
    nothing."""
    release = tmp_path / "release"
    names = sorted(n.split("/", 1)[1] for n in node_list(mesh))
    for name in names[1:]:
        mesh.run("nodes", "cordon", name)
    program = (
        "import os, time; print('GPU', os.environ['CUDA_VISIBLE_DEVICES'], flush=True); "
        f"[time.sleep(0.2) for _ in iter(lambda: os.path.exists({str(release)!r}), True)]"
    )
    try:
        jobs = [mesh.submit("--gpus", "0.5", "--", "python", "-c", program) for _ in range(3)]
        mesh.until(
            "the two halves never ran together",
            lambda: [mesh.state(j) for j in jobs[:2]] == ["running", "running"],
        )
        assert mesh.state(jobs[2]) in ("pending", "admitted")  # no half GPU left for it
        release.touch()
        for job_id in jobs:
            assert mesh.run("jobs", "wait", job_id).returncode == 0
        assert {n for j in jobs for n in mesh.show(j)["nodes"]} == {names[0]}  # type: ignore[attr-defined]
        seen = [mesh.run("jobs", "logs", j).stdout for j in jobs]
        assert all("GPU 0" in out for out in seen), seen  # Ray gave each the GPU's half
    finally:
        release.touch()
        for name in names[1:]:
            mesh.run("nodes", "uncordon", name)


def _is_agent(pid: int) -> bool:
    try:
        return b"agent\0run" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def _is_driver(pid: int, job_id: str) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False
    return (
        "meshctl.workload.train.run" in cmdline and f"MESHCTL_JOB_ID={job_id}".encode() in environ
    )


def signal_pid(pid: int) -> None:
    import contextlib
    import os

    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
