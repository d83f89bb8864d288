"""Datasets through the nodes' caches, for real: an embedded mesh of two 1-GPU nodes, each
with a 1 GiB cache kept by its agent; central storage is S3 on moto_server (its object reads
counted at the proxy in front of it).

A job placed on a node has that node's agent fetch its dataset at once, and reads it through
``meshctl.workload.dataset`` from the local cache. A second job, placed on the other node
while the first holds its GPU, has its data fetched from the first node's agent, not from
S3: central storage is read once for both.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from tests.conftest import wait_until
from tests.emulators.aws import MotoServer
from tests.integration.meshes import WAIT_S, Mesh

pytestmark = pytest.mark.integration

MIB = 1024**2
MESH = """\
apiVersion: meshctl/v1
kind: Mesh
metadata: {{name: data-test}}
spec:
  pools:
    - name: onprem
      provider: local
      agents: {{interval_s: 0.5}}
      nodes:
        - {{name: gpu, count: 2, gpus: 1, cpus: 1, memory_gib: 2GiB, cache_gib: 1,
           accelerator: {{model: A100, memory_gib: 80GiB}}}}
"""
JOB = """\
apiVersion: meshctl/v1
kind: Job
metadata: {{name: {name}}}
spec:
  kind: batch
  entrypoint: {entrypoint}
  resources: {{gpus: 1, cpus: 250m, memory_gib: 256MiB}}
  data:
    - {{name: corpus, location: "s3://corpus/v1", endpoint_url: "{endpoint}"}}
"""
READ = (
    "python -c \"import os; from meshctl.workload import dataset; p = dataset('corpus', 120); "
    "n = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(p) for f in fs); "
    "print('read', n, 'bytes from', p, flush=True); import time; time.sleep({hold})\""
)
FILES = {"shard-0.bin": 3 * MIB, "shard-1.bin": 3 * MIB, "meta/index.json": 1024}
SIZE = sum(FILES.values())
ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Mesh, MotoServer, Path]]:
    base = tmp_path_factory.mktemp("data")
    with pytest.MonkeyPatch.context() as mp, MotoServer() as moto:
        for k, v in ENV.items():
            mp.setenv(k, v)
        fs = pafs.S3FileSystem(  # written to moto itself: only reads are counted at its proxy
            endpoint_override=moto.moto.removeprefix("http://"),
            scheme="http",
            allow_bucket_creation=True,
        )
        fs.create_dir("corpus")
        for i, (name, size) in enumerate(FILES.items()):
            with fs.open_output_stream(f"corpus/v1/{name}") as out:
                out.write(bytes([i + 1]) * size)
        moto.s3_reads.clear()
        (base / "mesh.yaml").write_text(MESH.format())
        mesh = Mesh(base / "home", base)
        mesh.run("--mesh", str(base / "mesh.yaml"), "up", "--interval", "0.5", env=ENV)
        try:
            yield mesh, moto, base
        finally:
            mesh.run("down", "--force", check=False, env=ENV)


def _job(base: Path, name: str, endpoint: str, hold_s: int) -> Path:
    path = base / f"{name}.yaml"
    entrypoint = json.dumps(READ.format(hold=hold_s))
    path.write_text(JOB.format(name=name, entrypoint=entrypoint, endpoint=endpoint))
    return path


def _logs(mesh: Mesh, job_id: str) -> str:
    """The job's log so far; empty while its pool has none yet."""
    done = mesh.run("jobs", "logs", job_id, check=False)
    return done.stdout if done.returncode == 0 else ""


def _agents(mesh: Mesh) -> dict[str, dict[str, object]]:
    text = (mesh.home / "run" / "agents.json").read_text()
    found: dict[str, dict[str, object]] = json.loads(text)
    return found


