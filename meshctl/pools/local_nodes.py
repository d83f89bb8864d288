"""The embedded pool's nodes after it started: which are dead, and bringing them back.

A node of a local pool is two sessions of processes on this machine (``local.py``): its
meshctl agent, and ``ray start --block`` with the raylet and workers under it. The node is
dead when no live process of its own runs ``ray start``: its raylet is gone (killed,
crashed), whatever became of its agent. Ray lists such a node dead for a while and then not
at all; the run file still names it, so ``meshctl up`` knows to start it again and ``pools
check`` fails the pool until it is back.
"""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path

from meshctl.host.procs import start_ticks, zombie
from meshctl.model.accelerators import AcceleratorsSpec
from meshctl.model.mesh import LocalPool
from meshctl.pools.local import (
    LocalCluster,
    LocalPoolError,
    Process,
    add_node,
    remove_node,
)


def dead_nodes(cluster: LocalCluster, pool: LocalPool) -> list[str]:
    """The pool's declared nodes whose Ray process is gone, in the mesh's order."""
    declared = [name for group in pool.nodes for name in group.node_names()]
    running = {p.node for p in cluster.processes if _runs_ray(p)}
    return [name for name in declared if name not in running]


def restart(
    cluster: LocalCluster,
    pool: LocalPool,
    names: list[str],
    run_dir: Path,
    registry: AcceleratorsSpec | None = None,
) -> dict[str, str]:
    """Start each of ``names`` again (what is left of it stopped first, its agent too); those
    that could not start, and why."""
    failed: dict[str, str] = {}
    for group in pool.nodes:
        for name in group.node_names():
            if name not in names:
                continue
            remove_node(cluster, name, run_dir)
            try:
                add_node(cluster, name, group, run_dir, pool.agents, registry)
            except LocalPoolError as err:
                failed[name] = str(err)
    return failed


def _runs_ray(process: Process) -> bool:
    """Whether the recorded session leader is alive, ours (not a reused pid), and ``ray start``
    (a node's other session is its agent's)."""
    if start_ticks(process.pid) != process.start_ticks or zombie(process.pid):
        return False
    try:
        argv = Path(f"/proc/{process.pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    # ``ray`` is a script: its interpreter comes first in the command line, then its path
    return any(
        word.rsplit(b"/", 1)[-1] == b"ray" and after == b"start" for word, after in pairwise(argv)
    )
