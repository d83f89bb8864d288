"""What a node agent's probe found, the verdict drawn from it, and the parsers of the text it
reads (``nvidia-smi``'s CSV query, its NVLink status, the kernel log's XID lines). Pure: the
reading is done by ``sources.py``.

A verdict is ``healthy``, ``degraded`` (shown, the node stays in service: a GPU throttling,
no GPU probe on this node) or ``unhealthy`` (the controller takes the node out of service and
moves its jobs: a GPU missing or lost, a fatal XID, uncorrectable ECC errors, pages waiting
to be retired, an NVLink link down, a checkpoint or cache folder nearly full, a NIC down).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

Verdict = Literal["healthy", "degraded", "unhealthy"]

# XIDs that mean the GPU or its memory cannot be trusted until the node is drained and the GPU
# reset or replaced (NVIDIA's XID catalogue): 48 double-bit ECC, 63/64 row remapping pending or
# failed, 74 NVLink error, 79 fallen off the bus, 92 high single-bit ECC rate, 94/95 contained
# and uncontained ECC errors, 119/120 GSP errors.
FATAL_XIDS = frozenset({48, 63, 64, 74, 79, 92, 94, 95, 119, 120})

# "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus."
_XID = re.compile(r"\bXid\b\s*(?:\((?:PCI:)?([^)]*)\))?:\s*(\d+)", re.IGNORECASE)
# "Unable to determine the device handle for GPU0000:3B:00.0: GPU is lost.  Reboot ..."
_LOST = re.compile(r"device handle for GPU\s*([0-9A-Fa-f:.]+):\s*(.*?)\s*$", re.MULTILINE)
# nvidia-smi nvlink --status: "GPU 0: NVIDIA H100 (UUID: ...)" then "\t Link 3: <inactive>"
_NVLINK_GPU = re.compile(r"^GPU (\d+):")
_NVLINK_LINK = re.compile(r"^\s*Link (\d+):\s*(.*?)\s*$")

# The fields of ``nvidia-smi --query-gpu``, in this order (``SMI_QUERY``).
SMI_FIELDS = (
    "index",
    "uuid",
    "name",
    "pci.bus_id",
    "memory.total",
    "memory.used",
    "temperature.gpu",
    "ecc.errors.uncorrected.volatile.total",
    "retired_pages.pending",
    "clocks_throttle_reasons.active",
)
SMI_QUERY = ",".join(SMI_FIELDS)

# Clock-throttle reasons (NVML's bit mask) that say the GPU is held back by heat or power.
THROTTLE_BITS = {0x8: "hw-slowdown", 0x20: "sw-thermal", 0x40: "hw-thermal", 0x80: "power-brake"}


@dataclass(frozen=True, slots=True)
class Gpu:
    index: int
    uuid: str
    name: str
    bus_id: str
    memory_total_mib: int | None = None
    memory_used_mib: int | None = None
    temperature_c: int | None = None
    ecc_uncorrected: int | None = None  # volatile: since the driver loaded
    retired_pages_pending: bool | None = None  # a reset is needed to retire them
    throttle: tuple[str, ...] = ()  # THROTTLE_BITS names active now
    nvlink_down: tuple[int, ...] = ()  # links the GPU has that are inactive


@dataclass(frozen=True, slots=True)
class Xid:
    xid: int
    bus_id: str  # as the kernel log gives it ("0000:3b:00"), or "" when it gives none


@dataclass(frozen=True, slots=True)
class Disk:
    path: str
    free_gib: float | None  # None: the folder cannot be read
    total_gib: float | None = None


@dataclass(frozen=True, slots=True)
class Nic:
    name: str
    state: str  # up, down, unknown (the kernel cannot tell), missing


@dataclass(frozen=True, slots=True)
class Limits:
    expected_gpus: int = 0  # what the node declares
    min_free_gib: float = 5.0  # on each checkpoint and cache folder
    vendor: str = "nvidia"  # its devices' vendor: the GPU probe reads NVIDIA's tools only


@dataclass(frozen=True, slots=True)
class Probe:
    """One probe of the node: its facts and where they came from."""

    node: str
    at_s: float
    took_ms: float
    source: str  # nvml, nvidia-smi, or none (no driver library and no nvidia-smi here)
    gpus: tuple[Gpu, ...] = ()
    lost: tuple[str, ...] = ()  # GPUs the driver lists but cannot reach ("GPU is lost")
    xids: tuple[Xid, ...] = ()
    disks: tuple[Disk, ...] = ()
    nics: tuple[Nic, ...] = ()
    errors: tuple[str, ...] = ()  # a source that failed, and how
    gpu_error: str | None = None  # the GPU source itself failed (driver not answering)

    def to_json(self, limits: Limits) -> dict[str, Any]:
        verdict, reasons = judge(self, limits)
        return asdict(self) | {
            "verdict": verdict,
            "reasons": list(reasons),
            "expected_gpus": limits.expected_gpus,
        }


@dataclass(frozen=True, slots=True)
class Finding:
    verdict: Verdict
    reason: str


@dataclass
class _Findings:
    found: list[Finding] = field(default_factory=list)

    def bad(self, reason: str) -> None:
        self.found.append(Finding("unhealthy", reason))

    def weak(self, reason: str) -> None:
        self.found.append(Finding("degraded", reason))


def judge(probe: Probe, limits: Limits) -> tuple[Verdict, tuple[str, ...]]:
    """The verdict on a probe and its reasons, the worst first."""
    f = _Findings()
    if probe.gpu_error is not None:
        f.bad(f"GPU driver not answering: {probe.gpu_error}")
    elif probe.source == "none":
        if limits.expected_gpus and limits.vendor != "nvidia":
            f.weak(f"no device probe for {limits.vendor}: the probe reads NVIDIA's tools only")
        elif limits.expected_gpus:
            f.weak("no GPU probe: no NVIDIA driver library and no nvidia-smi on this node")
    else:
        seen = len(probe.gpus)
        if seen < limits.expected_gpus:
            f.bad(f"sees {seen} of the {limits.expected_gpus} GPUs the node declares")
    for bus in probe.lost:
        f.bad(f"GPU {bus} is lost")
    for xid in sorted({x for x in probe.xids if x.xid in FATAL_XIDS}, key=_xid_key):
        f.bad(f"XID {xid.xid}" + (f" on GPU {xid.bus_id}" if xid.bus_id else ""))
    for gpu in probe.gpus:
        if gpu.ecc_uncorrected:
            f.bad(f"GPU {gpu.index}: {gpu.ecc_uncorrected} uncorrectable ECC errors")
        if gpu.retired_pages_pending:
            f.bad(f"GPU {gpu.index}: retired pages pending (needs a reset)")
        if gpu.nvlink_down:
            links = ", ".join(str(n) for n in gpu.nvlink_down)
            f.bad(f"GPU {gpu.index}: NVLink link {links} down")
        if gpu.throttle:
            f.weak(f"GPU {gpu.index}: throttled ({', '.join(gpu.throttle)})")
    for disk in probe.disks:
        if disk.free_gib is None:
            f.bad(f"{disk.path}: cannot be read")
        elif disk.free_gib < limits.min_free_gib:
            f.bad(f"{disk.path}: {disk.free_gib:.1f} GiB free, under {limits.min_free_gib:g}")
    for nic in probe.nics:
        if nic.state in ("down", "missing"):
            f.bad(f"NIC {nic.name} is {nic.state}")
    for error in probe.errors:
        f.weak(error)
    worst: Verdict = "healthy"
    if f.found:
        worst = "unhealthy" if any(x.verdict == "unhealthy" for x in f.found) else "degraded"
    ordered = sorted(f.found, key=lambda x: x.verdict != "unhealthy")
    return worst, tuple(x.reason for x in ordered)


def _xid_key(xid: Xid) -> tuple[int, str]:
    return xid.xid, xid.bus_id


# --- parsers -----------------------------------------------------------------------------------


def parse_smi_query(text: str) -> list[Gpu]:
    """GPUs from ``nvidia-smi --query-gpu=<SMI_QUERY> --format=csv,noheader,nounits``; lines
    that are not a GPU's (a "GPU is lost" complaint) are skipped: ``parse_lost`` reads them."""
    gpus = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != len(SMI_FIELDS) or not cells[0].isdigit():
            continue
        row = dict(zip(SMI_FIELDS, cells, strict=True))
        gpus.append(
            Gpu(
                index=int(row["index"]),
                uuid=row["uuid"],
                name=row["name"],
                bus_id=row["pci.bus_id"],
                memory_total_mib=_int(row["memory.total"]),
                memory_used_mib=_int(row["memory.used"]),
                temperature_c=_int(row["temperature.gpu"]),
                ecc_uncorrected=_int(row["ecc.errors.uncorrected.volatile.total"]),
                retired_pages_pending=_yes(row["retired_pages.pending"]),
                throttle=throttle_reasons(_int(row["clocks_throttle_reasons.active"], 16)),
            )
        )
    return gpus


