"""The embedded mesh for real: `meshctl up` starts a local Ray cluster (a head and two emulated
4-GPU nodes) and the controller daemon; jobs go through the real CLI, Ray Jobs API and store.

One mesh is shared by the whole module (starting one takes about 10 s); the last test brings
it down (refused while a job runs, then with --force), checks that no process it started is
left, and reads the jobs' logs from meshctl's copies. Every meshctl process here runs under
a loose umask (002), so the state folder's modes are meshctl's doing.
"""

from __future__ import annotations

import json
import os
import re
import signal
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from meshctl.app.remote import api_socket
from meshctl.controller import daemon
from meshctl.pools import driverlogs, local
from meshctl.pools.ray import RayPoolClient
from meshctl.state import AttemptRecord, JobRecord, JobState, PoolRecord, open_store
from meshctl.workload.exits import exit_status
from tests.conftest import wait_until
from tests.emulators.gate import NO_AGENT, Gate
from tests.integration.meshes import WAIT_S, Mesh

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
JOBS = ROOT / "examples" / "jobs"


@pytest.fixture(scope="module")
def mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mesh]:
    base = tmp_path_factory.mktemp("mesh")
    m = Mesh(base / "home", base)
    m.run("up")
    try:
        yield m
    finally:
        m.run("down", "--force", check=False)  # whatever a failed test left running


def test_up_starts_every_node_of_the_pool_and_the_controller(mesh: Mesh) -> None:
    """First, so that it carries the mesh's start: what `up` started, as status sees it."""
    assert daemon.running(mesh.home) is not None
    nodes = mesh.nodes()
    assert {name for name, node in nodes.items() if node.get("alive")} == {
        "onprem/gpu-rack1", "onprem/gpu-rack2", "onprem/mi300x",
    }  # fmt: skip
    assert [p.node for p in mesh.cluster().processes][:1] == ["head"]


def test_a_job_runs_to_success_and_its_logs_come_back(mesh: Mesh) -> None:
    job_id = mesh.submit("--gpus", "1", "--", "python", "-c", "print('hello from meshctl')")
    assert mesh.run("jobs", "wait", job_id).returncode == 0
    said = mesh.run("jobs", "logs", job_id).stdout
    assert "hello from meshctl" in said
    # the job's own last line is its exit line (meshctl/workload/exits.py); Ray may write its
    # "Running entrypoint for job ..." line after a quick job's output
    own = [line for line in said.splitlines() if not line.startswith("Running entrypoint for job ")]
    assert own[-1] == "[meshctl: the job exited 0]"
    shown = mesh.show(job_id)
    assert shown["state"] == "succeeded"
    assert [e["kind"] for e in shown["events"]][:3] == [
        "job.pending",
        "job.admitted",
        "job.dispatched",
    ]  # type: ignore[index]


def test_a_failed_job_s_reason_is_its_own_last_words(mesh: Mesh) -> None:
    """Ray's message quotes the log's last lines; meshctl's exit line is not among them."""
    job_id = mesh.submit("--gpus", "1", "--", "sh", "-c", "echo 'boom: out of ideas' >&2; exit 3")
    assert mesh.run("jobs", "wait", job_id, check=False).returncode != 0
    shown = mesh.show(job_id)
    assert shown["state"] == "failed"
    assert shown["attempts"][-1]["reason"].rstrip().endswith("boom: out of ideas")  # type: ignore[index]
    said = mesh.run("jobs", "logs", job_id).stdout
    assert said.rstrip().endswith("[meshctl: the job exited 3]")


def test_ray_holds_the_gpu_memory_and_nic_a_job_claims(mesh: Mesh) -> None:
    """Each embedded node declares its GPUs' memory and its NIC to Ray as custom resources;
    a job's entrypoint claims its share of them, so Ray too refuses to over-commit them."""
    client = mesh.ray()
    nodes = {n.name: n for n in client.nodes() if n.alive}
    assert nodes["gpu-rack1"].claimable == {"gpu_memory_gib": 320.0, "nic_gbps": 200.0}
    job_id = mesh.submit("--gpus", "1", "--", "python", "-c", "import time; time.sleep(600)")
    try:
        mesh.wait_for(job_id, "running")
        [node] = mesh.show(job_id)["nodes"]  # type: ignore[misc]
        held = wait_until(
            "Ray never counted the job's GPU memory",
            lambda: "80.0/320.0 gpu_memory_gib" in summary(client, nodes[str(node)].ray_node_id),
            WAIT_S,
            every_s=0.5,
        )
        assert held
    finally:
        mesh.run("jobs", "cancel", job_id)


