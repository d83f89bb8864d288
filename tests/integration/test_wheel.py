"""The built wheel carries the catalogs and examples: an installed meshctl needs no checkout."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import ROOT

pytestmark = pytest.mark.integration

USE_WHEEL = """
import sys
from meshctl.catalog import load_catalogs
from meshctl.cli.app import app
found = load_catalogs()
assert all(".whl" in f.location for f in found), [f.location for f in found]
print(sum(len(f.catalog.spec.instance_types) for f in found))
app(["init", sys.argv[1]])
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(out),
            str(ROOT),
        ],
        check=True,
    )
    (built,) = out.glob("meshctl-*.whl")
    return built


def test_wheel_contains_the_data(wheel: Path):
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {
        "meshctl/_data/providers/aws.yaml",
        "meshctl/_data/providers/gcp.yaml",
        "meshctl/_data/examples/mesh.yaml",
        "meshctl/_data/policies/README.md",
    } <= names


def test_catalogs_and_init_work_from_the_wheel_alone(wheel: Path, tmp_path: Path):
    # The wheel goes first on sys.path, so its meshctl shadows the checkout's; run elsewhere.
    env = {"PYTHONPATH": str(wheel), "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, "-c", USE_WHEEL, str(tmp_path / "m")],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    assert int(out.stdout.splitlines()[0]) > 40
    assert (tmp_path / "m" / "providers" / "gcp.yaml").is_file()
