"""The operator's node health signals."""

from __future__ import annotations

from pathlib import Path

import pytest

from meshctl.pools.health import overrule, overruled, set_signal, unhealthy

pytestmark = pytest.mark.unit


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


def test_an_overruled_verdict_is_kept_until_cleared(tmp_path: Path) -> None:
    assert overruled(tmp_path) == {}
    overrule(tmp_path, "onprem", "gpu-1", "agent: XID 79 on GPU 0000:1b:00")
    assert overruled(tmp_path) == {"onprem/gpu-1": "agent: XID 79 on GPU 0000:1b:00"}
    assert unhealthy(tmp_path) == {}  # overruling says nothing is wrong
    overrule(tmp_path, "onprem", "gpu-1", None)
    assert overruled(tmp_path) == {}