def summary(client: RayPoolClient, node_id: str) -> str:
    """What Ray says is taken of each resource on the node ("80.0/320.0 gpu_memory_gib")."""
    body = client._request("GET", "/nodes?view=summary")
    return str(body["data"]["nodeLogicalResources"].get(node_id, ""))


# A Ray program given inline, as people paste one: several statements, far longer than a job
# name may be; the job is named after the interpreter (its text makes no name).
LONG_PROGRAM = (
    "import ray; ray.init(); "
    "square = ray.remote(num_cpus=0.05)(lambda x: x * x); "
    "total = sum(ray.get([square.remote(i) for i in range(4)])); "
    "print('RESULT: sum of squares', total); "
    "assert total == 14, total"
)


def test_a_long_inline_ray_program_runs_to_success(mesh: Mesh) -> None:
    job_id = mesh.submit("--gpus", "1", "--", "python", "-c", LONG_PROGRAM)
    assert job_id.startswith("python-")
    assert mesh.run("jobs", "wait", job_id).returncode == 0
    assert "RESULT: sum of squares 14" in mesh.run("jobs", "logs", job_id).stdout


def test_a_gang_bigger_than_any_node_runs_across_two(mesh: Mesh) -> None:
    # its dataset (s3://corpus/web-v3, no endpoint_url) is not listed: no S3 reachable here
    job_id = mesh.submit(str(JOBS / "gang-llm.yaml"), "--no-data-check")
    assert mesh.run("jobs", "wait", job_id).returncode == 0
    assert set(mesh.show(job_id)["nodes"]) == {"gpu-rack1", "gpu-rack2"}  # type: ignore[call-overload]
    logs = mesh.run("jobs", "logs", job_id).stdout
    assert "RESULT: gang of 2 ranks on" in logs
    assert logs.count("[meshctl: the job exited 0]") == 1  # its placement wrapper's: at once


def test_a_job_that_can_never_fit_is_rejected_at_submit(mesh: Mesh) -> None:
    done = mesh.run("submit", "--gpus", "16", "--", "python", "-c", "pass", check=False)
    assert done.returncode == 2
    assert "can never run on this mesh" in done.stderr
    assert "Traceback" not in done.stderr


def test_cancel_stops_a_running_job(mesh: Mesh) -> None:
    job_id = mesh.submit("--gpus", "1", "--", "python", "-c", "import time; time.sleep(600)")
    mesh.wait_for(job_id, "running")
    assert mesh.run("jobs", "cancel", job_id).returncode == 0
    assert mesh.run("jobs", "wait", job_id, check=False).returncode == 1
    sid = f"meshctl-{job_id}-1"

    def stopped() -> bool:
        seen = mesh.ray().job(sid)
        return seen is not None and seen.status == "STOPPED"

    wait_until(
        lambda: f"Ray job {sid} was not stopped: {mesh.ray().job(sid)}", stopped, WAIT_S, 0.5
    )


def test_a_cordoned_node_gets_no_new_work(mesh: Mesh) -> None:
    mesh.run("nodes", "cordon", "gpu-rack1")
    try:
        job_id = mesh.submit("--gpus", "1", "--", "python", "-c", "pass")
        assert mesh.run("jobs", "wait", job_id).returncode == 0
        [node] = mesh.show(job_id)["nodes"]
        # either other node may take it (gpu-rack2 or mi300x: which one is free to the
        # scheduler depends on how soon Ray reports the last test's GPUs free)
        assert node in ("gpu-rack2", "mi300x")
    finally:
        mesh.run("nodes", "uncordon", "gpu-rack1")


def test_sigkill_between_submit_and_record_runs_the_job_exactly_once(mesh: Mesh) -> None:
    daemon.stop(mesh.home)
    args = ["--home", str(mesh.home), "controller", "run", "--interval", "0.5"]
    pid = daemon.start(mesh.home, args, env={"MESHCTL_FAILPOINT": "after-submit"})
    job_id = mesh.submit("--gpus", "1", "--", "python", "-c", "print('ran once')")
    # it kills itself right after submitting
    wait_until("the failpoint never fired", lambda: daemon.running(mesh.home) != pid, WAIT_S)
    with open_store(mesh.home) as store:
        [attempt] = store.list(AttemptRecord, job_id=job_id)
        assert attempt.state == "submitting"  # Ray has it; the store does not know yet
        assert store.get(JobRecord, job_id).state is JobState.ADMITTED  # type: ignore[union-attr]
    assert mesh.ray().job(attempt.submission_id) is not None
    mesh.run("up")  # the pool is up already; this restarts the controller
    assert mesh.run("jobs", "wait", job_id).returncode == 0
    submissions = [sid for sid in mesh.ray().jobs() if sid.startswith(f"meshctl-{job_id}-")]
    assert submissions == [attempt.submission_id]
    assert mesh.run("jobs", "logs", job_id).stdout.splitlines().count("ran once") == 1


