"""The README's one-minute tour: its one ``bash`` block, run as written with the installed
``meshctl`` (the unit tier runs the part before ``meshctl up``, which needs no cluster; the
integration tier runs all of it)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

README = ROOT / "README.md"
UP = "meshctl up"
MESHCTL = Path(sys.executable).with_name("meshctl")


def tour() -> str:
    """The README's one bash block."""
    blocks = re.findall(r"^```bash\n(.*?)^```$", README.read_text(), re.DOTALL | re.MULTILINE)
    assert len(blocks) == 1, f"README.md: expected one bash block (the tour), got {len(blocks)}"
    return str(blocks[0])


def before_up(script: str) -> str:
    """The lines before the one that brings the mesh up."""
    lines = script.splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if line.startswith(UP))
    return "".join(lines[:at])


def run(script: str, cwd: Path, home: Path, timeout_s: float) -> subprocess.CompletedProcess[str]:
    """``script`` in bash, stopping at the first command that fails, with this environment's
    meshctl first on the PATH and its own home."""
    env = {
        **os.environ,
        "PATH": f"{MESHCTL.parent}{os.pathsep}{os.environ['PATH']}",
        "MESHCTL_HOME": str(home),
    }
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
