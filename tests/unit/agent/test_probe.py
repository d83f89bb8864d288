"""The agent's parsers (nvidia-smi's query, its NVLink status, the kernel log's XIDs) and the
verdict drawn from a probe, against text in the real tools' formats: each XID by its severity
in NVIDIA's catalog, inactive NVLink links by the links the GPU model has, no probe unknown."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from meshctl.agent.probe import (
    Disk,
    Gpu,
    Limits,
    Nic,
    Probe,
    Xid,
    judge,
    parse_lost,
    parse_nvlink,
    parse_smi_query,
    throttle_reasons,
    with_nvlink,
    xids_in,
)

pytestmark = pytest.mark.unit

SMI = (
    "0, GPU-5d1e, NVIDIA H100 80GB HBM3, 00000000:1B:00.0, 81559, 1024, 41, 0, No, "
    "0x0000000000000000\n"
    "1, GPU-77aa, NVIDIA H100 80GB HBM3, 00000000:2B:00.0, 81559, 80000, 87, 2, Yes, "
    "0x0000000000000040\n"
    "2, GPU-9c0f, NVIDIA A10G, 00000000:3B:00.0, 23028, 0, 30, [N/A], [N/A], [Not Supported]\n"
)
LOST = (
    "Unable to determine the device handle for GPU0000:4B:00.0: GPU is lost.  "
    "Reboot the system to recover this GPU\n"
)
NVLINK = (
    "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-5d1e)\n"
    "\t Link 0: 26.562 GB/s\n\t Link 1: <inactive>\n"
    "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-77aa)\n"
    "\t Link 0: 26.562 GB/s\n\t Link 1: 26.562 GB/s\n"
)
KERNEL = (
    "[ 12.0] NVRM: loading NVIDIA UNIX x86_64 Kernel Module\n"
    "[ 4242.1] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.\n"
    "[ 4243.0] NVRM: Xid (PCI:0000:1b:00): 13, pid=99, Graphics Exception\n"
    "[ 4244.0] NVRM: Xid (0000:2b:00): 48, An uncorrectable double bit error\n"
)


def test_the_smi_query_gives_each_gpu_with_what_it_cannot_tell_as_none() -> None:
    gpus = parse_smi_query(SMI + LOST)
    assert [g.index for g in gpus] == [0, 1, 2]
    assert gpus[0] == Gpu(0, "GPU-5d1e", "NVIDIA H100 80GB HBM3", "00000000:1B:00.0",
                          81559, 1024, 41, 0, False, ())  # fmt: skip
    assert gpus[1].ecc_uncorrected == 2
    assert gpus[1].retired_pages_pending is True
    assert gpus[1].throttle == ("hw-thermal",)
    assert (gpus[2].ecc_uncorrected, gpus[2].retired_pages_pending, gpus[2].throttle) == (
        None,
        None,
        (),
    )


def test_lost_gpus_nvlink_and_xids_are_read_from_the_tools_text() -> None:
    assert parse_lost(SMI + LOST) == ["0000:4B:00.0"]
    assert parse_nvlink(NVLINK) == {0: (1,)}
    assert xids_in(KERNEL) == [Xid(79, "0000:3b:00"), Xid(13, "0000:1b:00"), Xid(48, "0000:2b:00")]


def test_throttle_reasons_name_the_heat_and_power_bits_only() -> None:
    assert throttle_reasons(0x1 | 0x4) == ()  # idle, the software power cap: normal
    assert throttle_reasons(0x8 | 0x20 | 0x40 | 0x80) == (
        "hw-slowdown",
        "sw-thermal",
        "hw-thermal",
        "power-brake",
    )


H100 = "NVIDIA H100 80GB HBM3"  # SXM5: 18 NVLink links


def healthy_gpu(i: int, name: str = H100) -> Gpu:
    return Gpu(i, f"GPU-{i}", name, f"0000:{i}", 81559, 0, 40, 0, False)


BASE = Probe("n1", 0.0, 1.0, "nvidia-smi", gpus=tuple(healthy_gpu(i) for i in range(4)))
LIMITS = Limits(expected_gpus=4, min_free_gib=5.0)
EMULATED = replace(LIMITS, emulated=True)


@pytest.mark.parametrize(
    ("changes", "verdict", "reason"),
    [
        ({}, "healthy", None),
        ({"gpus": BASE.gpus[:3]}, "unhealthy", "sees 3 of the 4 GPUs the node declares"),
        ({"lost": ("0000:4B:00.0",)}, "unhealthy", "GPU 0000:4B:00.0 is lost"),
        ({"xids": (Xid(79, "0000:3b:00"),)}, "unhealthy", "XID 79 on GPU 0000:3b:00"),
        ({"xids": (Xid(13, "0000:3b:00"),)}, "healthy", None),
        ({"gpus": (Gpu(0, "u", H100, "b", ecc_uncorrected=3), *BASE.gpus[1:])}, "unhealthy",
         "GPU 0: 3 uncorrectable ECC errors"),
        ({"gpus": (Gpu(0, "u", H100, "b", retired_pages_pending=True), *BASE.gpus[1:])},
         "unhealthy", "GPU 0: retired pages pending (needs a reset)"),
        ({"gpus": (Gpu(0, "u", H100, "b", nvlink_down=(1, 3)), *BASE.gpus[1:])}, "unhealthy",
         "GPU 0: NVLink link 1, 3 down (2 of its 18 links)"),
        ({"gpus": (Gpu(0, "u", H100, "b", throttle=("hw-thermal",)), *BASE.gpus[1:])},
         "degraded", "GPU 0: throttled (hw-thermal)"),
        ({"disks": (Disk("/ckpt", 2.0, 100.0),)}, "unhealthy", "/ckpt: 2.0 GiB free, under 5"),
        ({"disks": (Disk("/ckpt", None),)}, "unhealthy", "/ckpt: cannot be read"),
        ({"nics": (Nic("ib0", "down"),)}, "unhealthy", "NIC ib0 is down"),
        ({"nics": (Nic("eth0", "up"),)}, "healthy", None),
        ({"gpu_error": "NVIDIA-SMI has failed"}, "unhealthy",
         "GPU driver not answering: NVIDIA-SMI has failed"),
        ({"source": "none", "gpus": ()}, "unknown",
         "no GPU probe: no NVIDIA driver library and no nvidia-smi on this node"),
        ({"source": "none", "gpus": (), "disks": (Disk("/ckpt", 2.0, 100.0),)}, "unhealthy",
         "/ckpt: 2.0 GiB free, under 5"),
        ({"errors": ("kernel log: dmesg failed (denied)",)}, "degraded",
         "kernel log: dmesg failed (denied)"),
        # a driver found on an emulated node (the fake one of scripts/fake-gpu) is judged
        ({"limits": EMULATED, "gpus": BASE.gpus[:3]}, "unhealthy",
         "sees 3 of the 4 GPUs the node declares"),
        ({"limits": EMULATED, "source": "none", "gpus": (),
          "disks": (Disk("/ckpt", 2.0, 100.0),)}, "unhealthy", "/ckpt: 2.0 GiB free, under 5"),
    ],
    ids=["healthy", "a GPU missing", "a GPU lost", "XID 79", "XID 13 is the application's",
         "ECC", "retired pages", "NVLink", "throttling", "disk nearly full", "disk unreadable",
         "NIC down", "NIC up", "driver down", "no probe is unknown",
         "no probe and a full disk", "kernel log unreadable", "emulated, a driver, a GPU missing",
         "emulated and a full disk"],
)  # fmt: skip
def test_the_verdict_on_a_probe(changes: dict[str, object], verdict: str, reason: str) -> None:
    limits = changes.get("limits", LIMITS)
    assert isinstance(limits, Limits)
    fields = {k: v for k, v in changes.items() if k != "limits"}
    judged = judge(replace(BASE, **fields), limits)  # type: ignore[arg-type]
    assert judged.verdict == verdict
    assert judged.reasons[:1] == ((reason,) if reason else ())


@pytest.mark.parametrize(
    ("xid", "verdict", "reasons", "notes"),
    [
        # fatal: the GPU cannot be trusted until it is reset or the machine restarted
        (48, "unhealthy", ["XID 48 on GPU 0000:3b:00"], []),
        (64, "unhealthy", ["XID 64 on GPU 0000:3b:00"], []),
        (74, "unhealthy", ["XID 74 on GPU 0000:3b:00"], []),
        (79, "unhealthy", ["XID 79 on GPU 0000:3b:00"], []),
        (95, "unhealthy", ["XID 95 on GPU 0000:3b:00"], []),
        (119, "unhealthy", ["XID 119 on GPU 0000:3b:00"], []),
        (120, "unhealthy", ["XID 120 on GPU 0000:3b:00"], []),
        # contained to the application that met it: reset the GPU when convenient
        (94, "degraded", ["XID 94 on GPU 0000:3b:00: contained ECC error: only the "
                          "application that met it failed; reset the GPU when convenient"], []),
        # informational: reported, never held against the node
        (63, "healthy", [], ["XID 63 on GPU 0000:3b:00: ECC page retirement or row remapping "
                             "recorded"]),
        (92, "healthy", [], ["XID 92 on GPU 0000:3b:00: high single-bit ECC error rate "
                             "(corrected)"]),
        (13, "healthy", [], ["XID 13 on GPU 0000:3b:00: graphics engine exception (an "
                             "application's fault)"]),
        (31, "healthy", [], ["XID 31 on GPU 0000:3b:00: GPU memory page fault (an "
                             "application's fault)"]),
        (999, "healthy", [], ["XID 999 on GPU 0000:3b:00: not in NVIDIA's XID catalog as this "
                              "agent knows it"]),
    ],
    ids=["48 double-bit ECC", "64 row remap failed", "74 NVLink", "79 off the bus",
         "95 uncontained", "119 GSP timeout", "120 GSP error", "94 contained",
         "63 row remap recorded", "92 single-bit rate", "13 the application's",
         "31 the application's", "an XID the catalog does not have"],
)  # fmt: skip
def test_an_xid_counts_by_its_severity_in_nvidias_catalog(
    xid: int, verdict: str, reasons: list[str], notes: list[str]
) -> None:
    log = f"[ 99.0] NVRM: Xid (PCI:0000:3b:00): {xid}, pid=1, text\n"
    judged = judge(replace(BASE, xids=tuple(xids_in(log))), LIMITS)
    assert (judged.verdict, list(judged.reasons), list(judged.notes)) == (verdict, reasons, notes)


def a_node_of(name: str, links: int, inactive: set[int]) -> Probe:
    """A node of four GPUs of model ``name``, through ``nvidia-smi nvlink --status``'s text:
    ``links`` links each, GPU 0's ``inactive`` ones down."""
    text = ""
    for gpu in range(4):
        text += f"GPU {gpu}: {name} (UUID: GPU-{gpu})\n"
        for link in range(links):
            down = gpu == 0 and link in inactive
            text += f"\t Link {link}: " + ("<inactive>" if down else "26.562 GB/s") + "\n"
    gpus = [healthy_gpu(i, name) for i in range(4)]
    return replace(BASE, gpus=tuple(with_nvlink(gpus, parse_nvlink(text))))


