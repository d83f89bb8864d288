"""The chaos benchmark's world (``chaos.py`` has the command): the emulators, the store on a
throwaway Postgres server, the mesh brought up by ``meshctl up``, the API server, and what
the benchmark asks of the mesh (a train job, the jobs' records)."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import yaml
from chaos_client import Client
from chaos_faults import POOL, Front, World

from meshctl.controller.rundir import run_dir
from meshctl.host.ports import free_port
from meshctl.model import LocalPool
from meshctl.state import (
    AttemptRecord,
    InstanceRecord,
    JobRecord,
    JobState,
    Role,
    open_store_at,
)
from tests.emulators.aws import MotoServer
from tests.emulators.gate import Gate
from tests.emulators.gce import GceEmulator
from tests.emulators.switch import Switch
from tests.pgserver import pg_server

ROOT = Path(__file__).resolve().parent.parent
ENDED = {JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED}
TRAIN_STEPS, STEP_S = 300, 0.5  # about three minutes: through the first faults


class Mesh:
    """``meshctl`` in this world's home, on its store."""

    def __init__(self, work: Path, store: str, env: dict[str, str]) -> None:
        self.work, self.home, self.store = work, work / "home", store
        base = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
        self.env = {**base, **env, "MESHCTL_HOME": str(self.home), "MESHCTL_STORE": store}

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([sys.executable, "-m", "meshctl", *args], capture_output=True,
                              text=True, cwd=self.work, env=self.env, timeout=600)  # fmt: skip
        if check and done.returncode != 0:
            raise SystemExit(f"meshctl {' '.join(args)} exited {done.returncode}:\n"
                             f"{done.stdout}{done.stderr}")  # fmt: skip
        return done

    def up(self, interval: float) -> None:
        self.run("--mesh", str(self.work / "mesh.yaml"), "up", "--policies",
                 str(self.work / "policies"), "--interval", str(interval))  # fmt: skip

    def status(self) -> dict[str, Any]:
        said: dict[str, Any] = json.loads(self.run("status", "-o", "json", check=False).stdout)
        return said

    def train(self) -> str:
        """A Ray Train job of the example loop, a checkpoint every 10 steps; its id."""
        done = self.run(
            "train", "model:train_loop", "--name", "train", "--no-follow",
            "--working-dir", str(ROOT / "examples" / "train"), "--gpus-per-worker", "1",
            "--cpus-per-worker", "0.5", "--memory-per-worker", "512MiB",
            "--config", f"steps={TRAIN_STEPS}", "--config", f"step_delay_s={STEP_S}",
            "--config", "checkpoint_every_steps=10",
        )  # fmt: skip
        return done.stdout.strip().splitlines()[-1]

    def wait_ended(self, ids: list[str], deadline_s: float) -> None:
        """Until every job has ended, or ``deadline_s`` has passed (the store may be away
        for a moment: asked again)."""
        until = time.monotonic() + deadline_s
        while time.monotonic() < until:
            try:
                with open_store_at(self.store, self.home) as store:
                    records = [store.get(JobRecord, i) for i in ids]
            except Exception:  # the store away: ask again
                records = []
            if records and all(r is not None and r.state in ENDED for r in records):
                return
            time.sleep(1.0)

    def events(self, path: Path) -> None:
        """The store's events, one a line: time, kind, job, message."""
        with open_store_at(self.store, self.home) as store:
            lines = [f"{e.at_s:.1f} {e.kind} {e.job_id or '-'} {e.message}" for e in store.events()]
        path.write_text("\n".join(lines) + "\n")

    def launches(self, ids: list[str]) -> dict[str, float]:
        """When the provider launched the first cloud instance meshctl asked for each of these
        jobs (the instance's own launch time, as the provider reports it), by job id; jobs
        that launched none are left out."""
        found: dict[str, float] = {}
        with open_store_at(self.store, self.home) as store:
            for job_id in ids:
                named = [e.message.split(" ", 1)[0] for e in store.events(job_id=job_id)
                         if e.kind == "instance.launched"]  # fmt: skip
                records = [store.get(InstanceRecord, name) for name in named]
                times = [r.launched_at_s for r in records if r is not None and r.launched_at_s]
                if times:
                    found[job_id] = min(times)
        return found

    def records(self, ids: list[str]) -> dict[str, dict[str, Any]]:
        """Each job's state, name, attempts and its last attempt's reason."""
        found: dict[str, dict[str, Any]] = {}
        with open_store_at(self.store, self.home) as store:
            for job_id in ids:
                record = store.get(JobRecord, job_id)
                if record is None:
                    continue
                attempts = sorted(store.list(AttemptRecord, job_id=job_id),
                                  key=lambda a: a.number)  # fmt: skip
                found[job_id] = {
                    "name": record.name,
                    "state": record.state.value,
                    "attempts": len(attempts),
                    "why": attempts[-1].reason if attempts else "",
                }
        return found


def world_up(
    stack: ExitStack, work: Path, args: argparse.Namespace, mesh_text: str, policy: str,
    env: dict[str, str],
) -> tuple[World, Client, Mesh]:  # fmt: skip
    postgres = stack.enter_context(pg_server())
    moto, gce, clouds = None, None, []
    if "{aws}" in mesh_text:  # the mesh has its cloud pools: their emulators, behind switches
        moto = stack.enter_context(MotoServer())
        gce = stack.enter_context(GceEmulator())
        clouds = [stack.enter_context(Switch(e)) for e in (moto.endpoint, gce.endpoint)]
    gate = stack.enter_context(Gate("http://127.0.0.1:9"))  # aimed once the cluster is up
    front = Front(gate, stack.enter_context(Switch(gate.address)), run_dir(work / "home"))
    aws, gcp = (c.address for c in clouds) if clouds else ("", "")
    text = mesh_text.format(pool=POOL, work=work, aws=aws, gcp=gcp, nodes=args.nodes)
    (work / "mesh.yaml").write_text(text)
    (work / "policies").mkdir()
    (work / "policies" / "chaos.yaml").write_text(policy)
    shutil.copy(ROOT / "policies" / "priorities.yaml", work / "policies")
    mesh = Mesh(work, postgres.database(), env)
    stack.callback(mesh.run, "down", "--force", check=False)
    mesh.up(args.interval)
    front.install()
    pool = LocalPool.model_validate(yaml.safe_load(text)["spec"]["pools"][0])
    client = Client(*_api_server(stack, mesh))
    world = World(front, pool, moto, gce, clouds, postgres, lambda: mesh.up(args.interval),
                  mesh.home, mesh.status)  # fmt: skip
    return world, client, mesh


def _api_server(stack: ExitStack, mesh: Mesh) -> tuple[int, str]:
    """``meshctl server`` on the mesh's store, and a user's token for it."""
    from meshctl.server.identity import add_user

    with open_store_at(mesh.store, mesh.home) as store:
        token = add_user(store, "chaos", ["default", "aws", "gcp"], Role.USER, time.time())[1]
    port = free_port()
    log = (mesh.work / "server.log").open("wb")
    server = subprocess.Popen([sys.executable, "-m", "meshctl", "server", "--port", str(port)],
                              cwd=mesh.work, env=mesh.env, stdout=log,
                              stderr=subprocess.STDOUT)  # fmt: skip

    def stop() -> None:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()

    stack.callback(stop)
    Client(port, token).ready()
    return port, token
