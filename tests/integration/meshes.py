"""``Mesh``: a meshctl home driven as a user drives it, through the real CLI in a process of
its own, by the integration tests of embedded meshes (one mesh a module, started by the
module's fixture).

What a test *does* goes through the CLI. What a test *waits on* (a job's state, a node's row)
is read in the test's own process, from the same store and with the same code the CLI runs
(``nodes_cmd.node_rows``): a wait polls a few times a second, and a CLI process a poll would
take most of one of this machine's two cores away from the mesh under test. When a wait
gives up it says what it waited on and the mesh's story (the job's events, the controller's
log tail).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from meshctl.pools import local
from meshctl.pools.ray import RayPoolClient
from meshctl.state import JobRecord, open_store
from meshctl.state.store import Store
from tests.conftest import wait_until

T = TypeVar("T")

WAIT_S = 180  # a generous deadline for anything a mesh does: the machine may be loaded
LOOSE_UMASK = 0o002  # group-writable, world-readable: what the state folder must not follow


class Mesh:
    def __init__(self, home: Path, cwd: Path) -> None:
        self.home, self.cwd = home, cwd

    def run(
        self, *args: str, check: bool = True, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [sys.executable, "-m", "meshctl", *args],
            capture_output=True,
            text=True,
            cwd=self.cwd,
            env={**os.environ, "MESHCTL_HOME": str(self.home), **(env or {})},
            timeout=WAIT_S + 60,
            umask=LOOSE_UMASK,
        )
        if check and done.returncode != 0:
            raise AssertionError(
                f"meshctl {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
            )
        return done

    def store(self) -> Store:
        """The home's store, as its commands open it."""
        return open_store(self.home)

    def submit(self, *args: str) -> str:
        return self.run("submit", *args).stdout.strip().splitlines()[-1]

    def show(self, job_id: str) -> dict[str, object]:
        data: dict[str, object] = json.loads(self.run("jobs", "show", job_id, "-o", "json").stdout)
        return data

    def state(self, job_id: str) -> str:
        """The job's state, as ``jobs show`` prints it (read here, not in a CLI process)."""
        with self.store() as store:
            record = store.get(JobRecord, job_id)
        return "unknown" if record is None else record.state.value

    def nodes(self) -> dict[str, dict[str, Any]]:
        """``nodes list -o json`` by node (``pool/name``), worked out here by the CLI's code."""
        from meshctl.app.nodes import node_rows

        with self.store() as store:
            rows = node_rows(self.home, store)
        return {str(r["node"]): json.loads(json.dumps(r, default=str)) for r in rows}

    def wait_done(self, job_id: str) -> None:
        """``jobs wait`` for the job to succeed; else fail with the mesh's story."""
        done = self.run("jobs", "wait", job_id, "--timeout", str(WAIT_S), check=False)
        assert done.returncode == 0, f"{done.stdout}{done.stderr}\n{self.story(job_id)}"

    def story(self, job_id: str | None = None) -> str:
        """What the mesh did, for a failure's message: the job's events and those of no job
        (instances, nodes, pools), in order, and the end of the controller's log."""
        with self.store() as store:
            events = [e for e in store.events() if e.job_id in (None, job_id)]
        lines = [f"{e.at_s:.1f} {e.kind} {e.job_id or '-'} {e.message[:160]}" for e in events]
        log = self.home / "run" / "logs" / "controller.log"
        tail = log.read_text(errors="replace").splitlines()[-40:] if log.exists() else []
        return "\n".join(["events:", *lines[-80:], self._controller(), "controller.log:", *tail])

    def _controller(self) -> str:
        """Whether the home's controller runs, and when it last finished a cycle."""
        from meshctl.controller import daemon

        pid, beat = daemon.running(self.home), daemon.heartbeat(self.home) or {}
        at = beat.get("at_s")
        last = f"{time.time() - at:.1f} s ago" if isinstance(at, int | float) else "never"
        return f"controller: {'pid ' + str(pid) if pid else 'not running'}; last cycle {last}"

    def wait_for(self, job_id: str, state: str) -> None:
        wait_until(  # worded when it fails: the job's state and the mesh's story
            lambda: f"{job_id} never became {state}: {self.state(job_id)}\n{self.story(job_id)}",
            lambda: self.state(job_id) == state,
            WAIT_S,
        )

    def until(
        self, what: str | Callable[[], str], ready: Callable[[], T], job_id: str | None = None
    ) -> T:
        """``wait_until`` with the mesh's deadline, worded (``what``, a string or worded when
        it fails) with the mesh's story when it gives up."""

        def said() -> str:
            return f"{what() if callable(what) else what}\n{self.story(job_id)}"

        return wait_until(said, ready, WAIT_S)

    def cluster(self) -> local.LocalCluster:
        return local.LocalCluster.load(local.run_file(self.home / "run", "onprem"))

    def ray(self) -> RayPoolClient:
        cluster = self.cluster()
        return RayPoolClient("onprem", cluster.dashboard, cluster.token)
