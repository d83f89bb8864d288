"""The server's kept mesh and policies (``Planner``): read once, read again when a file changes,
and whether checking a job asks a pool over the network."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from meshctl.controller.reload import RuleFiles
from meshctl.model import Mesh
from meshctl.server.planning import WATCH_S, Planner

pytestmark = pytest.mark.unit

NODES = [{"name": "gpu", "count": 1, "gpus": 8, "cpus": 32, "memory_gib": "256GiB",
          "accelerator": {"vendor": "nvidia", "model": "A100", "memory_gib": "80GiB"}}]  # fmt: skip
RAY = {"name": "dc", "provider": "ray", "address": "http://head.example:8265"}
POOLS = [
    # id, the pools of the mesh, whether a check asks a pool for its nodes
    pytest.param([{"name": "dc", "provider": "local", "nodes": NODES}], False, id="local"),
    pytest.param([{**RAY, "nodes": NODES}], False, id="ray-nodes-listed"),
    pytest.param([RAY], True, id="ray-nodes-read-from-the-cluster"),
    pytest.param([{"name": "a", "provider": "local", "nodes": NODES}, RAY], True, id="one-of-two"),
]


class Files:
    """What ``Planner`` asks of an ``AppContext``: the mesh file, read and counted."""

    def __init__(self, folder: Path) -> None:
        self.mesh = folder / "mesh.yaml"
        (folder / "policies").mkdir()
        self.policies = folder / "policies"
        self.reads = 0

    def write(self, pools: list[dict[str, Any]]) -> None:
        document = {"apiVersion": "meshctl/v1", "kind": "Mesh", "metadata": {"name": "m"},
                    "spec": {"pools": pools}}  # fmt: skip
        before = self.mesh.stat().st_mtime_ns if self.mesh.exists() else 0
        self.mesh.write_text(yaml.safe_dump(document))
        os.utime(self.mesh, ns=(before + 10**9, before + 10**9))  # a change the stamp sees

    def rule_files(self) -> RuleFiles:
        return RuleFiles(str(self.mesh), str(self.policies))

    def mesh_and_catalogs(self) -> tuple[Mesh, dict[str, Any]]:
        self.reads += 1
        return Mesh.model_validate(yaml.safe_load(self.mesh.read_text())), {}

    def policy_set(self, mesh: Mesh) -> None:
        return None


@pytest.mark.parametrize(("pools", "reads_pools"), POOLS)
def test_a_check_reads_pools_only_for_a_ray_pool_that_lists_no_nodes(
    tmp_path: Path, pools: list[dict[str, Any]], reads_pools: bool
) -> None:
    files = Files(tmp_path)
    files.write(pools)
    assert Planner(files).reads_pools() is reads_pools  # type: ignore[arg-type]


def test_the_files_are_read_once_and_again_when_they_change(tmp_path: Path) -> None:
    files, now = Files(tmp_path), [0.0]
    files.write([{"name": "dc", "provider": "local", "nodes": NODES}])
    planner = Planner(files, clock=lambda: now[0])  # type: ignore[arg-type]
    assert not planner.reads_pools()
    now[0] += 2 * WATCH_S
    assert not planner.reads_pools()
    assert files.reads == 1  # unchanged: not read again
    files.write([RAY])
    now[0] += WATCH_S / 2
    assert not planner.reads_pools()  # not looked at within WATCH_S
    now[0] += WATCH_S
    assert planner.reads_pools()
    assert files.reads == 2
