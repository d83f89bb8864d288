"""``meshctl up`` and ``meshctl down`` asked of the API server: run on its host, as its CLI.

A platform-admin brings the mesh up or down from anywhere; the server runs the very commands an
operator would type on its host (its home, mesh, catalogs and store), in a process of their
own, and answers with their exit code and what they printed. Starting local Ray clusters and
the controller, and stopping exactly what ``up`` started, stay in one place: the commands.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

from meshctl.server.errors import ApiError, invalid

TIMEOUT_S = 900.0  # a down --drain waits for running jobs (10 minutes by default)


def run(context: Any, args: list[str], timeout_s: float = TIMEOUT_S) -> dict[str, Any]:
    """``meshctl ARGS`` on this host with the server's context: ``{"exit_code", "stdout",
    "stderr"}``; a refusal (exit 2) is a 422 with its line."""
    command = [sys.executable, "-m", "meshctl", "--home", str(context.home)]
    if context.mesh_path is not None:
        command += ["--mesh", str(context.mesh_path)]
    if context.providers_dir is not None:
        command += ["--providers", str(context.providers_dir)]
    if context.store_url:
        command += ["--store", context.store_url]
    environ = {k: v for k, v in os.environ.items() if k not in ("MESHCTL_SERVER", "MESHCTL_TOKEN")}
    try:
        done = subprocess.run(
            [*command, *args], capture_output=True, text=True, timeout=timeout_s, env=environ,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        raise ApiError(504, f"meshctl {' '.join(args)}: no answer within {timeout_s:g} s") from None
    if done.returncode == 2:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        raise invalid(lines[-1].removeprefix("error: ") if lines else "refused (exit 2)")
    return {"exit_code": done.returncode, "stdout": done.stdout, "stderr": done.stderr}