@pytest.mark.parametrize(
    ("name", "links", "inactive", "verdict", "reason"),
    [
        (H100, 18, set(), "healthy", None),
        (H100, 18, {5}, "unhealthy", "GPU 0: NVLink link 5 down (1 of its 18 links)"),
        ("NVIDIA H200", 18, {0, 17}, "unhealthy",
         "GPU 0: NVLink link 0, 17 down (2 of its 18 links)"),
        ("NVIDIA A100-SXM4-80GB", 12, {3}, "unhealthy",
         "GPU 0: NVLink link 3 down (1 of its 12 links)"),
        # a PCIe card or a model without NVLink reports every link it could have as inactive
        ("NVIDIA L4", 18, set(range(18)), "healthy", None),
        ("NVIDIA A100-PCIE-40GB", 12, set(range(12)), "healthy", None),
        ("NVIDIA H100 PCIe", 18, set(range(18)), "healthy", None),
        # a model the table does not know: unknown, not unhealthy
        ("NVIDIA H100 NVL", 18, {0, 1}, "unknown",
         "GPU 0: NVLink link 0, 1 inactive; how many links a NVIDIA H100 NVL has is not known"),
    ],
    ids=["H100 all up", "H100 one of 18 down", "H200 two down", "A100 SXM one of 12 down",
         "L4 has no NVLink", "A100 PCIe unbridged", "H100 PCIe unbridged", "a model not known"],
)  # fmt: skip
def test_inactive_nvlink_links_count_only_where_the_gpu_model_has_them(
    name: str, links: int, inactive: set[int], verdict: str, reason: str | None
) -> None:
    judged = judge(a_node_of(name, links, inactive), LIMITS)
    assert judged.verdict == verdict
    assert judged.reasons == ((reason,) if reason else ())


