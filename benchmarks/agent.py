"""The node agent: what a probe costs, and how fast what it finds takes a node out.

    python benchmarks/agent.py [--probes 20] [--cpu-window 30] [--trials 3] [--interval 1.0]
                               [--no-ray-dead] [--json]

1. ``probe_ms``: the median of ``--probes`` probes in this process, through the fake
   ``nvidia-smi`` and ``dmesg`` of scripts/fake-gpu (no GPU driver here: the fake is a Python
   script, so each probe pays two interpreter start-ups that NVML on a real node does not),
   one disk and the default route's NIC; ``probe_ms_no_gpu``: the same with no GPU source.
2. ``cpu_pct``: ``meshctl agent run`` as a process of its own at its default interval (5 s)
   for ``--cpu-window`` seconds: its CPU time and its children's (the fake tools), as a
   percentage of one core. The target is under 1%. ``cpu_pct_no_gpu``: the same agent with
   no GPU source (the kernel log, disk and NIC only): its own cost, what remains where NVML
   answers without a process per probe.
3. ``xid_to_cordon_s``: the embedded mesh (two emulated 4-GPU nodes, each with its agent
   probing every 2 s and reading the kernel log every half second; the controller cycling every
   ``--interval`` s): an XID 79 line appended to one node's fake kernel log, until the node's
   record is unhealthy. ``--trials`` times (the log removed and the node back in service
   between trials); the median. The target is two controller cycles or less.
4. ``silent_node_detect_s``: a job running on a node; every process of that node (its Ray
   processes and its agent) stopped with SIGSTOP; until the job's ``job.evicted`` event
   (the mesh's agents: suspect after 3 s, dead after 8 s, given in the JSON). Beside it
   ``ray_dead_s``: until Ray's own node list says the node is dead (with Ray's defaults about
   a minute; ``--no-ray-dead`` leaves it out, null, as the suite's test of this script does).

Prints the figures (``--json``: one line); brings the mesh down at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from meshctl.agent.probe import Limits
from meshctl.agent.server import Agent
from meshctl.agent.sources import KernelLog, SmiSource, default_route_nic
from meshctl.pools import local
from meshctl.pools.ray import RayPoolClient
from meshctl.state import JobRecord, NodeRecord, open_store

ROOT = Path(__file__).resolve().parents[1]
FAKE = ROOT / "scripts" / "fake-gpu"
SUSPECT_S, DEAD_S = 3, 8
DEADLINE_S = 180.0
XID_LINE = "[ 4242.0] NVRM: Xid (PCI:0000:1b:00): 79, pid=4242, GPU has fallen off the bus.\n"
MESH = """\
apiVersion: meshctl/v1
kind: Mesh
metadata: {{name: agent-bench}}
spec:
  pools:
    - name: onprem
      provider: local
      agents: {{suspect_after_s: {suspect}, dead_after_s: {dead}, interval_s: 2}}
      nodes:
        - {{name: gpu, count: 2, gpus: 4, cpus: 1, memory_gib: 2GiB,
           accelerator: {{model: A100, memory_gib: 80GiB}}}}
