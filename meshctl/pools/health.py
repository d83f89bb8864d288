"""Node health signals: what a per-node health probe reports, where the controller reads it.

In production a probe runs on every GPU node (a DaemonSet-like agent, a cron job, DCGM's
health watches) and reads the GPUs' error state: ``nvidia-smi`` / DCGM XID errors (79: fallen
off the bus, 48/94/95: uncorrectable ECC, 63/64: row remapping), thermal or power faults.
Whatever it finds is a *signal*: one small file per unhealthy node, under
``$MESHCTL_HOME/health/<pool>/<node>``, holding the reason. No file: healthy. Here the signal
is injected by ``meshctl nodes health NODE --unhealthy REASON`` (and cleared by
``--healthy``), so the controller's reaction is exercised exactly as in production.

``nvidia_smi_reason`` turns ``nvidia-smi`` output into a reason (None: nothing wrong), for a
probe on a real GPU node to write.
"""

from __future__ import annotations

import re
from pathlib import Path

from meshctl.state.private import private_dir, write_private

FOLDER = "health"
XID = re.compile(r"\bXid\b\s*(?:\([^)]*\))?:\s*(\d+)", re.IGNORECASE)  # "Xid (PCI:..): 79"
FATAL_XIDS = frozenset({48, 63, 64, 74, 79, 92, 94, 95, 119, 120})


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


def nvidia_smi_reason(kernel_log: str, ecc_uncorrected: int = 0) -> str | None:
    """A reason to take the node out of service, from kernel log lines (``dmesg``) and the
    uncorrected ECC error count ``nvidia-smi -q -d ECC`` reports; None when healthy."""
    fatal = sorted({int(x) for x in XID.findall(kernel_log)} & FATAL_XIDS)
    if fatal:
        return "GPU XID " + ", ".join(str(x) for x in fatal)
    if ecc_uncorrected > 0:
        return f"{ecc_uncorrected} uncorrected ECC errors"
    return None