def _ray_pool_mesh(path: Path, address: str, token_file: str) -> Path:
    """A mesh.yaml of one pool, ``lab``: the Ray cluster at ``address`` (provider ray)."""
    path.write_text(
        "apiVersion: meshctl/v1\nkind: Mesh\nmetadata: {name: lab}\nspec:\n  pools:\n"
        f"    - {{name: lab, provider: ray, address: '{address}',\n"
        f"       auth: {{token_file: '{token_file}'}}}}\n"
    )
    return path


def test_a_mesh_naming_an_existing_ray_cluster_drives_it(mesh: Mesh, tmp_path: Path) -> None:
    """A second meshctl home whose mesh.yaml names the running cluster (provider: ray, its
    address and token): the same commands submit there, and its `down` stops only its own
    controller, never the cluster it did not start."""
    cluster = mesh.cluster()
    remote = _ray_pool_mesh(tmp_path / "remote.yaml", cluster.dashboard, cluster.token_file)
    other = Mesh(tmp_path / "home", tmp_path)
    assert "existing Ray cluster" in other.run("--mesh", str(remote), "up").stdout
    try:
        job_id = other.submit("--gpus", "2", "--", "python", "-c", "print('via the ray pool')")
        assert other.run("jobs", "wait", job_id).returncode == 0
        assert other.show(job_id)["pool"] == "lab"
        assert "via the ray pool" in other.run("jobs", "logs", job_id).stdout
        too_big = other.run("submit", "--gpus", "9", "--", "python", "-c", "pass", check=False)
        assert too_big.returncode == 2  # judged against the cluster's own nodes
    finally:
        other.run("down")
    assert local.running(cluster)  # the cluster it only used is still up


def test_a_gang_placed_before_the_head_s_job_agent_is_up_waits_and_runs(
    mesh: Mesh, tmp_path: Path
) -> None:
    """A Ray cluster whose head's job agent is not up yet (or restarting) answers every job
    submission "500: No available agent to submit job, please try again later" (a gate in
    front of its dashboard says it, as Ray does). The gang placed meanwhile waits, saying what
    for, is sent again each cycle, and runs once the agent answers; it never fails. The pool
    is shown degraded meanwhile, with Ray's words."""
    cluster = mesh.cluster()
    with Gate(cluster.dashboard) as gate:
        gate.refuse("POST", "/api/jobs/", 500, NO_AGENT)
        remote = _ray_pool_mesh(tmp_path / "gated.yaml", gate.address, cluster.token_file)
        other = Mesh(tmp_path / "home", tmp_path)
        other.run("--mesh", str(remote), "up", "--interval", "0.5")
        try:
            job_id = other.submit("--nodes", "2", "--gpus", "1", "--", "python", "-c",
                                  "print('the gang ran')")  # fmt: skip
            other.until(
                "the gang waiting for its pool, refused at least twice; the pool degraded",
                lambda: (
                    len(gate.refused) >= 2
                    and NO_AGENT in _attempt_reason(other, job_id)
                    and _pool_state(other, "lab") == "degraded"
                ),
                job_id,
            )
            assert other.show(job_id)["state"] == "admitted"  # placed, waiting: not failed
            [lab] = json.loads(other.run("status", "-o", "json").stdout)["pools"]
            assert lab["state"].startswith("degraded: "), lab
            assert NO_AGENT in lab["state"], lab
            assert lab["available"] is True  # still placed on: its jobs wait there
            gate.open()  # the job agent is up
            assert other.run("jobs", "wait", job_id, check=False).returncode == 0, other.story(
                job_id
            )
            assert "the gang ran" in other.run("jobs", "logs", job_id).stdout
        finally:
            other.run("down")


def _pool_state(mesh: Mesh, pool: str) -> str | None:
    with mesh.store() as store:
        record = store.get(PoolRecord, pool)
    return record.state if record else None


def _attempt_reason(mesh: Mesh, job_id: str) -> str:
    attempts: list[dict[str, Any]] = mesh.show(job_id)["attempts"]  # type: ignore[assignment]
    return str(attempts[-1]["reason"]) if attempts else ""