def test_a_job_reads_its_data_from_the_cache_and_the_next_node_from_its_peer(
    setup: tuple[Mesh, MotoServer, Path],
) -> None:
    mesh, moto, base = setup
    first = mesh.submit(str(_job(base, "first", moto.endpoint, 600)))
    wait_until(
        # until its Ray job has started, its pool has no log for it yet: `jobs logs` exits 1
        lambda: "first never read its data: " + _logs(mesh, first)[-500:],
        lambda: re.search(r"read \d+ bytes", _logs(mesh, first)),
        WAIT_S,
        every_s=0.5,
    )
    logs = mesh.run("jobs", "logs", first).stdout
    assert f"read {SIZE} bytes from " in logs
    assert "/current/" in logs  # the node's cache, not s3://
    [node1] = mesh.show(first)["nodes"]  # type: ignore[misc]
    central = sum(n for _, n in moto.s3_reads)
    assert central == SIZE

    second = mesh.submit(str(_job(base, "second", moto.endpoint, 0)))
    assert mesh.run("jobs", "wait", second, "--timeout", str(WAIT_S)).returncode == 0
    [node2] = mesh.show(second)["nodes"]  # type: ignore[misc]
    assert node2 != node1  # the first holds node1's one GPU
    assert f"read {SIZE} bytes from " in mesh.run("jobs", "logs", second).stdout
    assert sum(n for _, n in moto.s3_reads) == SIZE  # S3 read once for both nodes
    wait_until(
        "the second node's agent never reported its copy",
        lambda: (_agents(mesh).get(f"onprem/{node2}") or {}).get("cache") is not None,
        WAIT_S,
    )
    cache = _agents(mesh)[f"onprem/{node2}"]["cache"]
    assert isinstance(cache, dict)
    assert (cache["peer_bytes"], cache["source_bytes"]) == (SIZE, 0)
    [entry] = cache["entries"]
    assert entry["complete"] is True
    assert str(entry["fetched_from"]).startswith("http://127.0.0.1:")
    mesh.run("jobs", "cancel", first)


HOLD = """\
apiVersion: meshctl/v1
kind: Job
metadata: {{name: {name}}}
spec:
  kind: batch
  entrypoint: python -c "import time; time.sleep({hold})"
  resources: {{gpus: 1, cpus: 250m, memory_gib: 256MiB}}
  limits: {{max_runtime_s: {runtime}}}
"""
# Whether the node's copy was whole when the job started, before it asked for it
LOCAL_AT_START = (
    "python -c \"import os; local = os.environ['MESHCTL_DATA_CORPUS']; "
    "print('local at start:', os.path.exists(local), flush=True)\""
)


def test_a_queued_job_finds_its_data_local_when_it_starts(
    setup: tuple[Mesh, MotoServer, Path],
) -> None:
    mesh, moto, base = setup
    fs = pafs.S3FileSystem(endpoint_override=moto.moto.removeprefix("http://"), scheme="http")
    with fs.open_output_stream("corpus/v2/shard.bin") as out:  # on no node yet
        out.write(b"\x07" * (2 * MIB))
    jobs = []
    for name, hold, runtime in (("soon", 20, 40), ("long", 600, 900)):  # both nodes busy
        path = base / f"{name}.yaml"
        path.write_text(HOLD.format(name=name, hold=hold, runtime=runtime))
        jobs.append(mesh.submit(str(path)))
    try:
        for job in jobs:
            mesh.wait_for(job, "running")
        path = _job(base, "queued", moto.endpoint, 0)
        path.write_text(
            path.read_text()
            .replace("s3://corpus/v1", "s3://corpus/v2")
            .replace(json.dumps(READ.format(hold=0)), json.dumps(LOCAL_AT_START))
        )
        queued = mesh.submit(str(path))
        # backfill holds the node "soon" frees for it, and that node's agent fetches its data
        assert mesh.run("jobs", "wait", queued, "--timeout", str(WAIT_S)).returncode == 0
        [node] = mesh.show(queued)["nodes"]  # type: ignore[misc]
        assert node == mesh.show(jobs[0])["nodes"][0]  # type: ignore[index]
        assert "local at start: True" in mesh.run("jobs", "logs", queued).stdout
    finally:
        for job in jobs:
            mesh.run("jobs", "cancel", job, check=False)
