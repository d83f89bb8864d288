"""Where a probe's facts come from.

GPUs: NVML through nvidia-ml-py where the driver's library loads (cheap: no process per
probe; XIDs come as NVML events), else ``nvidia-smi`` (a query of every GPU, then its NVLink
status), else none. XIDs also come from the kernel log: ``dmesg``, or a file the operator
names (``--kernel-log``, e.g. a journald export), read whole each time. Disks: ``statvfs`` of
the checkpoint and cache folders. NICs: ``/sys/class/net/<nic>/operstate``; by default the NIC
of the default route.

The sources report what the tools say, no more: every NVLink link a GPU reports inactive or
disabled (a PCIe card reports all it could have), every XID line of the kernel log. Which
links the model has is the verdict's business (``probe.py``, ``nvidia.py``); which XIDs count,
the agent's (``xids.py``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from meshctl.agent.probe import (
    SMI_QUERY,
    Disk,
    Gpu,
    Nic,
    Xid,
    parse_lost,
    parse_nvlink,
    parse_smi_query,
    throttle_reasons,
    with_nvlink,
)

COMMAND_TIMEOUT_S = 10.0
GIB = 1024**3


@dataclass
class GpuReading:
    gpus: list[Gpu] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    xids: list[Xid] = field(default_factory=list)  # XIDs the source itself saw (NVML events)
    error: str | None = None  # the source failed as a whole (the driver does not answer)


class GpuSource(Protocol):
    name: str

    def read(self) -> GpuReading: ...


class SmiSource:
    """``nvidia-smi`` on the PATH: a CSV query of every GPU, then the NVLink status."""

    name = "nvidia-smi"

    def __init__(self, command: str) -> None:
        self.command = command

    def read(self) -> GpuReading:
        query = [self.command, f"--query-gpu={SMI_QUERY}", "--format=csv,noheader,nounits"]
        done = _run(query)
        if isinstance(done, str):
            return GpuReading(error=done)
        text = done.stdout + "\n" + done.stderr
        gpus, lost = parse_smi_query(done.stdout), parse_lost(text)
        if done.returncode != 0 and not gpus and not lost:
            return GpuReading(error=_first_line(text) or f"exit status {done.returncode}")
        links = _run([self.command, "nvlink", "--status"])
        if not isinstance(links, str) and links.returncode == 0:
            gpus = with_nvlink(gpus, parse_nvlink(links.stdout))
        return GpuReading(gpus, lost)


class NvmlSource:
    """NVML through nvidia-ml-py: every GPU's facts, and XIDs as they happen (critical-XID
    events, drained at each read)."""

    name = "nvml"

    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml
        self._events: Any = None
        try:
            self._events = nvml.nvmlEventSetCreate()
        except nvml.NVMLError:
            self._events = None
        self._registered: set[int] = set()

    def read(self) -> GpuReading:
        nv = self.nvml
        reading = GpuReading()
        try:
            count = nv.nvmlDeviceGetCount()
        except nv.NVMLError as err:
            return GpuReading(error=str(err))
        for index in range(count):
            try:
                handle = nv.nvmlDeviceGetHandleByIndex(index)
            except nv.NVMLError as err:  # NVMLError_GpuIsLost among them
                reading.lost.append(f"{index} ({err})")
                continue
            reading.gpus.append(self._gpu(index, handle))
            self._register(index, handle)
        reading.xids = self._drain()
        return reading

    def _gpu(self, index: int, handle: Any) -> Gpu:
        nv = self.nvml
        memory = _try(lambda: nv.nvmlDeviceGetMemoryInfo(handle))
        ecc = _try(
            lambda: nv.nvmlDeviceGetTotalEccErrors(
                handle, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC
            )
        )
        pending = _try(lambda: nv.nvmlDeviceGetRetiredPagesPendingStatus(handle))
        mask = _try(lambda: nv.nvmlDeviceGetCurrentClocksThrottleReasons(handle))
        pci = _try(lambda: nv.nvmlDeviceGetPciInfo(handle))
        return Gpu(
            index=index,
            uuid=str(_try(lambda: nv.nvmlDeviceGetUUID(handle)) or ""),
            name=str(_try(lambda: nv.nvmlDeviceGetName(handle)) or ""),
            bus_id=str(getattr(pci, "busId", "") or ""),
            memory_total_mib=None if memory is None else int(memory.total) // 2**20,
            memory_used_mib=None if memory is None else int(memory.used) // 2**20,
            temperature_c=_try(
                lambda: int(nv.nvmlDeviceGetTemperature(handle, nv.NVML_TEMPERATURE_GPU))
            ),
            ecc_uncorrected=None if ecc is None else int(ecc),
            retired_pages_pending=None if pending is None else bool(pending),
            throttle=throttle_reasons(None if mask is None else int(mask)),
            nvlink_down=self._links_down(handle),
        )

    def _links_down(self, handle: Any) -> tuple[int, ...]:
        nv, down = self.nvml, []
        for link in range(int(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18))):
            try:
                if nv.nvmlDeviceGetNvLinkState(handle, link) == nv.NVML_FEATURE_DISABLED:
                    down.append(link)
            except nv.NVMLError:
                continue  # not a link this GPU could have
        return tuple(down)

    def _register(self, index: int, handle: Any) -> None:
        if self._events is None or index in self._registered:
            return
        try:
            kinds = self.nvml.nvmlEventTypeXidCriticalError
            self.nvml.nvmlDeviceRegisterEvents(handle, kinds, self._events)
            self._registered.add(index)
        except self.nvml.NVMLError:
            self._registered.add(index)  # not supported on this GPU: do not ask again

    def _drain(self) -> list[Xid]:
        found: list[Xid] = []
        while self._events is not None:
            try:
                event = self.nvml.nvmlEventSetWait_v2(self._events, 0)
            except self.nvml.NVMLError:  # NVMLError_Timeout: none waiting
                break
            pci = _try(lambda e=event: self.nvml.nvmlDeviceGetPciInfo(e.device))
            found.append(Xid(int(event.eventData), str(getattr(pci, "busId", "") or "")))
        return found


def gpu_source(smi: str = "nvidia-smi", nvml: bool = True) -> GpuSource | None:
    """NVML where the driver's library loads, else ``nvidia-smi`` where it is on the PATH."""
    if nvml:
        try:
            import pynvml

            pynvml.nvmlInit()
            return NvmlSource(pynvml)
        except Exception:
            pass
    path = shutil.which(smi)
    return SmiSource(path) if path else None