def test_lines_printed_by_ray_tasks_reach_the_log_once(mesh: Mesh, tmp_path: Path) -> None:
    """Every node of the embedded cluster runs on this machine and shares one log folder;
    with a log monitor on each, a task's line reached the driver once per node."""
    (tmp_path / "tasks.py").write_text(
        "import ray\n"
        "ray.init()\n"
        "@ray.remote(num_cpus=0.1)\n"
        "def say(i):\n"
        "    print(f'task line {i}', flush=True)\n"
        "ray.get([say.remote(i) for i in range(3)])\n"
        "print('driver done')\n"
    )
    job_id = mesh.submit("--gpus", "1", "--working-dir", str(tmp_path), "--", "python", "tasks.py")
    assert mesh.run("jobs", "wait", job_id).returncode == 0
    said = mesh.run("jobs", "logs", job_id).stdout
    lines = re.findall(r"task line \d", said)  # each behind Ray's "(say pid=...)" prefix
    assert sorted(lines) == ["task line 0", "task line 1", "task line 2"], said


ON_EVERY_NODE = """\
import os, ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
ray.init()
mine = ray.get_runtime_context().get_node_id()
@ray.remote(num_cpus=0)
def where():
    return os.getcwd()
for node in [n["NodeID"] for n in ray.nodes() if n["Alive"] and n["NodeID"] != mine]:
    ray.get(where.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, False)).remote())
try:
    print("the driver's folder is there:", os.getcwd(), flush=True)
except FileNotFoundError:
    print("the driver's folder is gone", flush=True)
import torch  # oneMKL dies loading it in a deleted folder
print("torch:", (torch.ones(2, 2) @ torch.ones(2, 2)).sum().item(), flush=True)
"""


def test_a_job_s_folder_outlives_its_tasks_on_the_other_nodes(mesh: Mesh, tmp_path: Path) -> None:
    """Every node here shares the head's session folder: each node's runtime-env agent used
    to unpack an uploaded working_dir there afresh, deleting the folder the job's driver ran
    in, and PyTorch then died loading ("Intel oneMKL FATAL ERROR: Cannot load
    libtorch_cpu.so"). The job's folder is now read in place, on every node."""
    (tmp_path / "everywhere.py").write_text(ON_EVERY_NODE)
    job_id = mesh.submit("--gpus", "1", "--working-dir", str(tmp_path), "--", "python",
                         "everywhere.py")  # fmt: skip
    done = mesh.run("jobs", "wait", job_id, check=False)
    said = mesh.run("jobs", "logs", job_id).stdout
    assert "the driver's folder is there" in said, said
    assert "torch: 8.0" in said, said
    assert done.returncode == 0, mesh.story(job_id)


def test_the_state_folder_is_private(mesh: Mesh) -> None:
    """What up, submit and the controller wrote (store and WAL, run files, tokens, process
    logs, log copies, packages): folders 0700, files 0600, under a umask of 002."""
    loose = []
    for folder, dirs, files in os.walk(mesh.home):
        for name in (".", *dirs, *files):
            path = Path(folder) / name
            if path.is_symlink():  # its own mode means nothing (a node cache's current/ links)
                continue
            try:
                mode = stat.S_IMODE(path.lstat().st_mode)
            except FileNotFoundError:  # a heartbeat's temporary file, renamed meanwhile
                continue
            if mode != (0o700 if path.is_dir() else 0o600):
                loose.append(f"{path.relative_to(mesh.home)}: {mode:o}")
    assert loose == []
    names = {p.name for p in mesh.home.rglob("*")}
    assert {"state.db-wal", "pool-onprem.token", "controller.heartbeat", "tasks.py"} <= names
    assert any(p.suffix == ".log" for p in (mesh.home / "logs").rglob("*"))