def throttle_reasons(mask: int | None) -> tuple[str, ...]:
    if not mask:
        return ()
    return tuple(name for bit, name in sorted(THROTTLE_BITS.items()) if mask & bit)


def parse_lost(text: str) -> list[str]:
    """Bus ids of the GPUs ``nvidia-smi`` cannot get a handle for (lost, or any other error)."""
    return [m.group(1) for m in _LOST.finditer(text)]


def parse_nvlink(text: str) -> dict[int, tuple[int, ...]]:
    """GPU index -> its inactive NVLink links, from ``nvidia-smi nvlink --status``."""
    down: dict[int, list[int]] = {}
    gpu: int | None = None
    for line in text.splitlines():
        if m := _NVLINK_GPU.match(line):
            gpu = int(m.group(1))
            down.setdefault(gpu, [])
        elif (m := _NVLINK_LINK.match(line)) and gpu is not None and "inactive" in m.group(2):
            down[gpu].append(int(m.group(1)))
    return {g: tuple(links) for g, links in down.items() if links}


def xids_in(kernel_log: str) -> list[Xid]:
    """The XIDs the kernel log holds, in order."""
    return [Xid(int(m.group(2)), (m.group(1) or "").strip()) for m in _XID.finditer(kernel_log)]


def with_nvlink(gpus: Sequence[Gpu], down: Mapping[int, tuple[int, ...]]) -> list[Gpu]:
    return [replace(g, nvlink_down=down.get(g.index, ())) for g in gpus]


def unique(xids: Iterable[Xid]) -> tuple[Xid, ...]:
    return tuple(dict.fromkeys(xids))


def _int(cell: str, base: int = 10) -> int | None:
    try:
        return int(cell, base)
    except ValueError:
        try:
            return int(float(cell))
        except ValueError:
            return None  # [N/A], [Not Supported]


def _yes(cell: str) -> bool | None:
    return {"yes": True, "no": False}.get(cell.strip().lower())