"""


def fake_env(gpus: Path) -> dict[str, str]:
    return {"PATH": f"{FAKE}{os.pathsep}{os.environ['PATH']}", "MESHCTL_FAKE_GPU_DIR": str(gpus),
            "MESHCTL_FAKE_GPUS": "4"}  # fmt: skip


def probe_ms(probes: int, folder: Path) -> tuple[float, float]:
    saved = dict(os.environ)
    os.environ.update(fake_env(folder) | {"MESHCTL_AGENT_NODE": "bench"})
    try:
        return _probe_ms(probes, folder)
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _probe_ms(probes: int, folder: Path) -> tuple[float, float]:
    nic = default_route_nic()
    kernel = KernelLog(None)  # the fake dmesg, first on the PATH
    with_gpu = Agent("bench", Limits(expected_gpus=4), SmiSource(str(FAKE / "nvidia-smi")), kernel,
                     [str(folder)], [nic] if nic else [])  # fmt: skip
    without = Agent("bench", Limits(), None, kernel, [str(folder)], [nic] if nic else [])
    return (
        statistics.median(with_gpu.probe().took_ms for _ in range(probes)),
        statistics.median(without.probe().took_ms for _ in range(probes)),
    )


def cpu_pct(window_s: float, folder: Path, gpu: bool = True) -> float:
    """``gpu``: through the fake nvidia-smi; else with no GPU source (the fake dmesg only):
    the agent's own cost, what remains on a node where NVML answers in microseconds."""
    token = folder / "token"
    token.write_text("bench-token")
    env = {**os.environ, **fake_env(folder)}
    if not gpu:
        tools = folder / "no-gpu-tools"
        tools.mkdir(exist_ok=True)
        if not (tools / "dmesg").exists():
            (tools / "dmesg").symlink_to(FAKE / "dmesg")
        env["PATH"] = f"{tools}{os.pathsep}{os.environ['PATH']}"
    port_file = folder / "agent.port"
    port_file.unlink(missing_ok=True)
    agent = subprocess.Popen(
        [sys.executable, "-m", "meshctl", "agent", "run", f"--token-file={token}", "--gpus=4",
         "--node=bench", "--host=127.0.0.1", "--port=0", f"--disk={folder}", "--no-nvml",
         f"--port-file={port_file}"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        until("the agent serving", port_file.exists)  # past its start-up and first probe
        time.sleep(1.0)
        before, started = _cpu_s(agent.pid), time.monotonic()
        time.sleep(window_s)
        used, elapsed = _cpu_s(agent.pid) - before, time.monotonic() - started
    finally:
        agent.terminate()
        agent.wait(10)
    return 100.0 * used / elapsed


def _cpu_s(pid: int) -> float:
    """User and system time of ``pid`` and its waited-for children, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = sum(int(fields[i]) for i in (11, 12, 13, 14))  # utime stime cutime cstime
    return ticks / os.sysconf("SC_CLK_TCK")


def meshctl(home: Path, *args: str, env: dict[str, str] | None = None) -> str:
    return subprocess.run(
        [sys.executable, "-m", "meshctl", *args], capture_output=True, text=True, check=True,
        cwd=home.parent, env={**os.environ, "MESHCTL_HOME": str(home), **(env or {})},
    ).stdout  # fmt: skip


def until(what: str, ready: Callable[[], Any], every_s: float = 0.05) -> float:
    started, deadline = time.monotonic(), time.monotonic() + DEADLINE_S
    while not ready():
        if time.monotonic() > deadline:
            raise SystemExit(f"benchmark: {what} did not happen within {DEADLINE_S:.0f} s")
        time.sleep(every_s)
    return time.monotonic() - started


def node_state(home: Path, node: str) -> str | None:
    with open_store(home) as store:
        record = store.get(NodeRecord, f"onprem/{node}")
    return record.state if record is not None else None


def xid_to_cordon(home: Path, gpus: Path, trials: int) -> list[float]:
    samples = []
    until("the agents' first answers", lambda: (home / "run" / "agents.json").exists())
    for _ in range(trials):
        log = gpus / "gpu-1.kmsg"
        until("gpu-1 ready", lambda: node_state(home, "gpu-1") == "ready")
        with log.open("a") as kernel:
            kernel.write(XID_LINE)
        samples.append(until("gpu-1 unhealthy", lambda: node_state(home, "gpu-1") == "unhealthy"))
        log.unlink()  # the node rebooted
    until("gpu-1 ready", lambda: node_state(home, "gpu-1") == "ready")
    return samples


def silent_node(home: Path, ray_too: bool = True) -> tuple[float, float | None]:
    sleeper = ["python", "-c", "import time; time.sleep(600)"]
    job_id = meshctl(home, "submit", "--gpus", "4", "--name", "sleeper", "--", *sleeper)
    job_id = job_id.strip().splitlines()[-1]

    def running_on() -> str | None:
        with open_store(home) as store:
            job = store.get(JobRecord, job_id)
        return None if job is None or job.state != "running" else meshctl_nodes(home, job_id)

    until("the job running", running_on, 0.25)
    node = running_on()
    assert node is not None
    cluster = local.LocalCluster.load(local.run_file(home / "run", "onprem"))
    client = RayPoolClient("onprem", cluster.dashboard, cluster.token)
    frozen = [pid for p in cluster.processes if p.node == node
              for pid in local.session_members(p.pid)]  # fmt: skip
    times: dict[str, float] = {}

    def ray_dead() -> None:
        times["ray"] = until(
            "Ray calling the node dead",
            lambda: not any(n.alive for n in client.nodes() if n.name == node),
            0.25,
        )

    for pid in frozen:
        os.kill(pid, signal.SIGSTOP)
    watcher = threading.Thread(target=ray_dead)
    if ray_too:
        watcher.start()
    try:
        times["meshctl"] = until("the job evicted", lambda: _evicted(home, job_id))
        if ray_too:
            watcher.join()
    finally:
        for pid in frozen:
            os.kill(pid, signal.SIGCONT)
        meshctl(home, "jobs", "cancel", job_id)
    return times["meshctl"], times.get("ray")


def meshctl_nodes(home: Path, job_id: str) -> str | None:
    shown = json.loads(meshctl(home, "jobs", "show", job_id, "-o", "json"))
    nodes = shown.get("nodes") or []
    return str(nodes[0]) if nodes else None


def _evicted(home: Path, job_id: str) -> bool:
    with open_store(home) as store:
        return any(e.kind == "job.evicted" for e in store.events(job_id=job_id))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--probes", type=int, default=20)
    parser.add_argument("--cpu-window", type=float, default=30.0)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--interval", type=float, default=1.0, help="the controller's cycle")
    parser.add_argument(
        "--no-ray-dead", dest="ray_dead", action="store_false",
        help="do not wait for Ray to call the silent node dead (ray_dead_s: null)",
    )  # fmt: skip
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="meshctl-agent-bench-") as tmp:
        base = Path(tmp)
        (base / "gpus").mkdir()
        probe, probe_no_gpu = probe_ms(args.probes, base / "gpus")
        cpu = cpu_pct(args.cpu_window, base / "gpus")
        cpu_no_gpu = cpu_pct(args.cpu_window, base / "gpus", gpu=False)
        (base / "mesh.yaml").write_text(MESH.format(suspect=SUSPECT_S, dead=DEAD_S))
        home = base / "home"
        meshctl(home, "--mesh", str(base / "mesh.yaml"), "up", "--interval", str(args.interval),
                env=fake_env(base / "gpus"))  # fmt: skip
        try:
            xids = xid_to_cordon(home, base / "gpus", args.trials)
            silent_s, ray_s = silent_node(home, args.ray_dead)
        finally:
            subprocess.run([sys.executable, "-m", "meshctl", "down", "--force"], cwd=base,
                           env={**os.environ, "MESHCTL_HOME": str(home)},
                           capture_output=True, check=False)  # fmt: skip
    result = {
        "probe_ms": round(probe, 2),
        "probe_ms_no_gpu": round(probe_no_gpu, 2),
        "cpu_pct": round(cpu, 3),
        "cpu_pct_no_gpu": round(cpu_no_gpu, 3),
        "xid_to_cordon_s": round(statistics.median(xids), 2),
        "xid_to_cordon_samples_s": [round(x, 2) for x in xids],
        "controller_interval_s": args.interval,
        "silent_node_detect_s": round(silent_s, 2),
        "ray_dead_s": None if ray_s is None else round(ray_s, 2),
        "suspect_after_s": SUSPECT_S,
        "dead_after_s": DEAD_S,
    }
    if args.json:
        print(json.dumps(result))
        return
    print(f"probe: {result['probe_ms']} ms median through the fake nvidia-smi "
          f"({result['probe_ms_no_gpu']} ms without a GPU source)")  # fmt: skip
    print(f"agent CPU at its default 5 s interval: {result['cpu_pct']}% of one core through the "
          f"fake nvidia-smi, {result['cpu_pct_no_gpu']}% with no GPU source")  # fmt: skip
    samples = result["xid_to_cordon_samples_s"]
    print(f"XID to cordon: {result['xid_to_cordon_s']} s median "
          f"(controller cycle {args.interval:g} s; samples {samples})")  # fmt: skip
    ray_said = "" if ray_s is None else f"; Ray called it dead after {result['ray_dead_s']} s"
    print(f"silent node to its job evicted: {result['silent_node_detect_s']} s (dead after "
          f"{DEAD_S} s of silence){ray_said}")  # fmt: skip


if __name__ == "__main__":
    main()
