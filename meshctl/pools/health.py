"""The operator's node health signals: one small file per node said to be unhealthy, under
``$MESHCTL_HOME/health/<pool>/<node>``, holding the reason; no file: nothing said. Written by
``meshctl nodes health NODE --unhealthy REASON`` (and removed by ``--healthy``).

Each node's agent (``meshctl.agent``) probes its GPUs, disks and NICs and the controller pulls
its verdict every cycle; these files are the operator's word beside it: a reason here takes a
node out of service whatever its agent says. The operator can also overrule an agent: ``--healthy``
on a node its agent calls unhealthy writes what the agent said under ``health-overruled/``,
and the controller ignores that verdict (the same words) until the agent says something else;
once the agent says healthy, the record is dropped, so the same words said later count again.
"""

from __future__ import annotations

from pathlib import Path

from meshctl.state.private import private_dir, write_private

FOLDER = "health"
OVERRULED = "health-overruled"


def signal_path(home: Path, pool: str, node: str) -> Path:
    return home / FOLDER / pool / node


def unhealthy(home: Path) -> dict[str, str]:
    """Reasons of the nodes the operator said are unhealthy, by ``pool/node``."""
    return {key: reason or "unhealthy" for key, reason in _read(home / FOLDER).items()}


def _read(root: Path) -> dict[str, str]:
    """Each file ``root/<pool>/<node>``'s text, by ``pool/node``."""
    found: dict[str, str] = {}
    if not root.is_dir():
        return found
    for pool in root.iterdir():
        if not pool.is_dir():
            continue
        for node in pool.iterdir():
            try:
                found[f"{pool.name}/{node.name}"] = node.read_text(encoding="utf-8").strip()
            except OSError:
                continue
    return found


def set_signal(home: Path, pool: str, node: str, reason: str | None) -> None:
    """Say the node is unhealthy (``reason``) or healthy (None)."""
    path = signal_path(home, pool, node)
    if reason is None:
        path.unlink(missing_ok=True)
        return
    private_dir(path.parent)
    write_private(path, reason + "\n")


def overruled(home: Path) -> dict[str, str]:
    """The agents' verdicts the operator said to ignore, by ``pool/node``."""
    return _read(home / OVERRULED)


def overrule(home: Path, pool: str, node: str, verdict: str | None) -> None:
    """Ignore the agent's ``verdict`` on the node (its exact words); None: ignore nothing."""
    path = home / OVERRULED / pool / node
    if verdict is None:
        path.unlink(missing_ok=True)
        return
    private_dir(path.parent)
    write_private(path, verdict + "\n")


def forget_overruled(home: Path, key: str) -> None:
    """Drop the overruled verdict of ``pool/node``."""
    pool, _, node = key.partition("/")
    overrule(home, pool, node, None)
