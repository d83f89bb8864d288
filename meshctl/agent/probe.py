"""What a node agent's probe found, the verdict drawn from it, and the parsers of the text it
reads (``nvidia-smi``'s CSV query, its NVLink status, the kernel log's XID lines). Pure: the
reading is done by ``sources.py``, the choice of which XIDs count by ``xids.py``, and what
NVIDIA says of each XID and GPU model is in ``nvidia.py``.

A verdict is, from best to worst:

- ``healthy``: nothing found against the node (informational findings, such as an XID that
  was an application's fault, or GPUs that are emulated and so have nothing to probe, are
  listed as notes);
- ``unknown``: the agent cannot tell: no GPU probe on a node that declares real GPUs (no
  driver found, a vendor whose tools it does not read), or NVLink links inactive on a GPU
  model it has no link count for; the node stays in service;
- ``degraded`` (shown, the node stays in service): a GPU throttling, an XID after which NVIDIA
  advises a reset when convenient, a kernel log it cannot read;
- ``unhealthy`` (the controller takes the node out of service and moves its jobs): a GPU
  missing or lost, a fatal XID, uncorrectable ECC errors, pages waiting to be retired, an
  NVLink link down that the GPU model has, a checkpoint or cache folder nearly full, a NIC
  down.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

from meshctl.agent.nvidia import nvlink_links, xid_kind

Verdict = Literal["healthy", "unknown", "degraded", "unhealthy"]
VERDICTS: tuple[Verdict, ...] = ("healthy", "unknown", "degraded", "unhealthy")  # best first

# How long an XID counts against the node after the agent saw it logged: long enough for the
# controller to drain the node; a GPU still broken after it shows in its state (lost, ECC
# errors, links down), which every probe reads afresh.
XID_WINDOW_S = 3600.0

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
    # links the tool reports inactive or disabled; whether the model has them: nvidia.py
    nvlink_down: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Xid:
    xid: int
    bus_id: str  # as the kernel log gives it ("0000:3b:00"), or "" when it gives none
    # when the agent first saw it, on its clock; None: in the kernel log before the agent
    # started or before the operator's last clear (it never counts)
    seen_at_s: float | None = None


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
    xid_window_s: float = XID_WINDOW_S  # an XID counts this long after it was seen
    # its GPUs are declared to Ray with no device behind them (the embedded pool's nodes):
    # without a driver there is nothing to probe, which is no fault of the node
    emulated: bool = False


@dataclass(frozen=True, slots=True)
class Probe:
    """One probe of the node: its facts and where they came from."""

    node: str
    at_s: float
    took_ms: float
    source: str  # nvml, nvidia-smi, or none (no driver library and no nvidia-smi here)
    gpus: tuple[Gpu, ...] = ()
    lost: tuple[str, ...] = ()  # GPUs the driver lists but cannot reach ("GPU is lost")
    xids: tuple[Xid, ...] = ()  # those that count: see xids.py
    disks: tuple[Disk, ...] = ()
    nics: tuple[Nic, ...] = ()
    errors: tuple[str, ...] = ()  # a source that failed, and how
    gpu_error: str | None = None  # the GPU source itself failed (driver not answering)

    def to_json(self, limits: Limits) -> dict[str, Any]:
        judged = judge(self, limits)
        return asdict(self) | {
            "verdict": judged.verdict,
            "reasons": list(judged.reasons),
            "notes": list(judged.notes),
            "expected_gpus": limits.expected_gpus,
        }


@dataclass(frozen=True, slots=True)
class Finding:
    verdict: Verdict  # healthy: a note, reported and never held against the node
    reason: str


@dataclass(frozen=True, slots=True)
class Judgement:
    verdict: Verdict
    reasons: tuple[str, ...]  # why the verdict is not healthy, the worst first
    notes: tuple[str, ...] = ()  # informational findings: never change the verdict


@dataclass
class _Findings:
    found: list[Finding] = field(default_factory=list)

    def bad(self, reason: str) -> None:
        self.found.append(Finding("unhealthy", reason))

    def weak(self, reason: str) -> None:
        self.found.append(Finding("degraded", reason))

    def unsure(self, reason: str) -> None:
        self.found.append(Finding("unknown", reason))

    def note(self, reason: str) -> None:
        self.found.append(Finding("healthy", reason))


def judge(probe: Probe, limits: Limits) -> Judgement:
    """The verdict on a probe: the worst of its findings, with their reasons and notes."""
    f = _Findings()
    _judge_gpu_source(f, probe, limits)
    for bus in probe.lost:
        f.bad(f"GPU {bus} is lost")
    _judge_xids(f, probe.xids)
    for gpu in probe.gpus:
        _judge_gpu(f, gpu)
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
    held = [x for x in f.found if x.verdict != "healthy"]
    worst: Verdict = max((x.verdict for x in held), key=VERDICTS.index, default="healthy")
    ordered = sorted(held, key=lambda x: -VERDICTS.index(x.verdict))
    notes = tuple(x.reason for x in f.found if x.verdict == "healthy")
    return Judgement(worst, tuple(x.reason for x in ordered), notes)


def _judge_gpu_source(f: _Findings, probe: Probe, limits: Limits) -> None:
    if probe.gpu_error is not None:
        f.bad(f"GPU driver not answering: {probe.gpu_error}")
    elif probe.source == "none":  # nothing is known of its GPUs: not a fault of the node
        if limits.expected_gpus and limits.emulated:
            f.note(f"{limits.expected_gpus} emulated GPUs (declared to Ray, no device): not probed")
        elif limits.expected_gpus and limits.vendor != "nvidia":
            f.unsure(f"no device probe for {limits.vendor}: the probe reads NVIDIA's tools only")
        elif limits.expected_gpus:
            f.unsure("no GPU probe: no NVIDIA driver library and no nvidia-smi on this node")
    elif len(probe.gpus) < limits.expected_gpus:
        f.bad(f"sees {len(probe.gpus)} of the {limits.expected_gpus} GPUs the node declares")


def _judge_xids(f: _Findings, xids: Iterable[Xid]) -> None:
    """Each XID and GPU once, by its severity in NVIDIA's catalog (``nvidia.XIDS``). A fatal
    one's reason is only its code and GPU: the controller's events and its operators' tools
    match on those words."""
    for code, bus in sorted({(x.xid, x.bus_id) for x in xids}):
        kind, on = xid_kind(code), f" on GPU {bus}" if bus else ""
        if kind.severity == "fatal":
            f.bad(f"XID {code}{on}")
        elif kind.severity == "reset":
            f.weak(f"XID {code}{on}: {kind.what}; reset the GPU when convenient")
        else:
            f.note(f"XID {code}{on}: {kind.what}")


def _judge_gpu(f: _Findings, gpu: Gpu) -> None:
    if gpu.ecc_uncorrected:
        f.bad(f"GPU {gpu.index}: {gpu.ecc_uncorrected} uncorrectable ECC errors")
    if gpu.retired_pages_pending:
        f.bad(f"GPU {gpu.index}: retired pages pending (needs a reset)")
    if gpu.nvlink_down:
        _judge_nvlink(f, gpu)
    if gpu.throttle:
        f.weak(f"GPU {gpu.index}: throttled ({', '.join(gpu.throttle)})")


def _judge_nvlink(f: _Findings, gpu: Gpu) -> None:
    """Inactive links count only where the GPU's model has them (``nvidia.NVLINK_LINKS``): a
    PCIe card reports every link it could have as disabled."""
    links = nvlink_links(gpu.name)
    if links is None:
        shown = ", ".join(str(n) for n in gpu.nvlink_down)
        f.unsure(
            f"GPU {gpu.index}: NVLink link {shown} inactive; how many links a "
            f"{gpu.name or 'GPU of unknown model'} has is not known"
        )
        return
    down = [n for n in gpu.nvlink_down if n < links]
    if down:
        shown = ", ".join(str(n) for n in down)
        f.bad(f"GPU {gpu.index}: NVLink link {shown} down ({len(down)} of its {links} links)")


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


def xid_lines(kernel_log: str) -> list[tuple[str, Xid]]:
    """The kernel log's XID lines, each with its XID, in order."""
    found = []
    for line in kernel_log.splitlines():
        if m := _XID.search(line):
            found.append((line, Xid(int(m.group(2)), (m.group(1) or "").strip())))
    return found


def xids_in(kernel_log: str) -> list[Xid]:
    """The XIDs the kernel log holds, in order."""
    return [xid for _, xid in xid_lines(kernel_log)]


def with_nvlink(gpus: Sequence[Gpu], down: Mapping[int, tuple[int, ...]]) -> list[Gpu]:
    return [replace(g, nvlink_down=down.get(g.index, ())) for g in gpus]


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