class KernelLog:
    """The kernel's log, for XID lines: a file when one is named, else ``dmesg``."""

    def __init__(self, path: str | None = None) -> None:
        self.path = path

    def read(self) -> tuple[str, str | None]:
        """Its text, and why it could not be read (None when it could)."""
        if self.path is not None:
            try:
                return Path(self.path).read_text(encoding="utf-8", errors="replace"), None
            except OSError as err:
                return "", f"kernel log {self.path}: {err.strerror or err}"
        dmesg = shutil.which("dmesg")
        if dmesg is None:
            return "", "kernel log: no dmesg on this node"
        done = _run([dmesg])
        if isinstance(done, str) or done.returncode != 0:
            why = done if isinstance(done, str) else _first_line(done.stderr)
            if "not permitted" in why or "denied" in why:  # kernel.dmesg_restrict, not root
                return "", (
                    f"kernel log: dmesg refused this user ({why}), so XIDs are not watched; "
                    "run the agent as root, or name a log it can read with --kernel-log"
                )
            return "", f"kernel log: dmesg failed ({why})"
        return done.stdout, None


def disks(paths: Sequence[str]) -> list[Disk]:
    found = []
    for path in paths:
        try:
            usage = shutil.disk_usage(path)
        except OSError:
            found.append(Disk(path, None))
            continue
        found.append(Disk(path, round(usage.free / GIB, 2), round(usage.total / GIB, 2)))
    return found


def nics(names: Sequence[str], sysfs: Path = Path("/sys/class/net")) -> list[Nic]:
    found = []
    for name in names:
        try:
            state = (sysfs / name / "operstate").read_text().strip()
        except OSError:
            state = "missing"
        found.append(Nic(name, state if state in ("up", "down", "missing") else "unknown"))
    return found


def default_route_nic(routes: Path = Path("/proc/net/route")) -> str | None:
    """The NIC of the default route (destination 00000000), or None."""
    try:
        lines = routes.read_text().splitlines()[1:]
    except OSError:
        return None
    for line in lines:
        cells = line.split()
        if len(cells) > 1 and cells[1] == "00000000":
            return cells[0]
    return None


def _run(command: list[str]) -> subprocess.CompletedProcess[str] | str:
    try:
        return subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_S,
            env={**os.environ, "LC_ALL": "C"},
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return f"{Path(command[0]).name} did not answer within {COMMAND_TIMEOUT_S:.0f} s"
    except OSError as err:
        return f"{Path(command[0]).name}: {err.strerror or err}"


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def _try(read: Any) -> Any:
    """A field NVML cannot give on this GPU (not supported) is None, not a failure."""
    try:
        return read()
    except Exception:
        return None
