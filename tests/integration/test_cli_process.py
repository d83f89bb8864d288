"""The installed `meshctl` command in a real process: start-up imports and exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

HEAVY = ("ray", "boto3", "botocore", "google", "torch", "pydantic", "yaml", "sqlite3", "cel")

PROBE = """
import sys
from meshctl.cli.app import app
try:
    app(["--help"])
except SystemExit:
    pass
print(sorted({m.split('.')[0] for m in sys.modules}))
"""


def test_help_imports_no_heavy_module():
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True)
    loaded = set(json.loads(out.stdout.strip().splitlines()[-1].replace("'", '"')))
    assert loaded.isdisjoint(HEAVY), sorted(loaded & set(HEAVY))


def test_console_script_exit_codes(tmp_path: Path):
    meshctl = str(Path(sys.executable).with_name("meshctl"))
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: meshctl/v1\nkind: Job\n")
    ok = subprocess.run([meshctl, "--help"], capture_output=True, text=True)
    invalid = subprocess.run([meshctl, "validate", str(bad)], capture_output=True, text=True)
    assert ok.returncode == 0
    assert invalid.returncode == 2
    assert invalid.stderr.splitlines()[0] == f"error: {bad}:1: metadata: required field is missing"
    assert "Traceback" not in invalid.stderr
