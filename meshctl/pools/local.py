"""The embedded on-prem pool: a Ray cluster of processes on this machine.

``start`` runs one ``ray start --block`` per node, each in a session of its own, so that every
process Ray spawns for that node (GCS, raylet, dashboard, agents, workers) belongs to it; the
run file records each session's leader pid and start time. ``stop`` signals exactly those
sessions, never ``ray stop`` and never processes found by name, and it works after a crash
because the run file outlives the processes that wrote it. A recorded leader whose pid now
belongs to another program (a different start time) is left alone.

GPUs are declared with ``--num-gpus`` (so GPU nodes exist on a CPU machine), other vendors'
devices in their own Ray resource (``TPU``, ``neuron_cores``: the accelerator registry's),
never as GPUs; the accelerator model as an ``accelerator_type:<model>`` resource, and
mesh.yaml's labels plus ``meshctl.io/node=<name>`` as Ray node labels. Each node's meshctl
agent starts just before it, on loopback and a free port, in a session of its own; the
node's labels say where it answers (``meshctl.io/agent-host``, ``meshctl.io/agent-port``).
Nodes start one after another: Ray picks each node's socket names by looking at what exists,
so nodes started at once on one machine race.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from meshctl.errors import Failure
from meshctl.host.ports import free_port, free_ports
from meshctl.host.procs import start_ticks, stat_fields, zombie
from meshctl.model.accelerators import GPU, AcceleratorsSpec
from meshctl.model.mesh import LocalPool, NodeAgents, NodeGroup
from meshctl.pools import driverlogs
from meshctl.pools.observed import (
    AGENT_HOST_LABEL,
    AGENT_PORT_LABEL,
    GPU_MEMORY_RESOURCE,
    NIC_RESOURCE,
    NODE_LABEL,
    ROLE_LABEL,
)
from meshctl.pools.ray import PoolError, RayPoolClient
from meshctl.state.private import open_private, private_dir, write_private

GIB = 1024**3
OBJECT_STORE_BYTES = 100 * 1024**2  # Ray's minimum is 75 MiB; keep nodes small
HEAD_MEMORY_BYTES = GIB // 2
START_TIMEOUT_S = 90.0
PORT_TAKEN = "lost a port it was given"  # to another process, between our pick and its bind

Progress = Callable[[str], None]


class LocalPoolError(Failure):
    """The embedded cluster could not be started or stopped."""


@dataclass
class Process:
    node: str
    pid: int
    start_ticks: int  # /proc/<pid>/stat field 22: tells a reused pid from ours


@dataclass
class LocalCluster:
    pool: str
    dashboard: str  # http://127.0.0.1:<port>
    gcs: str  # 127.0.0.1:<port>
    token_file: str
    temp_dir: str
    log_dir: str
    processes: list[Process] = field(default_factory=list)

    @property
    def token(self) -> str:
        return Path(self.token_file).read_text().strip()

    def save(self, path: Path) -> None:
        write_private(path, json.dumps(asdict(self), indent=2))

    @classmethod
    def load(cls, path: Path) -> LocalCluster:
        raw = json.loads(path.read_text())
        raw["processes"] = [Process(**p) for p in raw.get("processes", [])]
        return cls(**raw)


def run_file(run_dir: Path, pool: str) -> Path:
    return run_dir / f"pool-{pool}.json"


def start(
    pool: LocalPool,
    run_dir: Path,
    progress: Progress = lambda _: None,
    registry: AcceleratorsSpec | None = None,
) -> LocalCluster:
    """Start the pool's head and nodes; the run file is written before the first process.
    Each node declares its devices in its vendor's Ray resource (the ``registry``'s: ``GPU``,
    ``TPU``, ``neuron_cores`` ...; ``GPU`` without one)."""
    cluster = start_head(pool.name, run_dir, progress)
    try:
        for group in pool.nodes:
            for name in group.node_names():
                progress(f"starting node {name} ({_shape(group)})")
                add_node(cluster, name, group, run_dir, pool.agents, registry)
    except BaseException:
        stop(cluster)
        run_file(run_dir, pool.name).unlink(missing_ok=True)
        raise
    return cluster


def start_head(
    pool: str, run_dir: Path, progress: Progress = lambda _: None, head: NodeGroup | None = None
) -> LocalCluster:
    """A cluster's head: no work on it unless ``head`` gives it a shape (and a name). Tried
    twice, on fresh ports: on a loaded machine Ray's own 30 s wait for a new node can run out,
    and a port found free can be taken by another program before Ray binds it."""
    try:
        return _start_head(pool, run_dir, progress, head)
    except LocalPoolError as err:
        if not exited_starting(err):
            raise
        progress(f"the head of pool {pool} exited while starting; trying again")
        return _start_head(pool, run_dir, progress, head)


def _start_head(
    pool: str, run_dir: Path, progress: Progress, head: NodeGroup | None
) -> LocalCluster:
    private_dir(run_dir)
    token_file = run_dir / f"pool-{pool}.token"
    write_private(token_file, secrets.token_hex(32))
    gcs_port, dashboard_port = free_ports(2)
    cluster = LocalCluster(
        pool=pool,
        dashboard=f"http://127.0.0.1:{dashboard_port}",
        gcs=f"127.0.0.1:{gcs_port}",
        token_file=str(token_file),
        temp_dir=tempfile.mkdtemp(prefix="meshctl-ray-"),  # short: Ray's socket paths
        log_dir=str(run_dir / "logs"),
    )
    private_dir(Path(cluster.log_dir))
    path = run_file(run_dir, pool)
    cluster.save(path)
    name = head.name if head else "head"
    shape = (
        _shape_args(head, name)
        if head
        else ["--num-cpus=0", "--num-gpus=0", f"--memory={HEAD_MEMORY_BYTES}",
              f"--labels={NODE_LABEL}=head,{ROLE_LABEL}=head"]
    )  # fmt: skip
    try:
        progress(f"starting the head of pool {pool}")
        args = [
            "--head",
            f"--port={gcs_port}",
            f"--dashboard-port={dashboard_port}",
            "--dashboard-host=127.0.0.1",
            f"--ray-client-server-port={free_port()}",
            f"--temp-dir={cluster.temp_dir}",
            *shape,
        ]
        _launch(cluster, name, args, path)
        wait_for(lambda: _dashboard_up(cluster), f"the head of pool {pool}", cluster)
        if head is not None:  # a head that takes work: ready once the cluster lists it
            wait_for(node_up(cluster, name), f"the head of pool {pool}", cluster)
    except BaseException:
        stop(cluster)
        path.unlink(missing_ok=True)
        raise
    return cluster


def add_node(
    cluster: LocalCluster,
    name: str,
    group: NodeGroup,
    run_dir: Path,
    agents: NodeAgents | None = None,
    registry: AcceleratorsSpec | None = None,
) -> None:
    """One more node of ``group``'s shape, named ``name``; returns once the head sees it.
    With ``agents``, its meshctl agent starts first, and the node's labels say where it is.

    Its log monitor stays off: every node of the cluster runs on this one machine and shares
    the head's session log folder, and each node's monitor tails every worker's output file
    in it and sends it to the job's driver, so a line printed by a Ray task or actor reached
    the driver's log once per node. Ray's advice is one log monitor per machine: the head's.
    """
    for attempt in (1, 2):  # like the head: tried again once, on fresh ports
        labels = _start_agent(cluster, name, group, run_dir, agents) if agents else {}
        shape = _shape_args(group, name, labels, registry)
        args = [f"--address={cluster.gcs}", *shape, "--include-log-monitor=False"]
        _launch(cluster, name, args, run_file(run_dir, cluster.pool))
        try:
            wait_for(node_up(cluster, name), f"node {name}", cluster)
            return
        except LocalPoolError as err:
            if attempt == 2 or not exited_starting(err):
                raise
            remove_node(cluster, name, run_dir)


def exited_starting(err: LocalPoolError) -> bool:
    """Whether the node's process exited while starting, or lost a port it was given (worth
    one more try, on other ports: Ray's fixed start-up wait ran out, a port was taken
    meanwhile), not merely slow to come up."""
    return " exited while starting" in str(err) or PORT_TAKEN in str(err)


def remove_node(cluster: LocalCluster, name: str, run_dir: Path, grace_s: float = 3.0) -> None:
    """Stop exactly that node's processes (an instance terminated, a node lost)."""
    mine = [p for p in cluster.processes if p.node == name]
    terminate([p.pid for p in mine if _ours(p)], grace_s)
    cluster.processes = [p for p in cluster.processes if p.node != name]
    cluster.save(run_file(run_dir, cluster.pool))


