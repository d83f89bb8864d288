"""``meshctl agent run|probe|install``: the node agent (``meshctl.agent``).

``run`` probes the node every few seconds and serves the verdict over HTTP, the cluster's
token required; ``probe`` probes once and prints what it found (the same JSON); ``install``
prints a systemd unit that runs the agent on a node of an existing Ray cluster.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from meshctl.errors import InvalidInput

if TYPE_CHECKING:
    from meshctl.agent.server import Agent
    from meshctl.data.cache import NodeCache

app = typer.Typer(help="The node agent: GPU, disk and NIC probes, served to the controller.")

NodeOption = Annotated[
    str | None, typer.Option(help="The node's name (default: this host's name).")
]
GpusOption = Annotated[int, typer.Option(help="GPUs the node declares (checked against).", min=0)]
DiskOption = Annotated[
    list[str] | None,
    typer.Option("--disk", help="A checkpoint or cache folder whose free space is watched."),
]
NicOption = Annotated[
    list[str] | None,
    typer.Option("--nic", help="A NIC whose link is watched (default: the default route's)."),
]
KernelLogOption = Annotated[
    str | None, typer.Option(help="A file holding the kernel log (default: dmesg).")
]
MinFreeOption = Annotated[
    float, typer.Option(help="Free GiB under which a watched folder is unhealthy.", min=0)
]
EmulatedOption = Annotated[
    bool,
    typer.Option(
        "--emulated",
        help="The node's GPUs are declared to Ray with no device behind them: without a "
        "driver they are not probed, nor the kernel log read, and that is no fault.",
    ),
]
NoNvmlOption = Annotated[
    bool, typer.Option("--no-nvml", help="Never load NVML: probe with nvidia-smi only.")
]
CacheDirOption = Annotated[
    Path | None,
    typer.Option(help="The node's dataset cache folder (a local disk); none: no cache."),
]
CacheGibOption = Annotated[float, typer.Option(help="The dataset cache's size limit, GiB.", min=0)]


class AgentInputError(InvalidInput):
    """A flag the agent cannot start with."""


@app.command("run")
def run(
    token_file: Annotated[
        Path, typer.Option(help="The cluster's token: every request must bear it.")
    ],
    node: NodeOption = None,
    gpus: GpusOption = 0,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "0.0.0.0",
    port: Annotated[int, typer.Option(help="Port to listen on (0: any free one).")] = 9109,
    interval: Annotated[float, typer.Option(help="Seconds between probes.", min=0.1)] = 5.0,
    disk: DiskOption = None,
    nic: NicOption = None,
    kernel_log: KernelLogOption = None,
    min_free_gib: MinFreeOption = 5.0,
    no_nvml: NoNvmlOption = False,
    vendor: Annotated[
        str,
        typer.Option(help="The vendor of the node's devices: only nvidia's are probed."),
    ] = "nvidia",
    port_file: Annotated[
        Path | None, typer.Option(help="Write the port listened on here once serving.")
    ] = None,
    cache_dir: CacheDirOption = None,
    cache_gib: CacheGibOption = 100.0,
    emulated: EmulatedOption = False,
) -> None:
    """Run the node agent: probe the node and serve its verdict.

    Probes every --interval seconds and serves GET /v1/probe until stopped;
    every request must bear the cluster's token (401 without it), and the agent
    runs nothing it is sent. With --cache-dir it keeps the node's datasets
    there and serves them to its peers.

    Examples:
      meshctl agent run --token-file /etc/meshctl/ray.token --gpus 8
      meshctl agent run --token-file t --cache-dir /nvme/cache --cache-gib 3000
    """
    import contextlib
    import logging
    import signal
    import threading

    from meshctl.agent.server import serve
    from meshctl.state.private import write_private

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    token = _token(token_file)
    agent = _agent(node, gpus, disk, nic, kernel_log, min_free_gib, no_nvml, vendor, emulated)
    if cache_dir is not None:
        agent.cache = _cache(cache_dir, cache_gib, token)
    agent.probe()  # the first probe before the first answer
    try:
        server = serve(agent, host, port, token)
    except OSError as err:
        raise AgentInputError(f"--port: cannot listen on {host}:{port}: {err.strerror}") from err
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    threading.Thread(target=agent.run, args=(interval, stop), daemon=True).start()
    bound = server.server_address[1]
    if port_file is not None:
        write_private(port_file, f"{bound}\n")
    logging.getLogger("meshctl.agent").info(
        "agent for %s on %s:%s (GPU probe: %s)",
        agent.node,
        host,
        bound,
        agent.gpu.name if agent.gpu else "none",
    )
    serving = threading.Thread(target=server.serve_forever, daemon=True)
    serving.start()
    with contextlib.suppress(KeyboardInterrupt):
        stop.wait()
    server.shutdown()
    server.server_close()


@app.command("probe")
def probe(
    node: NodeOption = None,
    gpus: GpusOption = 0,
    disk: DiskOption = None,
    nic: NicOption = None,
    kernel_log: KernelLogOption = None,
    min_free_gib: MinFreeOption = 5.0,
    no_nvml: NoNvmlOption = False,
    emulated: EmulatedOption = False,
) -> None:
    """Probe the node once and print the JSON the agent would serve.

    Exit codes:
      0  healthy, degraded or unknown
      1  unhealthy

    Examples:
      meshctl agent probe --gpus 8
      meshctl agent probe --disk /mnt/checkpoints --nic ib0 --no-nvml
    """
    import json

    agent = _agent(node, gpus, disk, nic, kernel_log, min_free_gib, no_nvml, emulated=emulated)
    found = agent.answer()
    typer.echo(json.dumps(found, indent=2))
    if found["verdict"] == "unhealthy":
        raise typer.Exit(1)


@app.command("install")
def install(
    token_file: Annotated[Path, typer.Option(help="The cluster's token file, on the node.")] = Path(
        "/etc/meshctl/ray.token"
    ),
    gpus: GpusOption = 0,
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 9109,
    disk: DiskOption = None,
    nic: NicOption = None,
    cache_dir: CacheDirOption = None,
    cache_gib: CacheGibOption = 100.0,
) -> None:
    """Print a systemd unit that runs the agent on this node.

    For a node of an existing cluster: write it to
    /etc/systemd/system/meshctl-agent.service, then run systemctl enable --now
    meshctl-agent.

    Examples:
      meshctl agent install --gpus 8 --disk /mnt/checkpoints --nic ib0
      meshctl agent install --token-file /etc/meshctl/ray.token > unit.service
    """
    args = ["agent", "run", f"--token-file={token_file}", f"--gpus={gpus}", f"--port={port}"]
    args += [f"--disk={d}" for d in disk or ()] + [f"--nic={n}" for n in nic or ()]
    if cache_dir is not None:
        args += [f"--cache-dir={cache_dir}", f"--cache-gib={cache_gib:g}"]
    command = shlex.join([sys.executable, "-m", "meshctl", *args])
    typer.echo(
        "[Unit]\n"
        "Description=meshctl node agent: GPU, disk and NIC probes for the controller\n"
        "After=network-online.target\nWants=network-online.target\n\n"
        "[Service]\n"
        f"ExecStart={command}\n"
        "Restart=always\nRestartSec=2\n"
        "# root reads the kernel log (XIDs); the agent runs nothing it is sent\n"
        "User=root\nNoNewPrivileges=true\nProtectSystem=strict\nProtectHome=read-only\n"
        "PrivateTmp=true\n\n"
        "[Install]\nWantedBy=multi-user.target"
    )


def _cache(folder: Path, gib: float, token: str) -> NodeCache:
    from meshctl.data.cache import NodeCache

    try:  # the cache makes its folder, and any missing above it, private (0700)
        return NodeCache(folder, int(gib * 1024**3), token)
    except OSError as err:
        raise AgentInputError(f"--cache-dir: cannot use {folder}: {err.strerror}") from err


def _token(path: Path) -> str:
    try:
        token = path.read_text(encoding="utf-8").strip()
    except OSError as err:
        raise AgentInputError(f"--token-file: cannot read {path}: {err.strerror}") from err
    if not token:
        raise AgentInputError(f"--token-file: {path} is empty; expected the cluster's token")
    return token


def _agent(
    node: str | None,
    gpus: int,
    disk: list[str] | None,
    nic: list[str] | None,
    kernel_log: str | None,
    min_free_gib: float,
    no_nvml: bool,
    vendor: str = "nvidia",
    emulated: bool = False,
) -> Agent:
    """The agent the flags describe. On an emulated node without a driver (no fake one on the
    PATH either) the kernel log is not read unless named: the host's XIDs are not its GPUs'."""
    import os
    import socket

    from meshctl.agent.probe import Limits
    from meshctl.agent.server import Agent
    from meshctl.agent.sources import KernelLog, default_route_nic, gpu_source

    for folder in disk or ():
        if not Path(folder).is_dir():
            raise AgentInputError(f"--disk: {folder} is not a folder")
    name = node or socket.gethostname()
    os.environ["MESHCTL_AGENT_NODE"] = name  # what the tools it runs may read (a fake driver)
    nics = list(nic or ())
    if not nics and (default := default_route_nic()) is not None:
        nics = [default]
    limits = Limits(expected_gpus=gpus, min_free_gib=min_free_gib, vendor=vendor, emulated=emulated)
    gpu = gpu_source(nvml=not no_nvml) if vendor == "nvidia" else None
    unread = emulated and gpu is None and kernel_log is None
    return Agent(name, limits, gpu, None if unread else KernelLog(kernel_log), disk or (), nics)
