"""The NVML source against a stand-in for nvidia-ml-py's module (a mock: no NVIDIA driver
library here), shaped like pynvml's calls, errors and event structures."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from meshctl.agent.probe import Xid
from meshctl.agent.sources import NvmlSource, gpu_source

pytestmark = pytest.mark.unit


class NVMLError(Exception):
    pass


class GpuIsLost(NVMLError):
    pass


class Timeout(NVMLError):
    pass


class FakeNvml:
    NVMLError = NVMLError
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC, NVML_TEMPERATURE_GPU = 1, 0, 0
    NVML_FEATURE_DISABLED, NVML_NVLINK_MAX_LINKS = 0, 4
    nvmlEventTypeXidCriticalError = 8

    def __init__(self) -> None:
        self.lost = {2}
        self.events: list[Any] = []

    def nvmlDeviceGetCount(self) -> int:
        return 3

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        if i in self.lost:
            raise GpuIsLost("GPU is lost")
        return i

    def nvmlDeviceGetMemoryInfo(self, h: int) -> Any:
        return SimpleNamespace(total=80 * 2**30, used=2**30)

    def nvmlDeviceGetTotalEccErrors(self, h: int, kind: int, counter: int) -> int:
        return 5 if h == 1 else 0

    def nvmlDeviceGetRetiredPagesPendingStatus(self, h: int) -> int:
        raise NVMLError("Not Supported")

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h: int) -> int:
        return 0x40 if h == 0 else 0x1

    def nvmlDeviceGetPciInfo(self, h: int) -> Any:
        return SimpleNamespace(busId=f"00000000:{h + 1:02X}:00.0")

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return f"GPU-{h}"

    def nvmlDeviceGetName(self, h: int) -> str:
        return "NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        return 50

    def nvmlDeviceGetNvLinkState(self, h: int, link: int) -> int:
        if link >= 2:
            raise NVMLError("Invalid Argument")
        return 0 if (h, link) == (1, 1) else 1

    def nvmlEventSetCreate(self) -> str:
        return "set"

    def nvmlDeviceRegisterEvents(self, h: int, kinds: int, events: str) -> None:
        assert kinds == 8

    def nvmlEventSetWait_v2(self, events: str, timeout_ms: int) -> Any:
        if not self.events:
            raise Timeout("Timeout")
        return self.events.pop(0)


def test_nvml_gives_each_gpu_its_faults_the_lost_ones_and_xid_events() -> None:
    nvml = FakeNvml()
    source = NvmlSource(nvml)
    nvml.events.append(SimpleNamespace(eventData=79, device=0))
    reading = source.read()
    assert [g.uuid for g in reading.gpus] == ["GPU-0", "GPU-1"]
    assert reading.lost == ["2 (GPU is lost)"]
    zero, one = reading.gpus
    assert (zero.memory_total_mib, zero.throttle, zero.nvlink_down) == (81920, ("hw-thermal",), ())
    assert (one.ecc_uncorrected, one.retired_pages_pending, one.nvlink_down) == (5, None, (1,))
    assert reading.xids == [Xid(79, "00000000:01:00.0")]
    assert source.read().xids == []  # drained: the agent keeps what it saw


def test_without_a_driver_library_the_agent_falls_back_to_nvidia_smi_or_none(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi either
    assert gpu_source() is None  # nvidia-ml-py is installed; its library is not
