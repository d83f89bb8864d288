"""The mesh a policy folder is checked against, and each mesh file read once per command."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import EXAMPLES

from meshctl.files.policies import MeshReader, mesh_file_for, read_mesh
from meshctl.model import Mesh
from meshctl.problems import InvalidFileError

pytestmark = pytest.mark.unit


def _layout(root: Path, beside: bool) -> Path:
    """``root/policies`` (empty), with ``root/mesh.yaml`` where ``beside``."""
    (root / "policies").mkdir()
    if beside:
        shutil.copy(EXAMPLES / "mesh.yaml", root / "mesh.yaml")
    return root / "policies"


@pytest.mark.parametrize(
    ("beside_file", "look_beside", "expected"),
    [
        pytest.param(True, True, "mesh.yaml", id="mesh-yaml-beside-the-folder"),
        pytest.param(True, False, None, id="not-looked-for-beside-when-told-not-to"),
        pytest.param(False, True, None, id="none-beside-the-mesh-in-use-applies"),
    ],
)
def test_the_mesh_file_of_a_policy_folder(tmp_path, beside_file, look_beside, expected):
    folder = _layout(tmp_path, beside_file)
    found = mesh_file_for(folder, look_beside)
    assert found == (tmp_path / expected if expected else None)


@pytest.mark.parametrize("look_beside", [True, False])
def test_the_shipped_examples_are_written_for_the_embedded_mesh(look_beside):
    from meshctl.files.shipped import data_dir

    found = mesh_file_for(Path(str(data_dir("policies"))), look_beside)
    assert found is not None
    assert found.parts[-2:] == ("examples", "mesh.yaml")


class _InUse:
    """The mesh in use, counting how often it is asked for."""

    def __init__(self) -> None:
        self.asked = 0

    def __call__(self) -> Mesh:
        self.asked += 1
        return read_mesh(EXAMPLES / "mesh.yaml")


def test_each_mesh_is_read_once_whatever_the_spelling_of_its_path(tmp_path, monkeypatch):
    folder = _layout(tmp_path, beside=True)
    in_use = _InUse()
    reader = MeshReader(in_use)
    first = reader.read(tmp_path / "mesh.yaml")
    assert reader.read(folder / ".." / "mesh.yaml") is first
    assert reader.for_folder(folder) is first
    (tmp_path / "mesh.yaml").unlink()  # a second read would now fail
    monkeypatch.chdir(tmp_path)
    assert reader.read(Path("mesh.yaml")) is first
    assert in_use.asked == 0
    assert reader.read(None) is reader.read(None)
    assert in_use.asked == 1


def test_a_mesh_file_that_cannot_be_read_fails_at_its_first_read(tmp_path):
    reader = MeshReader(_InUse())
    with pytest.raises(InvalidFileError, match="no such file"):
        reader.read(tmp_path / "mesh.yaml")
