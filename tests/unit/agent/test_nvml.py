"""The NVML source against a stand-in for nvidia-ml-py's module (a mock: no NVIDIA driver
library here), shaped like pynvml's calls, errors and event structures; and the agent over it:
NVML's XID events count within the window only, disabled links only where the model has
them."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from meshctl.agent.probe import Limits, Xid
from meshctl.agent.server import Agent
from meshctl.agent.sources import KernelLog, NvmlSource, gpu_source

pytestmark = pytest.mark.unit


class NVMLError(Exception):
    pass


class GpuIsLost(NVMLError):
    pass


class Timeout(NVMLError):
    pass


class FakeNvml:
    """By default three H100s with four links each: GPU 1 with ECC errors and link 1 disabled,
    GPU 2 lost. ``healthy(name, links, disabled)``: four GPUs of that model, nothing wrong but
    the ``disabled`` links of GPU 0."""

    NVMLError = NVMLError
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC, NVML_TEMPERATURE_GPU = 1, 0, 0
    NVML_FEATURE_DISABLED, NVML_NVLINK_MAX_LINKS = 0, 18
    nvmlEventTypeXidCriticalError = 8

    def __init__(self) -> None:
        self.count, self.lost, self.ecc = 3, {2}, {1: 5}
        self.name, self.links, self.disabled = "NVIDIA H100 80GB HBM3", 4, {(1, 1)}
        self.throttle = {0: 0x40}
        self.events: list[Any] = []

    @classmethod
    def healthy(cls, name: str, links: int, disabled: set[int]) -> FakeNvml:
        nvml = cls()
        nvml.count, nvml.lost, nvml.ecc, nvml.throttle = 4, set(), {}, {}
        nvml.name, nvml.links, nvml.disabled = name, links, {(0, n) for n in disabled}
        return nvml

    def nvmlDeviceGetCount(self) -> int:
        return self.count

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        if i in self.lost:
            raise GpuIsLost("GPU is lost")
        return i

    def nvmlDeviceGetMemoryInfo(self, h: int) -> Any:
        return SimpleNamespace(total=80 * 2**30, used=2**30)

    def nvmlDeviceGetTotalEccErrors(self, h: int, kind: int, counter: int) -> int:
        return self.ecc.get(h, 0)

    def nvmlDeviceGetRetiredPagesPendingStatus(self, h: int) -> int:
        raise NVMLError("Not Supported")

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h: int) -> int:
        return self.throttle.get(h, 0x1)

    def nvmlDeviceGetPciInfo(self, h: int) -> Any:
        return SimpleNamespace(busId=f"00000000:{h + 1:02X}:00.0")

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return f"GPU-{h}"

    def nvmlDeviceGetName(self, h: int) -> str:
        return self.name

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        return 50

    def nvmlDeviceGetNvLinkState(self, h: int, link: int) -> int:
        if link >= self.links:
            raise NVMLError("Invalid Argument")
        return 0 if (h, link) in self.disabled else 1

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


class Clock:
    def __init__(self) -> None:
        self.now_s = 1000.0

    def __call__(self) -> float:
        return self.now_s


WINDOW_S = 600.0


def nvml_agent(nvml: FakeNvml, kernel_log: Any, clock: Clock) -> Agent:
    kernel_log.write_text("[ 0.0] Linux version 6.1.0\n")
    limits = Limits(expected_gpus=nvml.count, min_free_gib=0.0, xid_window_s=WINDOW_S)
    return Agent("n1", limits, NvmlSource(nvml), KernelLog(str(kernel_log)), clock=clock)


def test_an_nvml_xid_event_counts_within_the_window_only(tmp_path: Any) -> None:
    nvml, clock = FakeNvml.healthy("NVIDIA H100 80GB HBM3", 18, set()), Clock()
    agent = nvml_agent(nvml, tmp_path / "kmsg", clock)
    assert agent.probe().to_json(agent.limits)["verdict"] == "healthy"
    nvml.events.append(SimpleNamespace(eventData=79, device=0))
    clock.now_s += 5
    assert agent.probe().to_json(agent.limits)["reasons"] == ["XID 79 on GPU 00000000:01:00.0"]
    clock.now_s += WINDOW_S - 1  # drained long ago; still within the window
    assert agent.probe().to_json(agent.limits)["verdict"] == "unhealthy"
    clock.now_s += 1  # older than the window: it no longer counts
    answer = agent.probe().to_json(agent.limits)
    assert (answer["verdict"], answer["reasons"], answer["xids"]) == ("healthy", [], ())


@pytest.mark.parametrize(
    ("name", "links", "disabled", "verdict", "reasons"),
    [
        ("NVIDIA L4", 18, set(range(18)), "healthy", []),
        ("NVIDIA A100-PCIE-40GB", 12, set(range(12)), "healthy", []),
        ("NVIDIA H100 80GB HBM3", 18, {7}, "unhealthy",
         ["GPU 0: NVLink link 7 down (1 of its 18 links)"]),
        ("NVIDIA B200", 18, set(), "healthy", []),
    ],
    ids=["L4: no NVLink", "A100 PCIe: no bridge", "H100: one of 18 down", "B200: all up"],
)  # fmt: skip
def test_disabled_nvlink_links_count_only_where_the_gpu_model_has_them(
    tmp_path: Any, name: str, links: int, disabled: set[int], verdict: str, reasons: list[str]
) -> None:
    agent = nvml_agent(FakeNvml.healthy(name, links, disabled), tmp_path / "kmsg", Clock())
    answer = agent.probe().to_json(agent.limits)
    assert (answer["verdict"], answer["reasons"]) == (verdict, reasons)
