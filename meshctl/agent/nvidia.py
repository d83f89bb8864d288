"""What NVIDIA's documentation says that the verdict needs: how severe each XID is, and how
many NVLink links each GPU model has. Pure data and two look-ups.

An XID is ``fatal`` (the GPU cannot be trusted until it is reset or the machine restarted: the
node is unhealthy), ``reset`` (the GPU keeps working; NVIDIA advises a reset when convenient:
the node is degraded) or ``info`` (the application's fault, or a record of something the GPU
handled: reported, never held against the node). An XID not in the table is ``info``: most
XIDs are an application's fault, and a code the table does not know says nothing sure about
the GPU.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

XidSeverity = Literal["fatal", "reset", "info"]


@dataclass(frozen=True, slots=True)
class XidKind:
    severity: XidSeverity
    what: str  # NVIDIA's description, shortened


UNKNOWN_XID = XidKind("info", "not in NVIDIA's XID catalog as this agent knows it")

# NVIDIA's XID catalog, "Resolution Bucket (Immediate Action)" column:
#   https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html (Ampere and newer)
#   https://docs.nvidia.com/deploy/xid-errors/archive/index.html (Volta and older: XID 61)
# RESET_GPU, RESTART_BM (restart the machine) and the XID 48 and NVLink workflows (whose text
# says "a GPU reset or node reboot is needed to clear this error") are fatal here; RESTART_APP,
# IGNORE and CHECK_APP are info. XID 94's row says the error is contained to one application
# and "it is recommended to reset the GPU when convenient": reset.
XIDS: Mapping[int, XidKind] = {
    13: XidKind("info", "graphics engine exception (an application's fault)"),
    31: XidKind("info", "GPU memory page fault (an application's fault)"),
    43: XidKind("info", "GPU stopped processing an application's work; the GPU stays healthy"),
    45: XidKind("info", "preemptive cleanup: an application was stopped"),
    46: XidKind("fatal", "GPU stopped processing"),
    48: XidKind("fatal", "double-bit ECC error"),
    61: XidKind("info", "internal micro-controller breakpoint or warning"),
    62: XidKind("fatal", "internal micro-controller halt"),
    63: XidKind("info", "ECC page retirement or row remapping recorded"),
    64: XidKind("fatal", "ECC page retirement or row remapping failed"),
    68: XidKind("info", "video decoder exception (an application's fault)"),
    69: XidKind("info", "graphics engine class error (an application's fault)"),
    74: XidKind("fatal", "NVLink error"),
    79: XidKind("fatal", "GPU has fallen off the bus"),
    92: XidKind("info", "high single-bit ECC error rate (corrected)"),
    94: XidKind("reset", "contained ECC error: only the application that met it failed"),
    95: XidKind("fatal", "uncontained ECC error"),
    109: XidKind("fatal", "context switch timeout"),
    110: XidKind("fatal", "security fault"),
    119: XidKind("fatal", "GSP RPC timeout"),
    120: XidKind("fatal", "GSP error"),
    136: XidKind("fatal", "NVLink training failed"),
    140: XidKind("fatal", "uncorrectable ECC error the driver could not retire"),
    143: XidKind("fatal", "GPU initialisation error"),
    155: XidKind("fatal", "NVLink link down"),
    158: XidKind("fatal", "GPU fatal timeout"),
}

# NVLink links per GPU model, keyed by the name NVML and ``nvidia-smi --query-gpu=name`` give.
# PCIe cards have none of their own (0): those with a bridge show links, but which a bridge
# covers cannot be told here, so their inactive links are never held against the node. A
# model not here: its inactive links make the verdict unknown, not unhealthy.
NVLINK_LINKS: Mapping[str, int] = {
    "NVIDIA B200": 18,
    "NVIDIA H200": 18,
    "NVIDIA H100 80GB HBM3": 18,  # SXM5
    "NVIDIA H100 PCIe": 0,
    "NVIDIA A100-SXM4-40GB": 12,
    "NVIDIA A100-SXM4-80GB": 12,
    "NVIDIA A100-PCIE-40GB": 0,
    "NVIDIA A100 80GB PCIe": 0,
    "Tesla V100-SXM2-16GB": 6,
    "Tesla V100-SXM2-32GB": 6,
    "Tesla V100-PCIE-16GB": 0,
    "Tesla V100-PCIE-32GB": 0,
    "NVIDIA L40S": 0,
    "NVIDIA L40": 0,
    "NVIDIA L4": 0,
    "NVIDIA A10G": 0,
    "NVIDIA A10": 0,
    "Tesla T4": 0,
}


def xid_kind(code: int) -> XidKind:
    return XIDS.get(code, UNKNOWN_XID)


def nvlink_links(model: str) -> int | None:
    """How many NVLink links a GPU of ``model`` has; None when the table does not know."""
    return NVLINK_LINKS.get(model.strip())
