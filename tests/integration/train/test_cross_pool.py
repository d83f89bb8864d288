"""A run started in one pool finishes in another: both pools keep checkpoints in S3
(moto_server, reached directly rather than through the EC2 fault proxy; Ray Train writes
through pyarrow's S3 filesystem with an endpoint override). The job's node in the first pool
dies; the controller requeues it, the only free GPU is in the other pool, and the run resumes
there from its latest checkpoint in S3 under the same run name."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from meshctl.pools import local
from meshctl.pools.checkpoints import read_progress
from tests.conftest import ROOT
from tests.emulators.aws import MotoServer
from tests.integration.meshes import WAIT_S, Mesh

pytestmark = pytest.mark.integration

AWS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}
POOL = """\
    - name: {name}
      provider: local
      checkpoint_storage: {{uri: "s3://checkpoints/runs", endpoint_url: "{endpoint}"}}
      nodes:
        - {{name: {name}-gpu, gpus: 1, cpus: 1, memory_gib: 2GiB,
           accelerator: {{model: A100, memory_gib: 80GiB}}}}
"""


@pytest.fixture(scope="module")
def two_pools(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Mesh, MotoServer]]:
    import boto3

    base = tmp_path_factory.mktemp("cross")
    with MotoServer() as moto:
        s3 = boto3.client("s3", endpoint_url=moto.moto, **_keys())
        s3.create_bucket(Bucket="checkpoints")
        pools = "".join(POOL.format(name=n, endpoint=moto.moto) for n in ("east", "west"))
        (base / "mesh.yaml").write_text(
            "apiVersion: meshctl/v1\nkind: Mesh\nmetadata: {name: cross}\nspec:\n  pools:\n" + pools
        )
        mesh = Mesh(base / "home", base)
        mesh.run("--mesh", str(base / "mesh.yaml"), "up", "--interval", "0.5", env=AWS)
        try:
            yield mesh, moto
        finally:
            mesh.run("down", "--force", check=False, env=AWS)


def _keys() -> dict[str, str]:
    return {
        "aws_access_key_id": AWS["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": AWS["AWS_SECRET_ACCESS_KEY"],
        "region_name": AWS["AWS_DEFAULT_REGION"],
    }


def test_a_checkpoint_request_reaches_a_job_whose_checkpoints_are_in_s3(
    two_pools: tuple[Mesh, MotoServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    from meshctl import workload
    from meshctl.pools.checkpoints import request_checkpoint

    _, moto = two_pools
    for key, value in AWS.items():
        monkeypatch.setenv(key, value)
    uri = "s3://checkpoints/runs/asked"
    where = request_checkpoint(uri, {"attempt": 3, "reason": "spot notice"}, moto.moto)
    assert where == f"{uri}/.meshctl/checkpoint-request.json"
    monkeypatch.setenv("MESHCTL_CHECKPOINT_URI", uri)
    monkeypatch.setenv("MESHCTL_CHECKPOINT_ENDPOINT_URL", moto.moto)
    monkeypatch.setenv("MESHCTL_ATTEMPT", "3")
    workload._filesystems.clear()
    request = workload.checkpoint_requested(every_s=0)
    assert request is not None
    assert request["reason"] == "spot notice"


@dataclass
class Moved:
    """The run killed in its first pool: its job, that pool, the step it had reported."""

    job_id: str
    pool: str
    step: int


@pytest.fixture(scope="module")
def moved(two_pools: tuple[Mesh, MotoServer]) -> Moved:
    """A run trains in one pool past step 25 (a checkpoint every 10 steps, to S3); then that
    pool's only GPU node dies."""
    with pytest.MonkeyPatch.context() as env:
        for key, value in AWS.items():
            env.setenv(key, value)  # S3's, for the progress read here and by `jobs show`
        return _killed_in_its_first_pool(*two_pools)


def _killed_in_its_first_pool(mesh: Mesh, moto: MotoServer) -> Moved:
    # slow enough that the run is still training when its node dies (7 s after step 25)
    config = {"steps": 60, "checkpoint_every_steps": 10, "step_delay_s": 0.2}
    args = ["train", "model:train_loop", "--name", "cross", "--no-follow",
            "--cpus-per-worker", "0.5", "--gpus-per-worker", "1", "--memory-per-worker", "512MiB",
            "--working-dir", str(ROOT / "examples" / "train")]  # fmt: skip
    for key, value in config.items():
        args += ["--config", f"{key}={json.dumps(value)}"]
    job_id = mesh.run(*args, env=AWS).stdout.strip().splitlines()[-1]
    uri = f"s3://checkpoints/runs/{job_id}"
    _step(uri, moto, job_id, 1)  # training: where it runs is known, read before the kill
    first = mesh.show(job_id)
    pool, [node] = str(first["pool"]), first["nodes"]
    seen = _step(uri, moto, job_id, 25)
    cluster = local.LocalCluster.load(local.run_file(mesh.home / "run", pool))
    # the pool's only GPU node dies, at once: no grace in which the run could finish
    local.remove_node(cluster, node, mesh.home / "run", grace_s=0)
    return Moved(job_id, pool, int(seen["step"]))


def _step(uri: str, moto: MotoServer, job_id: str, step: int) -> dict[str, Any]:
    """The run's progress once its first attempt has reported ``step``."""
    deadline = time.monotonic() + WAIT_S
    while (seen := read_progress(uri, 1, moto.moto)) is None or (seen.get("step") or 0) < step:
        assert time.monotonic() < deadline, f"{job_id} never reached step {step}: {seen}"
        time.sleep(0.25)
    return seen


def test_a_run_checkpoints_to_s3_in_its_first_pool(
    two_pools: tuple[Mesh, MotoServer], moved: Moved
) -> None:
    _, moto = two_pools
    assert moved.step >= 25
    listed = _s3(moto).list_objects_v2(
        Bucket="checkpoints", Prefix=f"runs/{moved.job_id}/checkpoint_"
    )
    assert listed.get("KeyCount", 0) > 0  # Ray Train's checkpoints are in S3


def test_its_node_dead_the_run_resumes_in_the_other_pool_from_s3(
    two_pools: tuple[Mesh, MotoServer], moved: Moved, monkeypatch: pytest.MonkeyPatch
) -> None:
    mesh, _ = two_pools
    for key, value in AWS.items():
        monkeypatch.setenv(key, value)
    done = mesh.run("jobs", "wait", moved.job_id, "--timeout", str(WAIT_S), env=AWS, check=False)
    assert done.returncode == 0, mesh.story(moved.job_id)
    shown = mesh.show(moved.job_id)
    assert shown["attempt"] == 2
    assert shown["pool"] != moved.pool  # finished in the other pool
    training: dict = shown["training"]  # type: ignore[assignment]
    assert training["attempts"][-1]["resumed_from_step"] >= 19  # from S3, not from scratch
    # two clusters on this machine: Ray Train's placement group cleaner (on the head) found
    # neither and its thread died with a traceback in the job's log, until each cluster's
    # processes were told their own address (pools/local.py environment)
    logs = mesh.run("jobs", "logs", moved.job_id, env=AWS).stdout
    assert "PlacementGroupCleaner" not in logs or "Traceback" not in logs, logs[-3000:]


def _s3(moto: MotoServer) -> Any:
    import boto3

    return boto3.client("s3", endpoint_url=moto.moto, **_keys())
