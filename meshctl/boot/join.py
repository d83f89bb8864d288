"""``python -m meshctl.boot.join``: what an instance's startup script hands over to.

1. Who am I: id, zone, region or project, private address (``metadata.Metadata``).
2. The cluster token, read from the cloud's secret manager by name with the instance's own
   role (AWS Secrets Manager through boto3; GCP Secret Manager's REST API with the service
   account's token from the metadata service), written to a file only this user reads. It is
   never printed, passed on a command line or written anywhere else.
3. The node's meshctl agent, on the private address and the agent port, with that token.
4. ``ray start`` (exec, ``--block``): ``--head`` on the head (GCS 6379, dashboard 8265 on
   every address), else ``--address`` of the head; the instance type's GPUs, the accelerator
   model and GPU memory and NIC bandwidth as Ray resources, and the labels the controller
   knows the node by (``meshctl.io/node`` the instance, its type, zone, agent address).

A machine that runs several emulated instances sets ``MESHCTL_BOOT_RAY_ARGS`` (ports, sizes,
temp folder: appended to ``ray start``'s, so they win), ``MESHCTL_BOOT_AGENT_PORT`` and
``MESHCTL_NODE_DIR``; on a real instance none is set.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shlex
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Literal

from meshctl.boot.metadata import Identity, Metadata
from meshctl.model.mesh import RAY_DASHBOARD_PORT, RAY_GCS_PORT
from meshctl.pools.observed import (
    AGENT_HOST_LABEL,
    AGENT_PORT_LABEL,
    GPU_MEMORY_RESOURCE,
    NIC_RESOURCE,
    NODE_LABEL,
    NODE_TYPE_LABEL,
    node_name,
)

GCS_PORT, DASHBOARD_PORT = RAY_GCS_PORT, RAY_DASHBOARD_PORT
SPOT_LABEL = "meshctl.io/spot"  # on a spot (preemptible) instance's node
GCP_SECRETS = "https://secretmanager.googleapis.com"


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="meshctl.boot.join")
    parser.add_argument("--provider", choices=("aws", "gcp"), required=True)
    for name in ("--mesh", "--pool", "--secret", "--where", "--node-type"):
        parser.add_argument(name, required=True)
    parser.add_argument("--role", choices=("head", "worker"), required=True)
    parser.add_argument("--head")
    parser.add_argument("--gpus", type=int, default=0)
    parser.add_argument("--accelerator")
    parser.add_argument(
        "--device-resource",
        default="GPU:1",
        help="NAME:UNITS: the Ray resource its devices are counted in, and units a device",
    )
    parser.add_argument("--gpu-memory-gib", type=float, default=0.0)
    parser.add_argument("--nic-gbps", type=float, default=0.0)
    parser.add_argument("--agent-port", type=int, default=9109)
    parser.add_argument("--spot", action="store_true")
    parser.add_argument("--label", action="append", default=[])
    args = parser.parse_args(argv)
    if (args.role == "worker") != bool(args.head):
        parser.error("a worker needs --head; a head takes none")
    return args


def read_token(provider: Literal["aws", "gcp"], secret: str, where: str, meta: Metadata) -> str:
    """The cluster token, from the secret manager where the controller wrote it (``where``:
    the pool's AWS region, or its GCP project), with the instance's own credentials."""
    if provider == "aws":
        import boto3  # the image carries meshctl[aws]

        client = boto3.client("secretsmanager", region_name=where)
        return str(client.get_secret_value(SecretId=secret)["SecretString"]).strip()
    endpoint = os.environ.get("MESHCTL_SECRETS_ENDPOINT", GCP_SECRETS).rstrip("/")
    url = f"{endpoint}/v1/projects/{where}/secrets/{secret}/versions/latest:access"
    request = urllib.request.Request(
        url, headers={"Authorization": f"Bearer {meta.access_token()}"}
    )
    with urllib.request.urlopen(request, timeout=30) as reply:
        payload = json.loads(reply.read())["payload"]["data"]
    return base64.b64decode(payload).decode().strip()


def write_private(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as out:
        out.write(text)


def labels(args: argparse.Namespace, me: Identity, agent_port: int) -> dict[str, str]:
    found = dict(pair.split("=", 1) for pair in args.label)
    found.update({NODE_LABEL: node_name(me.instance_id), NODE_TYPE_LABEL: args.node_type,
                  "zone": me.zone, AGENT_HOST_LABEL: me.address,
                  AGENT_PORT_LABEL: str(agent_port)})  # fmt: skip
    if args.spot:
        found[SPOT_LABEL] = "true"
    return found


def ray_args(args: argparse.Namespace, me: Identity, agent_port: int) -> list[str]:
    resources: dict[str, float] = {}
    if args.accelerator:
        resources[f"accelerator_type:{args.accelerator}"] = 1
    if args.gpu_memory_gib:
        resources[GPU_MEMORY_RESOURCE] = args.gpu_memory_gib
    if args.nic_gbps:
        resources[NIC_RESOURCE] = args.nic_gbps
    gpus = args.gpus
    resource, _, units = str(args.device_resource).partition(":")
    if resource != "GPU" and gpus:  # a Trainium or Gaudi instance: never Ray's GPU
        resources[resource], gpus = gpus * int(units or 1), 0
    role = (
        [
            "--head",
            f"--port={GCS_PORT}",
            "--dashboard-host=0.0.0.0",
            f"--dashboard-port={DASHBOARD_PORT}",
        ]
        if args.role == "head"
        else [f"--address={args.head}"]
    )
    shown = ",".join(f"{k}={v}" for k, v in sorted(labels(args, me, agent_port).items()))
    return [
        *role, f"--node-ip-address={me.address}", f"--num-gpus={gpus}",
        f"--resources={json.dumps(resources)}", f"--labels={shown}", "--disable-usage-stats",
        "--block", *shlex.split(os.environ.get("MESHCTL_BOOT_RAY_ARGS", "")),
    ]  # fmt: skip


def start_agent(args: argparse.Namespace, me: Identity, token_file: Path, port: int) -> None:
    """The node's agent, beside Ray: it outlives this process (``ray start`` replaces it)."""
    with open(token_file.parent / "agent.log", "ab") as log:  # the agent keeps its own copy
        subprocess.Popen(
            [sys.executable, "-m", "meshctl", "agent", "run", f"--token-file={token_file}",
             f"--node={node_name(me.instance_id)}", f"--gpus={args.gpus}", f"--host={me.address}",
             f"--port={port}", f"--disk={token_file.parent}"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    args = parse(sys.argv[1:] if argv is None else argv)
    meta = Metadata(args.provider)
    me = meta.identity()
    home = Path(os.environ.get("MESHCTL_NODE_DIR", "/var/lib/meshctl"))
    token_file = home / "ray-token"
    write_private(token_file, read_token(args.provider, args.secret, args.where, meta))
    agent_port = int(os.environ.get("MESHCTL_BOOT_AGENT_PORT", args.agent_port))
    start_agent(args, me, token_file, agent_port)
    print(f"meshctl boot: {me.instance_id} ({me.zone}, {me.address}) joins pool {args.pool} "
          f"as its {args.role}", flush=True)  # fmt: skip
    ray = str(Path(sys.executable).with_name("ray"))
    command = ["ray", "start", *ray_args(args, me, agent_port)]
    print(f"meshctl boot: {shlex.join(command)}", flush=True)  # no secret in it
    os.environ.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(token_file))
    os.environ.pop("RAY_AUTH_TOKEN", None)
    os.execv(ray, [ray, *command[1:]])


if __name__ == "__main__":
    main()
