"""A burst to each cloud, on the emulators: from the launch request to the instance joined,
to a job running on it, and the teardown; whether anything leaked.

    python benchmarks/burst.py [--trials 3] [--cloud aws|gcp|both] [--json]

Per cloud (AWS on moto_server, GCP on the tests' GCE emulator with Secret Manager) and trial,
the controller's cloud side (``Burst``, launching in the foreground) against a pool without a
cluster:

1. ``request_to_joined_s``: ``Burst.launch`` of one spot GPU instance until it returns: the
   token written to the secret manager, the pool's own head launched (on demand, its
   ``head_node_type``) and booted from its startup script (Ray version check, metadata, the
   token, the agent, ``ray start --head``), then the worker launched and booted the same way
   (``ray start --address``), each node seen in the pool's cluster and its agent answering;
2. ``request_to_running_s``: then a one-line Ray job submitted to the pool's cluster, pinned
   to the worker, until Ray reports it running (from the same request);
3. ``teardown_s``: ``Burst.teardown`` of both instances until it returns (terminated at the
   provider, the worker first, their nodes' processes stopped);
4. ``leaked``: instances the provider still lists and processes of the pool's cluster still
   alive after the teardown (must be 0).

Beside them, in the same run, ``plain_ray_start_s``: a head started directly with
``ray start --head --block`` (``meshctl.pools.local.start_head``, what an emulated instance
was before it booted from its script) until the cluster lists it: what the script's join
adds is the difference. Medians of ``--trials``. ``--cloud`` bursts to one cloud only (the
suite tests each on its own).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the tests' emulators

from meshctl.catalog import load_catalogs  # noqa: E402
from meshctl.clouds.base import Cloud  # noqa: E402
from meshctl.controller.burst import Burst  # noqa: E402
from meshctl.controller.deciding.decide import Launch, Teardown  # noqa: E402
from meshctl.model import Catalog, Mesh, NodeGroup  # noqa: E402
from meshctl.pools import local  # noqa: E402
from meshctl.pools.emulated import EmulatedInstances  # noqa: E402
from meshctl.pools.observed import NODE_LABEL, Submission, node_name  # noqa: E402
from meshctl.pools.ray import RayPoolClient  # noqa: E402
from meshctl.state import InstanceRecord, MemoryStore  # noqa: E402

DEADLINE_S = 180.0
POOLS = {
    "aws": {"name": "aws-burst", "provider": "aws", "region": "us-east-1",
            "zones": ["us-east-1a"], "head_node_type": "m7i.large",
            "node_types": [{"name": "g6.xlarge", "max_nodes": 1, "spot": True}]},
    "gcp": {"name": "gcp-burst", "provider": "gcp", "project": "meshctl-bench",
            "region": "us-central1", "zones": ["us-central1-a"], "head_node_type": "n2-standard-4",
            "node_types": [{"name": "g2-standard-8", "max_nodes": 1, "spot": True}]},
}  # fmt: skip


def cloud_of(provider: str, endpoint: str) -> Cloud:
    if provider == "aws":
        from meshctl.clouds.aws import AwsCloud

        return AwsCloud("us-east-1", endpoint_url=endpoint)
    from meshctl.clouds.gcp import GcpCloud

    return GcpCloud("meshctl-bench", endpoint_url=endpoint)


def one_burst(provider: str, endpoint: str, catalogs: dict[str, Catalog], n: int) -> dict[str, Any]:
    pool = {**POOLS[provider], "endpoint_url": endpoint}
    document = {"apiVersion": "meshctl/v1", "kind": "Mesh", "metadata": {"name": "bench"},
                "spec": {"pools": [pool]}}  # fmt: skip
    mesh = Mesh.model_validate(document)
    name, node_type = str(pool["name"]), pool["node_types"][0]["name"]  # type: ignore[index]
    run = Path(tempfile.mkdtemp(prefix="meshctl-burst-bench-"))
    cloud, nodes, store = cloud_of(provider, endpoint), EmulatedInstances(run), MemoryStore()
    burst = Burst(store, mesh, catalogs, {name: cloud}, nodes)
    try:
        start = time.monotonic()
        error = burst.launch(Launch(f"j{n}", name, node_type, 1, True, 0.0, f"burst-j{n}-1"), 0.0)
        if error:
            raise RuntimeError(error)
        joined = time.monotonic() - start
        [worker] = [r.id for r in store.list(InstanceRecord) if r.instance_type == node_type]
        running = _run_a_job(nodes, name, worker, start)
        records = sorted(store.list(InstanceRecord), key=lambda r: r.request_id.endswith(".h"))
        ids = tuple(r.id for r in records)  # the worker first, the head last
        cluster = nodes.cluster(name)
        down = time.monotonic()
        burst.teardown(Teardown(name, ids, "bench"), 1.0)
        teardown = time.monotonic() - down
        leaked = len(cloud.list_instances("bench")) + (
            len(local.leftover(cluster)) if cluster else 0
        )
        return {"request_to_joined_s": joined, "request_to_running_s": running,
                "teardown_s": teardown, "leaked": leaked}  # fmt: skip
    finally:
        left = nodes.cluster(name)
        if left is not None:
            local.stop(left)
        nodes.close()


def _run_a_job(nodes: EmulatedInstances, pool: str, worker: str, start: float) -> float:
    cluster = nodes.cluster(pool)
    assert cluster is not None
    client = RayPoolClient(pool, cluster.dashboard, cluster.token, log_root=cluster.temp_dir)
    sid = f"bench-{int(start * 1000)}"
    code = "import time; print('running'); time.sleep(2)"
    on_worker = {NODE_LABEL: node_name(worker)}  # not on the head: it takes no work
    client.submit(Submission(sid, f'{sys.executable} -c "{code}"', {}, {}, on_worker))
    deadline = time.monotonic() + DEADLINE_S
    while (job := client.job(sid)) is None or job.status not in ("RUNNING", "SUCCEEDED"):
        if time.monotonic() > deadline or (job is not None and job.status == "FAILED"):
            raise RuntimeError(f"the job never ran: {job}")
        time.sleep(0.1)
    return time.monotonic() - start


def plain_ray_start() -> float:
    run = Path(tempfile.mkdtemp(prefix="meshctl-burst-bench-"))
    shape = NodeGroup.model_validate(
        {"name": "plain", "gpus": 1, "cpus": 1, "memory_gib": 2,
         "accelerator": {"model": "L4", "memory_gib": 24}}
    )  # fmt: skip
    start = time.monotonic()
    cluster = local.start_head("plain", run, head=shape)
    took = time.monotonic() - start
    local.stop(cluster)
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument(
        "--cloud", choices=("aws", "gcp", "both"), default="both",
        help="burst to one emulated cloud, or to each in turn",
    )  # fmt: skip
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    clouds = ("aws", "gcp") if args.cloud == "both" else (args.cloud,)
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")
    from tests.emulators.aws import MotoServer
    from tests.emulators.gce import GceEmulator

    catalogs = {f.provider: f.catalog for f in load_catalogs()}
    found: dict[str, Any] = {}
    with MotoServer() as aws, GceEmulator() as gce:
        endpoints = {"aws": aws.endpoint, "gcp": gce.endpoint}
        for provider, endpoint in ((c, endpoints[c]) for c in clouds):
            trials = [one_burst(provider, endpoint, catalogs, n) for n in range(args.trials)]
            found[provider] = {
                key: (sum(t[key] for t in trials) if key == "leaked"
                      else round(statistics.median(t[key] for t in trials), 2))
                for key in trials[0]
            }  # fmt: skip
    found["plain_ray_start_s"] = round(
        statistics.median(plain_ray_start() for _ in range(args.trials)), 2
    )
    found["leaked"] = sum(found[c]["leaked"] for c in clouds)
    found["trials"] = args.trials
    if args.json:
        print(json.dumps(found))
        return
    for provider in clouds:
        row = found[provider]
        print(f"{provider}: joined {row['request_to_joined_s']:.2f} s, job running "
              f"{row['request_to_running_s']:.2f} s, teardown {row['teardown_s']:.2f} s, "
              f"leaked {row['leaked']} (median of {args.trials})")  # fmt: skip
    print(f"plain ray start --head: {found['plain_ray_start_s']:.2f} s")


if __name__ == "__main__":
    main()
