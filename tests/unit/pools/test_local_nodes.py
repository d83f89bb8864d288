"""Which of the embedded pool's nodes are dead: those whose ``ray start`` process is gone,
whatever became of their agent. Real processes stand in for a node's two sessions (no Ray):
a script named ``ray`` run as ``ray start --block``, and an agent."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from meshctl.files import load_one
from meshctl.host.procs import start_ticks
from meshctl.model.mesh import LocalPool, Mesh
from meshctl.pools.local import LocalCluster, Process
from meshctl.pools.local_nodes import dead_nodes
from tests.conftest import wait_until

pytestmark = pytest.mark.unit

MESH = """\
apiVersion: meshctl/v1
kind: Mesh
metadata: {name: t}
spec:
  pools:
    - name: lab
      provider: local
      nodes:
        - {name: n, count: 3, gpus: 1, cpus: 1, memory_gib: 1GiB,
           accelerator: {vendor: nvidia, model: A100, memory_gib: 80GiB}}
"""


@pytest.fixture
def started(tmp_path: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Popen handles, killed and reaped at the end."""
    found: list[subprocess.Popen[bytes]] = []
    yield found
    for proc in found:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def _spawn(started: list[subprocess.Popen[bytes]], argv: list[str]) -> Process:
    """``argv`` started, once it runs: Popen returns when the child is forked, and until it
    has exec'd, /proc shows the parent's command line (a node that does not run ray)."""
    proc = subprocess.Popen(argv, start_new_session=True)
    started.append(proc)
    cmdline = Path(f"/proc/{proc.pid}/cmdline")
    wait_until(
        f"{argv} never ran",
        lambda: cmdline.read_bytes().split(b"\0")[-2:-1] == [argv[-1].encode()],
        30.0,
        every_s=0.01,
    )
    ticks = start_ticks(proc.pid)
    assert ticks is not None
    return Process(argv[-1], proc.pid, ticks)


@pytest.mark.parametrize(
    ("killed", "dead"),
    [
        ((), []),
        (("ray n-1",), ["n-1"]),
        (("agent n-2",), []),
        (("ray n-0", "agent n-0", "ray n-2"), ["n-0", "n-2"]),
    ],
    ids=[
        "all running",
        "a raylet killed, its agent alive: dead",
        "only an agent killed: the node runs (its silence is the agent watch's to judge)",
        "two nodes killed, one with its agent",
    ],
)
def test_a_node_is_dead_when_its_ray_process_is_gone(
    tmp_path: Path,
    started: list[subprocess.Popen[bytes]],
    killed: tuple[str, ...],
    dead: list[str],
) -> None:
    ray = tmp_path / "bin" / "ray"  # as the venv's console script: run by its interpreter
    ray.parent.mkdir()
    ray.write_text(f"#!{sys.executable}\nimport time\ntime.sleep(120)\n")
    ray.chmod(0o755)
    (tmp_path / "mesh.yaml").write_text(MESH)
    pool = load_one(tmp_path / "mesh.yaml", Mesh).pool("lab")
    assert isinstance(pool, LocalPool)
    processes = {}
    for name in ("n-0", "n-1", "n-2"):
        agent = [sys.executable, "-c", "import time; time.sleep(120)", name]
        processes[f"agent {name}"] = _spawn(started, agent)
        processes[f"ray {name}"] = _spawn(started, [str(ray), "start", "--block", name])
    cluster = LocalCluster("lab", "http://127.0.0.1:1", "127.0.0.1:2", "", "", "")
    cluster.processes = list(processes.values())
    for which in killed:
        os.kill(processes[which].pid, signal.SIGKILL)
    for proc in started:  # reaped or not: a zombie is dead too
        if proc.pid in {processes[w].pid for w in killed}:
            proc.wait()
    assert dead_nodes(cluster, pool) == dead
