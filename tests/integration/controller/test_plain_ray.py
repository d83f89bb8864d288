"""An existing Ray cluster used as it is: the test starts a plain one the way an operator
would (`ray start --head`, then a second `ray start --address`, token auth, no meshctl labels
at all), declares it in mesh.yaml as a `ray` pool and runs a single-node job and a two-node
gang on it through the real CLI and controller.

Both Ray nodes run on this machine, so Ray names both by the same address; meshctl tells
them apart by Ray's own node id, and pins work with Ray's own `ray.io/node-id` label.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from meshctl.host.ports import free_ports
from meshctl.pools import local
from meshctl.pools.observed import Submission
from meshctl.pools.ray import RayPoolClient
from tests.conftest import wait_until
from tests.integration.meshes import WAIT_S, Mesh

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
GPUS_PER_NODE = 2


class PlainCluster:
    """Two `ray start --block` processes, each in a session of its own; stopped by their pids."""

    def __init__(self, folder: Path) -> None:
        self.token_file = folder / "ray.token"
        self.token_file.write_text(secrets.token_hex(32))
        self.temp_dir = tempfile.mkdtemp(prefix="meshctl-plain-")  # short: Ray's socket paths
        self.log_dir = folder
        self.gcs_port, self.dashboard_port, self.client_port = free_ports(3)
        self.dashboard = f"http://127.0.0.1:{self.dashboard_port}"
        self.sessions: list[int] = []

    def env(self) -> dict[str, str]:
        import os

        env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_TOKEN")}
        bin_dir = str(Path(sys.executable).parent)
        return {
            **env,
            "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN_PATH": str(self.token_file),
            "RAY_USAGE_STATS_ENABLED": "0",
            "PATH": bin_dir + ":" + env.get("PATH", ""),
        }

    def start(self, name: str, *args: str) -> None:
        ports = iter(free_ports(6))  # two nodes on one machine: none of Ray's defaults
        ray = str(Path(sys.executable).with_name("ray"))
        with open(self.log_dir / f"{name}.log", "w") as log:
            proc = subprocess.Popen(
                [ray, "start", *args, f"--num-gpus={GPUS_PER_NODE}", "--num-cpus=2",
                 f"--node-manager-port={next(ports)}", f"--object-manager-port={next(ports)}",
                 f"--metrics-export-port={next(ports)}",
                 f"--dashboard-agent-listen-port={next(ports)}",
                 f"--dashboard-agent-grpc-port={next(ports)}",
                 f"--runtime-env-agent-port={next(ports)}",
                 "--object-store-memory=100000000", "--disable-usage-stats", "--block"],
                env=self.env(), cwd=self.temp_dir, stdin=subprocess.DEVNULL,
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        self.sessions.append(proc.pid)

    def alive(self) -> int:
        client = RayPoolClient("lab", self.dashboard, self.token_file.read_text(), timeout_s=5)
        try:
            return sum(n.alive for n in client.nodes())
        except Exception:
            return 0

    def stop(self) -> None:
        local.terminate(self.sessions, 5.0)


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PlainCluster]:
    cluster = PlainCluster(tmp_path_factory.mktemp("plain"))
    try:
        cluster.start(
            "head",
            "--head",
            f"--port={cluster.gcs_port}",
            f"--dashboard-port={cluster.dashboard_port}",
            "--dashboard-host=127.0.0.1",
            f"--ray-client-server-port={cluster.client_port}",
            f"--temp-dir={cluster.temp_dir}",
        )
        wait_until("the plain head never came up", lambda: cluster.alive() == 1, WAIT_S, 0.5)
        cluster.start("worker", f"--address=127.0.0.1:{cluster.gcs_port}")
        wait_until("the second node never joined", lambda: cluster.alive() == 2, WAIT_S, 0.5)
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def mesh(plain: PlainCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mesh]:
    base = tmp_path_factory.mktemp("lab")
    (base / "mesh.yaml").write_text(
        "apiVersion: meshctl/v1\nkind: Mesh\nmetadata: {name: lab}\nspec:\n  pools:\n"
        f"    - {{name: lab, provider: ray, address: '{plain.dashboard}',\n"
        f"       auth: {{token_file: '{plain.token_file}'}}}}\n"
    )
    m = Mesh(base / "home", base)
    assert "existing Ray cluster" in m.run("--mesh", str(base / "mesh.yaml"), "up").stdout
    try:
        yield m
    finally:
        m.run("down", "--force", check=False)


def node_names(mesh: Mesh) -> list[str]:
    listed = json.loads(mesh.run("nodes", "list", "-o", "json").stdout)
    return sorted(str(n["node"]).split("/", 1)[1] for n in listed)  # pool/name


def test_the_nodes_are_named_by_address_and_told_apart_by_ray_node_id(mesh: Mesh) -> None:
    names = node_names(mesh)
    assert len(set(names)) == 2, names
    host = names[0].rsplit("-", 1)[0]
    assert all(name.startswith(host + "-") for name in names), names  # one host, two node ids


def test_live_nodes_past_the_state_apis_cap_come_from_the_node_summary(
    plain: PlainCluster,
) -> None:
    """Ray's state API lists at most 10,000 nodes and has no pages; asked for one at a time,
    it lists one of the two live nodes and says there are two. The pool then takes the other
    from the dashboard's node summary, and sees what it sees when nothing is cut."""
    from dataclasses import replace

    from meshctl.pools import raynodes

    token = plain.token_file.read_text()
    whole = RayPoolClient("lab", plain.dashboard, token, timeout_s=10)
    capped = replace(whole, page=1)
    rows, cut = raynodes.listed(capped._request("GET", raynodes.listing("ALIVE", 1)))
    assert (len(rows), cut) == (1, True)

    def seen(client: RayPoolClient) -> list[object]:  # GPUs in use move with other tests
        return sorted((replace(n, gpus_in_use=None) for n in client.nodes()), key=repr)

    expected = seen(whole)
    assert len(expected) == 2
    wait_until(
        lambda: f"the summary never completed the listing: {seen(capped)} != {expected}",
        lambda: seen(capped) == expected,
        WAIT_S,
        0.5,
    )


