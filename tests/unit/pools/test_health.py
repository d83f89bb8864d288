"""Node health signals, and reading GPU error state into one."""

from __future__ import annotations

from pathlib import Path

import pytest

from meshctl.pools.health import nvidia_smi_reason, set_signal, unhealthy

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("log", "ecc", "reason"),
    [
        ("", 0, None),
        ("NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.", 0, "GPU XID 79"),
        ("NVRM: Xid (PCI:0000:3b:00): 13, Graphics Exception", 0, None),
        (
            "NVRM: Xid (PCI:0000:3b:00): 48, DBE\nNVRM: Xid (PCI:0000:3b:00): 94,",
            0,
            "GPU XID 48, 94",
        ),
        ("", 3, "3 uncorrected ECC errors"),
    ],
    ids=["clean", "fallen off the bus", "an application error is not the node's", "ECC", "counter"],
)
def test_gpu_errors_become_a_reason(log: str, ecc: int, reason: str | None) -> None:
    assert nvidia_smi_reason(log, ecc) == reason


def test_a_signal_is_set_read_and_cleared(tmp_path: Path) -> None:
    assert unhealthy(tmp_path) == {}
    set_signal(tmp_path, "onprem", "gpu-1", "GPU XID 79")
    set_signal(tmp_path, "lab", "n2", "3 uncorrected ECC errors")
    assert unhealthy(tmp_path) == {
        "onprem/gpu-1": "GPU XID 79",
        "lab/n2": "3 uncorrected ECC errors",
    }
    set_signal(tmp_path, "onprem", "gpu-1", None)
    assert unhealthy(tmp_path) == {"lab/n2": "3 uncorrected ECC errors"}