def test_a_job_that_ended_unseen_before_its_cluster_restarted_is_done_not_run_again(
    mesh: Mesh, tmp_path: Path
) -> None:
    """The job ends while the controller is away, then the cluster is restarted: Ray's job
    table goes with its head. The job's driver log, kept when its cluster stopped, ends with
    its exit (meshctl/workload/exits.py): the controller that comes back finds the job done, in one
    attempt, and never runs it again."""
    ran, go = tmp_path / "ran", tmp_path / "go"
    script = f"while [ ! -e {go} ]; do sleep 0.1; done; echo ran >> {ran}"
    job_id = mesh.submit("--gpus", "1", "--", "sh", "-c", script)
    mesh.wait_for(job_id, "running")
    daemon.stop(mesh.home)  # nothing sees the job end
    go.touch()
    cluster = mesh.cluster()
    wait_until(
        "the job's driver log never recorded its exit",
        lambda: (
            (log := driverlogs.find(cluster.temp_dir, None, f"meshctl-{job_id}-1")) is not None
            and exit_status(log.read_bytes()[-64:]) == 0
        ),
        WAIT_S,
        every_s=0.2,
    )
    local.stop(cluster)  # its head and nodes, and their temp folder
    mesh.run("up")  # a new cluster, which knows no job; the controller again
    mesh.wait_for(job_id, "succeeded")
    assert ran.read_text() == "ran\n"  # once
    shown = mesh.show(job_id)
    assert [a["state"] for a in shown["attempts"]] == ["succeeded"]  # type: ignore[union-attr]
    assert "job.evicted" not in [e["kind"] for e in shown["events"]]  # type: ignore[union-attr]


def test_a_node_whose_raylet_was_killed_fails_pools_check_and_up_starts_it_again(
    mesh: Mesh,
) -> None:
    """Reported: with a node's raylet and agent killed, up said "already up" (exit 0) and
    pools check passed the pool."""
    cluster = mesh.cluster()
    sessions = [p.pid for p in cluster.processes if p.node == "gpu-rack2"]
    assert len(sessions) == 2  # its agent, and ray start with the raylet under it
    for pid in [member for sid in sessions for member in local.session_members(sid)]:
        os.kill(pid, signal.SIGKILL)
    wait_until(
        "the node's processes outlived SIGKILL",
        lambda: not [pid for sid in sessions for pid in local.session_members(sid)],
        WAIT_S,
        every_s=0.2,
    )
    checked = mesh.run("pools", "check", "onprem", check=False)
    assert checked.returncode == 1, checked.stdout
    assert "dead: gpu-rack2" in checked.stdout
    started = mesh.run("up")
    assert "pool onprem: up; started again: gpu-rack2" in started.stdout
    assert mesh.run("pools", "check", "onprem").returncode == 0
    wait_until(  # the controller sees the new node (a new Ray id, the same name) alive
        "gpu-rack2 never came back in nodes list",
        lambda: mesh.nodes().get("onprem/gpu-rack2", {}).get("alive") is True,
        WAIT_S,
        every_s=0.5,
    )


def test_down_refuses_while_a_job_runs_force_requeues_it_and_logs_outlive_it(
    mesh: Mesh,
) -> None:
    quick = mesh.submit("--gpus", "1", "--", "python", "-c", "print('short and done')")
    assert mesh.run("jobs", "wait", quick).returncode == 0
    script = "import time; print('sleeping now', flush=True); time.sleep(600)"
    job_id = mesh.submit("--gpus", "1", "--", "python", "-c", script)
    mesh.wait_for(job_id, "running")  # its driver runs in a session Ray made for it
    copy = mesh.home / "logs" / job_id / "1.log"
    wait_until(
        "the controller never copied the running job's log",
        lambda: copy.is_file() and b"sleeping now" in copy.read_bytes(),
        WAIT_S,
        every_s=0.5,
    )
    cluster = mesh.cluster()
    controller = daemon.running(mesh.home)
    assert controller is not None
    assert api_socket(mesh.home).exists()  # the home's local API, beside the controller

    refused = mesh.run("down", check=False)
    assert refused.returncode == 1
    assert f"1 job ({job_id}) running on onprem; nothing was stopped" in refused.stderr
    assert local.running(cluster)
    assert daemon.running(mesh.home) == controller

    before = local.leftover(cluster)  # the nodes' processes and their children, drivers too
    done = mesh.run("down", "--force")
    assert f"requeued (they run again at the next meshctl up): {job_id}" in done.stdout
    assert local.leftover(cluster) == []
    assert [pid for pid in before if not local.zombie(pid)] == []
    assert local.session_members(controller) == []  # the local API too
    assert not (mesh.home / "run" / "pool-onprem.json").exists()
    assert not api_socket(mesh.home).exists()

    shown = mesh.show(job_id)
    assert shown["state"] == "requeued"
    assert shown["attempts"][0]["reason"] == "stopped by meshctl down --force"  # type: ignore[index]
    # the pools are gone: the logs come from meshctl's copies
    assert "short and done" in mesh.run("jobs", "logs", quick).stdout
    assert "sleeping now" in mesh.run("jobs", "logs", job_id).stdout
