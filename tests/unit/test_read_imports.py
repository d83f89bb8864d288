"""``meshctl status`` and ``meshctl jobs list`` read the store and render: they must not import
the controller's deciding (the scheduler, the policy engine and the CEL package's REPL came
with it: most of their start-up, issue 48 point 6; benchmarks/cli_startup.py measures them)."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.unit

HEAVY = ("meshctl.controller.deciding.", "meshctl.scheduler.", "meshctl.policy.", "cel.")
READS = (  # what the two commands import, at the top and inside their functions
    "meshctl.cli.mesh_cmd",
    "meshctl.cli.jobs_cmd",
    "meshctl.app.status",
    "meshctl.app.jobs",
    "meshctl.controller.status",
    "meshctl.controller.runtime",
    "meshctl.controller.daemon",
)


def test_the_read_commands_import_no_deciding() -> None:
    probe = f"import sys, {', '.join(READS)}; print(' '.join(sorted(sys.modules)))"
    loaded = subprocess.run(
        [sys.executable, "-c", probe], check=True, capture_output=True, text=True
    ).stdout.split()
    heavy = [m for m in loaded if f"{m}.".startswith(HEAVY)]
    assert heavy == []
