"""The operator's node health signals: one small file per node said to be unhealthy, under
``$MESHCTL_HOME/health/<pool>/<node>``, holding the reason; no file: nothing said. Written by
``meshctl nodes health NODE --unhealthy REASON`` (and removed by ``--healthy``).

Each node's agent (``meshctl.agent``) probes its GPUs, disks and NICs and the controller pulls
its verdict every cycle; these files are the operator's word beside it: a reason here takes a
node out of service whatever its agent says.
"""

from __future__ import annotations

from pathlib import Path

from meshctl.state.private import private_dir, write_private

FOLDER = "health"


def signal_path(home: Path, pool: str, node: str) -> Path:
    return home / FOLDER / pool / node


def unhealthy(home: Path) -> dict[str, str]:
    """Reasons of the nodes whose probe says unhealthy, by ``pool/node``."""
    root = home / FOLDER
    found: dict[str, str] = {}
    if not root.is_dir():
        return found
    for pool in root.iterdir():
        if not pool.is_dir():
            continue
        for node in pool.iterdir():
            try:
                reason = node.read_text(encoding="utf-8").strip()
            except OSError:
                continue
            found[f"{pool.name}/{node.name}"] = reason or "unhealthy"
    return found


def set_signal(home: Path, pool: str, node: str, reason: str | None) -> None:
    """Say the node is unhealthy (``reason``) or healthy (None)."""
    path = signal_path(home, pool, node)
    if reason is None:
        path.unlink(missing_ok=True)
        return
    private_dir(path.parent)
    write_private(path, reason + "\n")
