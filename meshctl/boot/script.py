"""The startup script of a cloud instance (EC2 user data, GCE ``startup-script`` metadata),
rendered by the controller for each launch: pure, no I/O.

The script checks that the image carries Ray at the controller's version (installing it when
not) and meshctl, then hands over to ``python -m meshctl.boot.join``, which reads the
instance's identity from its metadata service, the cluster token from the cloud's secret
manager (by name: the script never holds the token), starts the node's meshctl agent and runs
``ray start`` as the pool's head or as a worker joining the head's address.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Literal

Role = Literal["head", "worker"]


@dataclass(frozen=True, slots=True)
class StartupSpec:
    provider: Literal["aws", "gcp"]
    mesh: str
    pool: str
    role: Role
    ray_version: str
    secret: str  # the token's name in the cloud's secret manager: never the token
    node_type: str
    where: str  # AWS: the region; GCP: the project
    head_address: str | None = None  # a worker's: "<private address>:<GCS port>"
    gpus: int = 0
    accelerator: str | None = None
    device_resource: str = "GPU"  # the Ray resource its devices are counted in (the registry's)
    device_units: int = 1  # units of it a device is (a Trainium chip: 2 NeuronCores)
    gpu_memory_gib: float = 0.0
    nic_gbps: float = 0.0
    agent_port: int = 9109
    spot: bool = False
    labels: tuple[tuple[str, str], ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if (self.role == "worker") != (self.head_address is not None):
            raise ValueError("a worker joins a head's address; a head has none")


HEADER = """\
#!/bin/bash
# meshctl: this instance joins pool {pool} of mesh {mesh} as its {role}.
# Rendered by meshctl; it holds no secret: the cluster token is read from {store}
# under {secret!r} with the instance's own role.
set -euo pipefail
PY="${{MESHCTL_PYTHON:-python3}}"
want={ray_version}
have="$("$PY" -c 'import ray; print(ray.__version__)' 2>/dev/null || true)"
if [ "$have" != "$want" ]; then
  echo "meshctl boot: Ray ${{have:-missing}}, installing $want" >&2
  "$PY" -m pip install --quiet "ray[default]==$want"
fi
if ! "$PY" -c 'import meshctl' 2>/dev/null; then
  echo "meshctl boot: the image lacks meshctl (pip install 'meshctl[agent,{provider}]')" >&2
  exit 1
fi
"""
STORES = {"aws": "AWS Secrets Manager", "gcp": "GCP Secret Manager"}


def render(spec: StartupSpec) -> str:
    """The script, bash: the checks above, then ``exec`` of the join with its arguments."""
    header = HEADER.format(
        pool=spec.pool, mesh=spec.mesh, role=spec.role, store=STORES[spec.provider],
        secret=spec.secret, ray_version=shlex.quote(spec.ray_version), provider=spec.provider,
    )  # fmt: skip
    args = " \\\n  ".join(shlex.join(pair) for pair in _arguments(spec))
    return f'{header}exec "$PY" -m meshctl.boot.join \\\n  {args}\n'


def _arguments(spec: StartupSpec) -> list[list[str]]:
    pairs = [
        ["--provider", spec.provider], ["--mesh", spec.mesh], ["--pool", spec.pool],
        ["--role", spec.role], ["--secret", spec.secret], ["--where", spec.where],
        ["--node-type", spec.node_type], ["--gpus", str(spec.gpus)],
        ["--agent-port", str(spec.agent_port)],
    ]  # fmt: skip
    if spec.head_address:
        pairs.append(["--head", spec.head_address])
    if spec.accelerator:
        pairs.append(["--accelerator", spec.accelerator])
    if spec.device_resource != "GPU" or spec.device_units != 1:
        pairs.append(["--device-resource", f"{spec.device_resource}:{spec.device_units}"])
    if spec.gpu_memory_gib:
        pairs.append(["--gpu-memory-gib", f"{spec.gpu_memory_gib:g}"])
    if spec.nic_gbps:
        pairs.append(["--nic-gbps", f"{spec.nic_gbps:g}"])
    if spec.spot:
        pairs.append(["--spot"])
    pairs += [["--label", f"{key}={value}"] for key, value in spec.labels]
    return pairs


def secret_name(mesh: str, pool: str) -> str:
    """The cluster token's name in the secret manager: one per pool (rotated with its
    cluster). GCP secret ids take letters, digits, - and _ only."""
    return f"meshctl-{mesh}-{pool}-ray-token"
