"""A train worker sees the devices Ray gave it through the registry's visibility variable for
its node's vendor: by index, or (AMD) by UUID, read from amd-smi. There is no AMD GPU here:
amd-smi is a fake on PATH that prints the listing a host of four MI300X would."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from meshctl.workload.train.devices import VisibilityError, amd_uuids, set_visible, visible

pytestmark = pytest.mark.unit

UUIDS = [
    "8fff74a1-0000-1000-80f1-4a1c2c9e6a10",
    "a4ff74a1-0000-1000-801c-59a5ce1b02c3",
    "17ff74a1-0000-1000-8095-c3f0e1d5ab77",
    "e2ff74a1-0000-1000-80c6-0b7d4e3f9a21",
]
AMD = {"vendor": "amd", "visibility": "ROCR_VISIBLE_DEVICES", "visible_by": "uuid",
       "instead_of": ["HIP_VISIBLE_DEVICES"], "resource": "GPU"}  # fmt: skip


@pytest.mark.parametrize(
    ("devices", "ids", "expected"),
    [
        ({"visibility": "CUDA_VISIBLE_DEVICES"}, ["2", "3"], {"CUDA_VISIBLE_DEVICES": "2,3"}),
        (AMD, ["1", "3"], {"ROCR_VISIBLE_DEVICES": f"{UUIDS[1]},{UUIDS[3]}"}),
        ({"visibility": "NEURON_RT_VISIBLE_CORES"}, ["4", "5"], {"NEURON_RT_VISIBLE_CORES": "4,5"}),
        ({"visibility": "TPU_VISIBLE_CHIPS"}, ["0", "1", "2", "3"],
         {"TPU_VISIBLE_CHIPS": "0,1,2,3"}),
        ({"visibility": "HABANA_VISIBLE_MODULES"}, ["7"], {"HABANA_VISIBLE_MODULES": "7"}),
        ({"visibility": "CUDA_VISIBLE_DEVICES"}, [], {}),
        ({}, ["0"], {}),
    ],
    ids=["nvidia-by-index", "amd-by-uuid", "neuron-cores", "tpu-chips", "gaudi-modules",
         "no-devices-given", "no-variable"],
)  # fmt: skip
def test_the_variable_names_the_devices_as_the_registry_says(
    devices: dict[str, Any], ids: list[str], expected: dict[str, str]
) -> None:
    assert visible(devices, ids, UUIDS) == expected


@pytest.mark.parametrize(
    ("uuids", "message"),
    [
        (None, "ROCR_VISIBLE_DEVICES names devices by UUID, and none could be read here"),
        (UUIDS[:2], "ROCR_VISIBLE_DEVICES: device 3 has no UUID (the host lists 2)"),
    ],
    ids=["no-listing", "an-index-past-the-listing"],
)
def test_a_device_without_a_uuid_is_said(uuids: list[str] | None, message: str) -> None:
    with pytest.raises(VisibilityError) as raised:
        visible(AMD, ["1", "3"], uuids)
    assert str(raised.value) == message


@pytest.fixture
def amd_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fake amd-smi (no AMD driver here): `list --json` lists four GPUs, out of order."""
    rows = [{"gpu": i, "bdf": f"0000:{i:02x}:00.0", "uuid": u} for i, u in enumerate(UUIDS)]
    tool = tmp_path / "amd-smi"
    tool.write_text(
        "#!/bin/sh\n"
        '[ "$1 $2" = "list --json" ] || exit 2\n'
        f"cat <<'EOF'\n{json.dumps(list(reversed(rows)))}\nEOF\n"
    )
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    return tool


def test_amd_uuids_are_read_from_amd_smi_in_index_order(amd_smi: Path) -> None:
    assert amd_uuids() == UUIDS


def test_without_amd_smi_no_uuids_are_known(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    assert amd_uuids() is None


def test_an_amd_worker_sees_its_gpus_by_uuid_and_hips_numbering_is_unset(
    amd_smi: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ray

    given = SimpleNamespace(get_accelerator_ids=lambda: {"GPU": ["2", "0"]})
    monkeypatch.setattr(ray, "get_runtime_context", lambda: given)
    env = {"HIP_VISIBLE_DEVICES": "2,0", "OTHER": "x"}  # what Ray set by index
    shown = set_visible(AMD, env)
    assert shown == {"ROCR_VISIBLE_DEVICES": f"{UUIDS[2]},{UUIDS[0]}"}
    assert env == {"ROCR_VISIBLE_DEVICES": f"{UUIDS[2]},{UUIDS[0]}", "OTHER": "x"}


def test_a_worker_given_no_devices_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    import ray

    given = SimpleNamespace(get_accelerator_ids=lambda: {"GPU": []})
    monkeypatch.setattr(ray, "get_runtime_context", lambda: given)
    env = {"HIP_VISIBLE_DEVICES": "0"}
    assert set_visible(AMD, env) == {}
    assert env == {"HIP_VISIBLE_DEVICES": "0"}