def stop(cluster: LocalCluster, grace_s: float = 3.0) -> list[int]:
    """Stop every process of the cluster's node sessions; return the pids signalled."""
    signalled = terminate([p.pid for p in cluster.processes if _ours(p)], grace_s)
    if cluster.temp_dir and cluster.log_dir:  # its jobs' driver logs outlive it a while
        driverlogs.keep(cluster.temp_dir, driverlogs.kept_folder(cluster.log_dir, cluster.pool))
    shutil.rmtree(cluster.temp_dir, ignore_errors=True)
    return signalled


def terminate(sessions: list[int], grace_s: float) -> list[int]:
    """SIGTERM these sessions' processes and their descendants, SIGKILL what is left after
    ``grace_s``; return the pids signalled."""
    # Taken before any signal: Ray starts job drivers in sessions of their own, children
    # of a job supervisor in the node's session; once that dies they would be orphans.
    family = set(_family(sessions))
    signalled: list[int] = []
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        members = sorted((family | set(_family(sessions))) - _gone(family))
        for pid in members:
            _signal(pid, sig)
        signalled += [pid for pid in members if pid not in signalled]
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and len(_gone(family)) < len(family):
            time.sleep(0.1)
    return signalled


def running(cluster: LocalCluster) -> bool:
    """Whether the head's session still has processes."""
    head = cluster.processes[0] if cluster.processes else None  # the head starts first
    return head is not None and _ours(head) and bool(session_members(head.pid))