def test_a_single_node_job_runs_on_the_plain_cluster(mesh: Mesh) -> None:
    job_id = mesh.submit("--gpus", "1", "--", "python", "-c", "print('on a plain cluster')")
    assert mesh.run("jobs", "wait", job_id).returncode == 0
    assert mesh.show(job_id)["pool"] == "lab"
    assert "on a plain cluster" in mesh.run("jobs", "logs", job_id).stdout


def test_a_two_node_gang_runs_one_rank_on_each_node(mesh: Mesh, tmp_path: Path) -> None:
    spec = tmp_path / "gang.yaml"
    spec.write_text(
        "apiVersion: meshctl/v1\nkind: Job\nmetadata: {name: plain-gang}\nspec:\n"
        "  kind: train\n  entrypoint: python pretrain.py --steps 3\n"
        f"  working_dir: {ROOT / 'examples' / 'programs'}\n"
        f"  resources: {{nodes: 2, gpus: {GPUS_PER_NODE}, cpus: 0.5, memory_gib: 256MiB}}\n"
    )
    job_id = mesh.submit(str(spec))
    done = mesh.run("jobs", "wait", job_id, check=False)
    assert done.returncode == 0, mesh.run("jobs", "logs", job_id, check=False).stdout
    placed = mesh.show(job_id)["nodes"]
    assert sorted(placed) == node_names(mesh)  # type: ignore[call-overload]
    logs = mesh.run("jobs", "logs", job_id).stdout
    assert "RESULT: gang of 2 ranks on" in logs
    for name in placed:  # type: ignore[attr-defined]
        assert str(name) in logs  # each rank found itself on the node meshctl chose


# A gang that runs one task in each bundle of the placement group meshctl has Ray hold for it,
# says where each ran, then holds on until the test lets it finish (a file appears).
HOLDING_GANG = """
import os, pathlib, sys, time
import ray
from meshctl.workload import bundle

ray.init()

@ray.remote
def where():
    return ray.get_runtime_context().get_node_id(), ray.get_gpu_ids()

pins = os.environ["MESHCTL_NODE_IDS"].split(",")
gpus = float(os.environ["MESHCTL_GPUS_PER_NODE"])
ranks = [where.options(num_cpus=0.1, num_gpus=gpus, **bundle(i)).remote() for i in range(len(pins))]
for i, (node, ids) in enumerate(ray.get(ranks)):
    print(f"rank {i} on {node} pinned {pins[i]} gpus {ids}", flush=True)
print("HOLDING", os.environ["MESHCTL_PLACEMENT_GROUP"], flush=True)
deadline = time.monotonic() + 300
while not pathlib.Path(sys.argv[1]).exists() and time.monotonic() < deadline:
    time.sleep(0.2)
"""


