"""The entrypoint of a job whose workers hold its resources (``reserve: workers``, without a
``train`` section): ``python -m meshctl.workload.placement 'COMMAND'``.

meshctl chose the job's nodes; this makes Ray hold them. Before the job's own command starts,
it creates a Ray placement group with one bundle per node meshctl chose (the job's GPUs,
CPUs and memory on that node, and the GPU memory and NIC bandwidth it claims there), each
bundle pinned to its node by Ray's ``ray.io/node-id`` label, and waits until Ray holds it.
Then it runs the command (through the shell, as Ray Jobs runs an entrypoint) with
``MESHCTL_PLACEMENT_GROUP`` set to the group's id, and removes the group when the command
ends. The job's tasks and actors schedule into bundle ``i`` for node ``i`` of
``MESHCTL_NODES`` (``meshctl.workload.bundle``); work that does not cannot take what the
group holds, so Ray refuses to over-commit the nodes.

The group belongs to this process's Ray job: should this process die (the Ray job stopped
with SIGKILL, its node lost), Ray removes the group itself.

What the controller writes (``meshctl.controller.deciding.dispatch``):

- ``MESHCTL_BUNDLES``: JSON, a list of Ray resource maps, one per node;
- ``MESHCTL_NODE_LABEL`` and ``MESHCTL_NODE_IDS``: the label each bundle is pinned by and its
  value per node, in the same order;
- ``MESHCTL_PLACEMENT_GROUP_NAME``: the group's name, the attempt's submission id
  (``meshctl-<job id>-<attempt>``), by which operators find it in
  ``ray list placement-groups``;
- ``MESHCTL_PLACEMENT_TIMEOUT_S`` (optional, default 600): how long Ray may take to hold the
  group before the job fails with the reason.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from types import FrameType
from typing import Any

from meshctl.workload.exits import EXIT_LINE

DEFAULT_TIMEOUT_S = 600.0
GROUP_ENV = "MESHCTL_PLACEMENT_GROUP"  # the group's id (hex), for the job's own code
JOB_CONFIG_ENV = "RAY_JOB_CONFIG_JSON_ENV_VAR"  # how Ray Jobs hands a driver its job's config


def bundles_of(env: Mapping[str, str]) -> tuple[list[dict[str, float]], list[dict[str, str]]]:
    """The group's bundles and the label selector pinning each to its node, from the job's
    environment; ``ValueError`` naming the variable when they do not match."""
    bundles = json.loads(env.get("MESHCTL_BUNDLES") or "[]")
    label = env.get("MESHCTL_NODE_LABEL") or "ray.io/node-id"
    pins = [v for v in (env.get("MESHCTL_NODE_IDS") or "").split(",") if v]
    if not isinstance(bundles, list) or not bundles:
        raise ValueError("MESHCTL_BUNDLES: expected a JSON list of resource maps")
    if len(pins) != len(bundles):
        raise ValueError(
            f"MESHCTL_NODE_IDS: expected {len(bundles)} node ids (one per bundle), got {len(pins)}"
        )
    resources = [{str(k): float(v) for k, v in b.items() if float(v) > 0} for b in bundles]
    return resources, [{label: pin} for pin in pins]


def describe(bundles: Sequence[Mapping[str, float]], selectors: Sequence[Mapping[str, str]]) -> str:
    """The bundles and their nodes, for the job's log."""
    parts = []
    for bundle, selector in zip(bundles, selectors, strict=True):
        held = ", ".join(f"{k}={v:g}" for k, v in sorted(bundle.items()))
        parts.append(f"{{{held}}} on {', '.join(f'{k}={v}' for k, v in selector.items())}")
    return "; ".join(parts)


def hold(env: Mapping[str, str]) -> Any:
    """Create the group and wait until Ray holds every bundle; the group, or SystemExit with
    the reason when Ray does not hold it in time (the group is removed then)."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    bundles, selectors = bundles_of(env)
    timeout_s = float(env.get("MESHCTL_PLACEMENT_TIMEOUT_S") or DEFAULT_TIMEOUT_S)
    # Connect without the job's runtime environment: a second driver with the job's working
    # directory may have Ray unpack it again, under the command's feet. The command's own
    # driver gets the job's environment as a plain entrypoint would.
    job_config = os.environ.pop(JOB_CONFIG_ENV, None)
    try:
        ray.init(logging_level=logging.WARNING, log_to_driver=False)
    finally:
        if job_config is not None:
            os.environ[JOB_CONFIG_ENV] = job_config
    group = placement_group(
        bundles,
        strategy="SPREAD",  # each bundle is pinned to its own node by its label selector
        name=env.get("MESHCTL_PLACEMENT_GROUP_NAME") or "",
        bundle_label_selector=selectors,
    )
    if not group.wait(timeout_seconds=timeout_s):
        remove_placement_group(group)
        raise SystemExit(
            f"meshctl placement: Ray did not hold the job's placement group within "
            f"{timeout_s:g} s: {describe(bundles, selectors)} (is other work holding them?)"
        )
    print(
        f"meshctl placement: group {group.id.hex()} holds {describe(bundles, selectors)}",
        flush=True,
    )
    return group


def run(command: str, group_id: str, cwd: str) -> int:
    """Run the job's command with the group's id in its environment; its exit code. A stop
    signal is the command's to act on (Ray signals every process of the job): this waits for
    it to end, so the group outlives the job's last checkpoint."""
    child = subprocess.Popen(command, shell=True, cwd=cwd, env={**os.environ, GROUP_ENV: group_id})

    def forward(signum: int, frame: FrameType | None) -> None:
        if child.poll() is None:
            child.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    return child.wait()


def main(argv: Sequence[str]) -> int:
    if len(argv) != 1 or not argv[0].strip():
        print("usage: python -m meshctl.workload.placement 'COMMAND'", file=sys.stderr)
        return 2
    cwd = os.getcwd()  # the job's working directory, as Ray Jobs started this
    try:
        group = hold(os.environ)
    except ValueError as err:
        print(f"meshctl placement: {err}", file=sys.stderr)
        return 2
    from ray.util.placement_group import remove_placement_group

    try:
        code = run(argv[0], group.id.hex(), cwd)
        # A command killed by a signal: the shell's convention, as a plain entrypoint says it
        code = code if code >= 0 else 128 - code
        print(EXIT_LINE.format(code), flush=True)  # recorded before the slow goodbyes
    finally:
        remove_placement_group(group)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