def leftover(cluster: LocalCluster) -> list[int]:
    """Processes of the cluster's sessions, and their descendants (job drivers), still alive
    (none after ``stop``)."""
    return _family([p.pid for p in cluster.processes if _ours(p)])


def _family(sessions: list[int]) -> list[int]:
    """The live members of these sessions and all their descendants, whatever their session."""
    parents: dict[int, list[int]] = {}
    for pid in _pids():
        fields = stat_fields(pid)
        if fields is not None and fields[0] not in ("Z", "X"):
            parents.setdefault(int(fields[1]), []).append(pid)
    found = [pid for sid in sessions for pid in session_members(sid)]
    queue = list(found)
    while queue:
        for child in parents.get(queue.pop(), []):
            if child not in found:
                found.append(child)
                queue.append(child)
    return found


def _gone(pids: set[int]) -> set[int]:
    return {pid for pid in pids if zombie(pid)}


def _start_agent(
    cluster: LocalCluster, name: str, group: NodeGroup, run_dir: Path, agents: NodeAgents
) -> dict[str, str]:
    """The node's agent, in a session of its own (stopped with the node), on loopback with
    the cluster's token; returns the labels that tell the controller where it answers."""
    port_file = run_dir / f"agent-{cluster.pool}-{name}.port"
    port_file.unlink(missing_ok=True)
    args = [
        sys.executable, "-m", "meshctl", "agent", "run", f"--token-file={cluster.token_file}",
        f"--node={name}", f"--gpus={int(group.gpus)}", "--host=127.0.0.1", "--port=0",
        f"--port-file={port_file}", f"--interval={agents.interval_s:g}",
        f"--disk={run_dir}", f"--min-free-gib={agents.min_free_gib:g}",
        "--emulated",  # GPUs declared with --num-gpus: probed only through a (fake) driver
    ]  # fmt: skip
    if group.accelerator is not None and group.accelerator.vendor != "nvidia":
        args.append(f"--vendor={group.accelerator.vendor}")  # not probed with NVIDIA's tools
    if group.cache_gib:  # the node's own folder: every node of the embedded pool is here
        cache = run_dir / "cache" / f"{cluster.pool}-{name}"
        args += [f"--cache-dir={cache}", f"--cache-gib={group.cache_gib:g}"]
    spawn(cluster, name, args, f"{cluster.pool}-{name}-agent.log", run_file(run_dir, cluster.pool))
    wait_for(port_file.exists, f"the agent of node {name}", cluster)
    port = port_file.read_text().strip()
    return {AGENT_PORT_LABEL: port, AGENT_HOST_LABEL: "127.0.0.1"}


