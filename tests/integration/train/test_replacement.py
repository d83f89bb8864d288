"""A train run whose node dies starts its workers again on a nominated node, inside the same
Ray job, and ends with bit for bit the weights of a run that lost nothing.

A real Ray cluster (``meshctl.pools.local``: a head that takes no work, three 1-CPU nodes)
runs ``python -m meshctl.workload.train.run`` as a Ray job whose driver, and so Ray Train's
controller, is on the head; its one worker is pinned to one node. The test loses that node mid-run
and plays the controller's part:

- killed: Ray sees it dead; the run asks for a replacement, the test nominates one;
- stopped (SIGSTOP, every process of the node: silent, Ray still lists it alive for about a
  minute): the test nominates a replacement unasked, as the controller does once the node's
  agent has been silent too long; the run ends the worker there and starts it on the new one.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from meshctl.model.mesh import NodeGroup
from meshctl.pools import local
from meshctl.pools.checkpoints import read_progress
from meshctl.pools.observed import ROLE_LABEL, Submission
from meshctl.pools.ray import RayPoolClient
from meshctl.workload.train import nominations
from tests.conftest import ROOT, wait_until

sys.path.insert(0, str(ROOT / "benchmarks"))
import node_loss  # benchmarks/: how the recovery benchmark stops a node

pytestmark = pytest.mark.integration

WAIT_S = 240.0
STEPS, EVERY = 60, 10
NODE_ID = "ray.io/node-id"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[local.LocalCluster, Path]]:
    run_dir = tmp_path_factory.mktemp("replacement-run")
    started = local.start_head("replacement", run_dir)
    try:
        group = NodeGroup.model_validate({"name": "n", "count": 3, "cpus": 1, "memory_gib": 2})
        for name in group.node_names():
            local.add_node(started, name, group, run_dir)
        yield started, run_dir
    finally:
        local.stop(started)


def client(cluster: local.LocalCluster) -> RayPoolClient:
    return RayPoolClient("replacement", cluster.dashboard, cluster.token)


def node_ids(cluster: local.LocalCluster) -> dict[str, str]:
    seen = client(cluster).observe()
    assert seen.reachable, seen.why
    return {n.name: n.ray_node_id for n in seen.nodes if n.alive and not n.head}


def submit(cluster: local.LocalCluster, name: str, storage: Path, out: Path, pin: str) -> str:
    spec = {
        "loop": "model:train_loop",
        "workers": 1,
        "workers_per_node": 1,
        "per_worker": {"CPU": 0.5},
        "node_label": NODE_ID,
        "node_ids": [pin],
        "run_name": name,
        "storage": f"file://{storage}",
        "max_failures": 3,
        "keep": 3,
        "replace_wait_s": 120,
        "config": {"steps": STEPS, "checkpoint_every_steps": EVERY, "step_delay_s": 0.1,
                   "output": str(out)},
    }  # fmt: skip
    env = {
        "MESHCTL_TRAIN": json.dumps(spec),
        "MESHCTL_ATTEMPT": "1",
        "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.1",
        "MESHCTL_POOL_MTBF_S": str(365 * 24 * 3600),
    }
    submission = Submission(
        submission_id=f"replacement-{name}",
        entrypoint=f"{sys.executable} -m meshctl.workload.train.run",
        runtime_env={"working_dir": str(ROOT / "examples" / "train"), "env_vars": env},
        metadata={},
        label_selector={ROLE_LABEL: "head"},  # the driver and Ray Train's controller
    )
    client(cluster).submit(submission)
    return submission.submission_id


def finished(cluster: local.LocalCluster, submission_id: str) -> str:
    deadline = time.monotonic() + WAIT_S
    while True:
        job = client(cluster).job(submission_id)
        if job is not None and job.status in ("SUCCEEDED", "FAILED", "STOPPED"):
            return job.status
        assert time.monotonic() < deadline, f"{submission_id}: {job}"
        time.sleep(0.5)


def reached(uri: str, step: int) -> None:
    wait_until(
        lambda: f"step {step} never reported: {read_progress(uri, 1)}",
        lambda: ((read_progress(uri, 1) or {}).get("step") or 0) >= step,
        WAIT_S,
        every_s=0.25,
    )


def wait_resumed(uri: str) -> None:
    """Until the run has reported again after its first failure."""
    wait_until(
        lambda: f"the run never resumed: {read_progress(uri, 1)}",
        lambda: any(
            f.get("resumed_s") is not None
            for f in (read_progress(uri, 1) or {}).get("failures") or []
        ),
        WAIT_S,
        every_s=0.25,
    )


def asked(uri: str) -> nominations.Ask:
    waiting = wait_until(
        "the run never asked for a replacement",
        lambda: nominations.requests(uri, None, 1),
        WAIT_S,
        every_s=0.25,
    )
    [request] = waiting
    return request


def weights(path: Path) -> Any:
    return json.loads(path.read_text())["sha256"]


@pytest.fixture(scope="module")
def reference(
    cluster: tuple[local.LocalCluster, Path], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    """A run that lost nothing: its weights (the loop is seeded: every run of it ends with
    them), which both tests' runs must match, and where it recorded its progress."""
    ray_cluster, _ = cluster
    folder = tmp_path_factory.mktemp("reference")
    first = submit(ray_cluster, "reference", folder / "ckpt", folder / "out.json",
                   node_ids(ray_cluster)["n-2"])  # fmt: skip
    assert finished(ray_cluster, first) == "SUCCEEDED"
    return {
        "sha256": weights(folder / "out.json"),
        "uri": f"file://{folder / 'ckpt' / 'reference'}",
    }


