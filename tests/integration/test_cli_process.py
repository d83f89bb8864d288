"""The installed `meshctl` command in a real process: start-up imports and exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

HEAVY = ("ray", "boto3", "botocore", "google", "torch", "pydantic", "yaml", "sqlite3", "cel",
         "fastapi", "uvicorn", "starlette", "prometheus_client", "psycopg")  # fmt: skip

PROBE = """
import sys
from meshctl.cli.app import app
try:
    app(["--help"])
except SystemExit:
    pass
print(sorted(m for m in sys.modules if "." not in m))  # a package's modules need it imported
"""


def test_help_imports_no_heavy_module():
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True)
    loaded = set(json.loads(out.stdout.strip().splitlines()[-1].replace("'", '"')))
    assert loaded.isdisjoint(HEAVY), sorted(loaded & set(HEAVY))


# What a submission never needs: Ray, the clouds' SDKs, torch, pyarrow, rich (it prints a line),
# the REPL the cel package imports for its own command line (meshctl.cli.deferred); of meshctl,
# the controller's loop, the daemon and the clients of pools and clouds.
NOT_FOR_SUBMIT = (
    "ray", "boto3", "botocore", "google", "torch", "pyarrow", "matplotlib", "rich", "psycopg",
    "prompt_toolkit", "pygments", "meshctl.controller.deciding.decide", "meshctl.controller.loop",
    "meshctl.controller.daemon", "meshctl.controller.runtime", "meshctl.clouds",
    "meshctl.pools.ray", "meshctl.pools.local", "meshctl.sim", "meshctl.data",
)  # fmt: skip


def _within(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


# submit leaves without the interpreter's teardown (meshctl.cli.leave) once its atexit
# handlers have run: what it imported is printed from one
SUBMIT_PROBE = """
import atexit, sys
from meshctl.cli.app import main
atexit.register(lambda: print(sorted(sys.modules)))
sys.argv = ["meshctl", "submit", "--gpus", "1", "--", "python", "-c", "pass"]
main()
"""


def test_submit_imports_only_what_a_submission_needs(tmp_path: Path):
    """Through the console script's own entry (``main``), to an embedded home where no
    controller ever ran: the job is checked and queued, and nothing else is imported. PyYAML
    only while the files are not in the checked-files cache: a second submission, with the
    same files and a cache of its own, reads them all from there."""
    home = tmp_path / "home"
    env = {**os.environ, "MESHCTL_HOME": str(home), "MESHCTL_CACHE_DIR": str(tmp_path / "cache")}
    runs = []
    for _ in range(2):
        out = subprocess.run(
            [sys.executable, "-c", SUBMIT_PROBE],
            capture_output=True, text=True, check=True, cwd=tmp_path, env=env,
        )  # fmt: skip
        job_id, modules = out.stdout.strip().splitlines()
        runs.append(set(json.loads(modules.replace("'", '"'))))
        assert job_id.startswith("python-")
        assert "no controller is running" in out.stderr
    first, second = runs
    for loaded in runs:
        assert [m for m in loaded if _within(m, NOT_FOR_SUBMIT)] == []
        assert {"cel", "pydantic", "sqlite3"} <= loaded  # what it does need
    assert "yaml" in first  # the files read and checked once
    assert "yaml" not in second
    assert (home / "state.db").is_file()
    assert not (home / "run").exists()


CEL_PROBE = """
import sys
import meshctl.cli.app
import cel
assert cel.evaluate("1 + 2", {}) == 3
assert "prompt_toolkit" not in sys.modules
from cel.cli import main  # its command line still there, when something uses it
assert callable(main) and "prompt_toolkit" in sys.modules
"""


def test_cel_evaluates_without_its_command_line_and_still_has_it():
    subprocess.run([sys.executable, "-c", CEL_PROBE], check=True)


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