# --- processes ---------------------------------------------------------------------------------


def _launch(cluster: LocalCluster, node: str, args: list[str], path: Path) -> None:
    ray = str(Path(sys.executable).with_name("ray"))
    common = [*node_ports(), "--disable-usage-stats", "--block"]
    spawn(cluster, node, [ray, "start", *args, *common], f"{cluster.pool}-{node}.log", path)


def node_ports() -> list[str]:
    """``ray start``'s arguments for one of several nodes on this machine: a free port for
    each of its servers, and a small object store."""
    ports = iter(free_ports(6))
    return [
        f"--node-manager-port={next(ports)}",
        f"--object-manager-port={next(ports)}",
        f"--metrics-export-port={next(ports)}",
        f"--dashboard-agent-listen-port={next(ports)}",
        f"--dashboard-agent-grpc-port={next(ports)}",
        f"--runtime-env-agent-port={next(ports)}",
        f"--object-store-memory={OBJECT_STORE_BYTES}",
    ]


def spawn(
    cluster: LocalCluster,
    node: str,
    argv: list[str],
    log_name: str,
    path: Path,
    env: dict[str, str] | None = None,
) -> None:
    """Start ``argv`` for ``node`` in a session of its own, its output in ``log_name``, and
    record it in the run file at ``path`` (stopped with the node, by pid). ``env``: the
    cluster's ``environment`` unless given."""
    log = open_private(Path(cluster.log_dir) / log_name)
    with log:
        proc = subprocess.Popen(
            argv,
            env=env if env is not None else environment(cluster),
            cwd=cluster.temp_dir,  # never a folder holding a `ray` package
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    cluster.processes.append(Process(node, proc.pid, start_ticks(proc.pid) or 0))
    cluster.save(path)


def environment(cluster: LocalCluster) -> dict[str, str]:
    env = dict(os.environ)
    bin_dir = str(Path(sys.executable).parent)
    env.update(
        RAY_AUTH_MODE="token",
        RAY_AUTH_TOKEN_PATH=cluster.token_file,
        RAY_USAGE_STATS_ENABLED="0",
        # a job's `python` is this interpreter, the one the cluster runs
        PATH=bin_dir + os.pathsep + env.get("PATH", ""),
    )
    env.pop("RAY_AUTH_TOKEN", None)
    # Each process of the cluster's nodes, and so each worker, finds its own cluster: Ray's
    # tools inside a job (Ray Train's placement group cleaner on the head, the State API)
    # otherwise look for one on the machine and fail when meshctl runs several there.
    env["RAY_ADDRESS"] = cluster.gcs
    return env


def _shape_args(
    group: NodeGroup,
    name: str,
    more: dict[str, str] | None = None,
    registry: AcceleratorsSpec | None = None,
) -> list[str]:
    labels = {**group.labels, **(more or {}), NODE_LABEL: name}
    resources: dict[str, float] = {}
    gpus = int(group.gpus)
    if group.accelerator:
        resources[f"accelerator_type:{group.accelerator.model}"] = 1
        if group.gpus:  # claimed by meshctl's jobs: Ray refuses to over-commit them too
            resources[GPU_MEMORY_RESOURCE] = group.gpus * group.accelerator.memory_gib
        acc = group.accelerator
        resource, units = registry.counted_in(acc.vendor, acc.model) if registry else (GPU, 1)
        if resource != GPU and gpus:  # a TPU host, a Trainium node: never Ray's GPU
            resources[resource], gpus = gpus * units, 0
    if group.nic_gbps:
        resources[NIC_RESOURCE] = group.nic_gbps
    return [
        f"--num-cpus={max(1, round(group.cpus))}",
        f"--num-gpus={gpus}",
        f"--memory={int(group.memory_gib * GIB)}",
        f"--resources={json.dumps(resources)}",
        "--labels=" + ",".join(f"{k}={v}" for k, v in sorted(labels.items())),
    ]


def _shape(group: NodeGroup) -> str:
    gpus = f"{int(group.gpus)} x {group.accelerator.model}, " if group.accelerator else ""
    return f"{gpus}{group.cpus:g} CPUs, {group.memory_gib:g} GiB"


def session_members(sid: int) -> list[int]:
    """Pids of live processes in session ``sid`` (Linux /proc)."""
    members = []
    for pid in _pids():
        try:
            if os.getsid(pid) == sid and not zombie(pid):
                members.append(pid)
        except OSError:
            continue
    return members


def _pids() -> Iterator[int]:
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            yield int(entry)


def _ours(process: Process) -> bool:
    """False when the leader's pid is alive but belongs to a later program."""
    ticks = start_ticks(process.pid)
    return ticks is None or ticks == process.start_ticks


def _signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


# --- readiness ---------------------------------------------------------------------------------


def _alive_nodes(cluster: LocalCluster) -> set[str] | None:
    """Names of the cluster's live nodes, through the pool adapter; None: not answering."""
    client = RayPoolClient(cluster.pool, cluster.dashboard, cluster.token, timeout_s=5)
    try:
        return {n.name for n in client.nodes() if n.alive}
    except PoolError:
        return None


def _dashboard_up(cluster: LocalCluster) -> bool:
    return _alive_nodes(cluster) is not None


def node_up(cluster: LocalCluster, name: str) -> Callable[[], bool]:
    return lambda: name in (_alive_nodes(cluster) or set())


def wait_for(
    ready: Callable[[], bool], what: str, cluster: LocalCluster, leader_only: bool = False
) -> None:
    """Until ``ready()``; fails at once when the last process started has gone (its session
    empty, or with ``leader_only`` its leader exited: what it started may live on)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    last = cluster.processes[-1]
    log = Path(_log_of(cluster, last))
    since = log.stat().st_size if log.exists() else 0  # what an earlier try wrote stays there
    while not ready():
        if zombie(last.pid) if leader_only else not session_members(last.pid):
            raise LocalPoolError(f"{what} exited while starting; see {log}")
        if _port_taken(log, since):  # Ray goes on without its dashboard: never comes up
            raise LocalPoolError(f"{what} {PORT_TAKEN} while starting; see {log}")
        if time.monotonic() > deadline:
            raise LocalPoolError(
                f"{what} did not come up within {START_TIMEOUT_S:.0f} s; "
                f"see {_log_of(cluster, last)}"
            )
        time.sleep(0.25)


def _port_taken(log: Path, since: int = 0) -> bool:
    """Whether the node's log, from byte ``since`` on, says Ray could not bind a port it was
    given (another process took it between our pick and Ray's bind)."""
    try:
        with log.open("rb") as text:
            text.seek(max(since, log.stat().st_size - 65536))
            return b"Failed to find a valid port" in text.read()
    except OSError:
        return False


def _log_of(cluster: LocalCluster, process: Process) -> str:
    return str(Path(cluster.log_dir) / f"{cluster.pool}-{process.node}.log")