def test_the_reference_run_lost_nothing(reference: dict[str, Any]) -> None:
    """The module's first test (its cluster and the reference run are its set-up): the run
    the others are compared with reported every step once, from scratch, and failed never."""
    progress = read_progress(reference["uri"], 1)
    assert progress is not None
    assert (progress["step"], progress["failures"]) == (STEPS - 1, [])
    assert [c["step"] for c in progress["checkpoints"]][-1] == STEPS - 1


def test_a_node_lost_mid_run_is_replaced_inside_the_ray_job_with_identical_weights(
    cluster: tuple[local.LocalCluster, Path], reference: dict[str, Any], tmp_path: Path
) -> None:
    ray_cluster, run_dir = cluster
    ids = node_ids(ray_cluster)
    out = tmp_path / "replaced.json"
    job = submit(ray_cluster, "replaced", tmp_path / "ckpt", out, ids["n-0"])
    uri = f"file://{tmp_path / 'ckpt' / 'replaced'}"
    reached(uri, 25)
    local.remove_node(ray_cluster, "n-0", run_dir)  # the node dies, the driver lives
    request = asked(uri)
    assert (request.lost, request.node_ids) == ((ids["n-0"],), (ids["n-0"],))
    nominations.nominate(uri, None, 1, (ids["n-1"],))

    assert finished(ray_cluster, job) == "SUCCEEDED"  # one Ray job: no new attempt
    assert weights(out) == reference["sha256"]  # bit for bit
    progress = read_progress(uri, 1)
    assert progress is not None
    [failure] = progress["failures"]
    assert failure["resumed_s"] is not None
    starts = sorted((tmp_path / "ckpt" / "replaced" / ".meshctl").glob("start-1-*.json"))
    resumed = [json.loads(s.read_text())["checkpoint"] for s in starts]
    assert len(resumed) == 2
    assert resumed[0] is None  # from scratch, then from its latest checkpoint
    assert resumed[1] is not None


def test_a_silent_node_the_controller_replaces_is_left_inside_the_ray_job_with_identical_weights(
    cluster: tuple[local.LocalCluster, Path], reference: dict[str, Any], tmp_path: Path
) -> None:
    ray_cluster, run_dir = cluster
    ids = node_ids(ray_cluster)
    out = tmp_path / "replaced.json"
    job = submit(ray_cluster, "silent", tmp_path / "ckpt", out, ids["n-1"])
    uri = f"file://{tmp_path / 'ckpt' / 'silent'}"
    reached(uri, 25)
    stopped: list[local.Process] = []
    try:
        node_loss.stop_node(ray_cluster, "n-1", stopped)  # hung: nothing exits or answers
        nominations.nominate(uri, None, 1, (ids["n-2"],))  # the controller, unasked
        wait_resumed(uri)
        silent = {n.name for n in client(ray_cluster).observe().nodes if n.alive}
        assert "n-1" in silent, "Ray declared n-1 dead before the run resumed: it waited"
        assert finished(ray_cluster, job) == "SUCCEEDED"  # one Ray job, on n-2
    finally:
        for process in stopped:
            if local.start_ticks(process.pid) == process.start_ticks:
                os.kill(process.pid, signal.SIGKILL)
        local.remove_node(ray_cluster, "n-1", run_dir)
    assert weights(out) == reference["sha256"]  # bit for bit
    progress = read_progress(uri, 1)
    assert progress is not None
    [failure] = progress["failures"]
    assert "NodeReplaced" in failure["error"]
    assert failure["resumed_s"] is not None
    assert nominations.requests(uri, None, 1) == []  # nominated before it had to ask