def test_a_gang_runs_in_a_placement_group_ray_holds_while_it_runs_and_removes_after(
    mesh: Mesh, plain: PlainCluster, tmp_path: Path
) -> None:
    """reserve: workers: before the gang's command starts, a placement group holds its GPUs
    on both nodes meshctl chose (Ray counts them taken); its ranks run in its bundles, on
    those nodes; the group is removed when the job ends."""
    (tmp_path / "gang.py").write_text(HOLDING_GANG)
    go = tmp_path / "go"
    spec = tmp_path / "gang.yaml"
    spec.write_text(
        "apiVersion: meshctl/v1\nkind: Job\nmetadata: {name: held-gang}\nspec:\n"
        f"  kind: batch\n  entrypoint: python gang.py {go}\n  working_dir: {tmp_path}\n"
        f"  resources: {{nodes: 2, gpus: {GPUS_PER_NODE}, cpus: 0.5, memory_gib: 256MiB}}\n"
    )
    client = RayPoolClient("lab", plain.dashboard, plain.token_file.read_text())
    job_id = mesh.submit(str(spec))
    name = f"meshctl-{job_id}-1"  # the attempt's submission id

    def holding() -> str:
        text = mesh.run("jobs", "logs", job_id, check=False).stdout  # none before it starts
        return text if "HOLDING" in text else ""

    logs = wait_until(
        lambda: f"the gang never ran in its group:\n{mesh.run('jobs', 'logs', job_id).stdout}",
        holding,
        WAIT_S,
        0.5,
    )
    try:
        group = client.placement_group(name)
        assert group is not None
        assert group.state == "CREATED", group
        ids = {n.name: n.ray_node_id for n in client.nodes() if n.alive}
        chosen = [ids[str(node)] for node in mesh.show(job_id)["nodes"]]  # type: ignore[attr-defined]
        assert list(group.node_ids) == chosen  # bundle i on node i, as meshctl chose
        wait_until(  # the dashboard's node summary reports usage every few seconds
            lambda: f"Ray never counted the group's GPUs taken: {client.gpus_in_use()}",
            lambda: all(client.gpus_in_use().get(n) == GPUS_PER_NODE for n in chosen),
            WAIT_S,
            0.5,
        )
        for i, node in enumerate(chosen):
            assert f"rank {i} on {node} pinned {node}" in logs
    finally:
        go.touch()
    assert mesh.run("jobs", "wait", job_id).returncode == 0
    wait_until(
        f"placement group {name} outlived its job",
        lambda: (g := client.placement_group(name)) is None or g.state == "REMOVED",
        WAIT_S,
        0.5,
    )


def test_gpus_taken_by_a_job_submitted_straight_to_ray_are_never_given_to_meshctl(
    mesh: Mesh, plain: PlainCluster
) -> None:
    """Someone runs `ray job submit` on the cluster, outside meshctl, holding every GPU of one
    node: meshctl's jobs go to the other node, one after the other, never to that one."""
    client = RayPoolClient("lab", plain.dashboard, plain.token_file.read_text())
    [taken, *_] = [n for n in client.nodes() if n.alive]
    other = Submission(
        submission_id=f"not-meshctl-{secrets.token_hex(4)}",
        entrypoint="python -c 'import time; time.sleep(300)'",
        runtime_env={}, metadata={}, label_selector={"ray.io/node-id": taken.ray_node_id},
        num_gpus=GPUS_PER_NODE,
    )  # fmt: skip
    client.submit(other)
    try:
        # Running, and counted on its node alone: the summary lags, and what it said of the
        # previous test's placement group (both nodes held) must not pass for this job.
        def counted() -> bool:
            job = client.job(other.submission_id)
            used = client.gpus_in_use()
            free = [n for n in used if n != taken.ray_node_id]
            return (
                job is not None
                and job.status == "RUNNING"
                and used.get(taken.ray_node_id) == GPUS_PER_NODE
                and all(used[n] == 0 for n in free)
            )

        wait_until("Ray never counted the other job's GPUs alone", counted, WAIT_S, 0.5)
        sleep = ["--", "python", "-c", "import time; time.sleep(3)"]
        jobs = [mesh.submit("--gpus", str(GPUS_PER_NODE), *sleep) for _ in range(2)]
        for job_id in jobs:
            assert mesh.run("jobs", "wait", job_id).returncode == 0
        placed = {n for job_id in jobs for n in mesh.show(job_id)["nodes"]}  # type: ignore[attr-defined]
        assert taken.name not in placed
        assert len(placed) == 1
    finally:
        client.stop(other.submission_id)