def test_a_node_of_another_vendor_is_not_probed_with_nvidias_tools() -> None:
    """An AMD, TPU or Neuron node: no NVIDIA probe, so nothing it would see (a fake nvidia-smi
    on this machine) counts against it; the agent says it cannot tell."""
    from meshctl.agent.probe import Limits
    from meshctl.cli.agent_cmd import _agent

    agent = _agent("mi", 8, None, None, None, 5.0, no_nvml=True, vendor="amd")
    assert agent.gpu is None
    probe = agent.probe()
    judged = judge(replace(probe, disks=(), nics=()), agent.limits)
    assert judged.verdict == "unknown"
    assert judged.reasons[0] == "no device probe for amd: the probe reads NVIDIA's tools only"
    assert agent.limits == Limits(expected_gpus=8, min_free_gib=5.0, vendor="amd")


@pytest.mark.parametrize("vendor", ["nvidia", "amd"])
def test_an_emulated_node_without_a_driver_is_healthy_and_says_its_gpus_are_emulated(
    vendor: str,
) -> None:
    """The embedded pool's nodes: GPUs declared to Ray, no device and no driver. That is what
    they are, not a fault (it was ``unknown``, and ``degraded`` where dmesg refused the user)."""
    probe = replace(BASE, source="none", gpus=())
    judged = judge(probe, replace(EMULATED, vendor=vendor))
    assert (judged.verdict, judged.reasons) == ("healthy", ())
    assert judged.notes == ("4 emulated GPUs (declared to Ray, no device): not probed",)


SAMPLED = [13, 31, 43, 45, 48, 63, 64, 74, 79, 92, 94, 95]


@given(st.lists(st.sampled_from(SAMPLED), max_size=6))
def test_only_a_fatal_xid_makes_the_node_unhealthy_and_only_94_degraded(xids: list[int]) -> None:
    log = "".join(f"NVRM: Xid (PCI:0000:3b:00): {x}, pid=1, text\n" for x in xids)
    judged = judge(replace(BASE, xids=tuple(xids_in(log))), LIMITS)
    fatal, contained = {48, 64, 74, 79, 95} & set(xids), {94} & set(xids)
    worst = "unhealthy" if fatal else "degraded" if contained else "healthy"
    assert judged.verdict == worst
    assert {int(r.split()[1]) for r in judged.reasons} == fatal | contained
    assert {int(n.split()[1]) for n in judged.notes} == set(xids) - fatal - contained


def test_a_probe_serialises_with_its_verdict() -> None:
    data = Probe("n1", 5.0, 1.0, "nvml", gpus=BASE.gpus[:1]).to_json(Limits(expected_gpus=1))
    assert data["verdict"] == "healthy"
    assert data["gpus"][0]["uuid"] == "GPU-0"
    assert data["expected_gpus"] == 1
