"""The flags ``meshctl sim run``, ``compare`` and ``sweep`` share: the mesh, the trace and its
window, the failure and checkpoint models, the scheduler's settings, what a trace job asks per
GPU, and where the report goes."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

MeshFile = Annotated[
    Path | None, typer.Option("--mesh", help="The mesh file (default: the app's mesh).")
]
Trace = Annotated[
    str,
    typer.Option(
        help="philly, itp, itp:clusterNN, openb, openb:NAME, synthetic, or a trace CSV file."
    ),
]
Days = Annotated[float, typer.Option(help="Days of the trace to replay.", min=0.001)]
StartDay = Annotated[float, typer.Option(help="Day of the trace the window starts at.", min=0)]
Replicate = Annotated[
    int, typer.Option(help="Each job k times, for a k-times larger mesh.", min=1, max=1000)
]
ArrivalScale = Annotated[
    float, typer.Option(help="Arrivals this many times as dense.", min=0.001, max=1000)
]
Failures = Annotated[str, typer.Option(help="Node failures: none, stepfun or llama3.")]
Seed = Annotated[int, typer.Option(help="Seeds every random draw: same seed, same report.")]
Cycle = Annotated[
    str,
    typer.Option(
        "--cycle", help="Time between scheduling cycles: seconds, or 30s, 1m (0: at every event)."
    ),
]
CheckpointInterval = Annotated[
    str, typer.Option(help="Checkpoint every DURATION of computing, or auto (Young/Daly).")
]
CheckpointCost = Annotated[
    str, typer.Option(help="What one checkpoint takes: seconds, or 30s, 1m.")
]
Restart = Annotated[
    str, typer.Option(help="What a restarted attempt needs to resume: seconds, or 30s, 5m.")
]
Comm = Annotated[
    float,
    typer.Option(help="Share of a multi-node job's step spent communicating.", min=0, max=1),
]
Candidates = Annotated[
    int,
    typer.Option(help="Feasible nodes scored per pool for a one-node job (controller: 32).", min=1),
]
QueueDepth = Annotated[
    int, typer.Option(help="Pending jobs decided per cycle, in queue order (0: all).", min=0)
]
JobsPerHour = Annotated[float, typer.Option(help="synthetic: mean arrivals per hour.", min=0.001)]
Out = Annotated[Path | None, typer.Option("--out", help="Write report.json and charts here.")]
Charts = Annotated[bool, typer.Option("--charts/--no-charts", help="PNG charts with --out.")]
CpusPerGpu = Annotated[
    float,
    typer.Option(help="CPUs a trace job asks per GPU (a trace gives GPUs only).", min=0),
]
MemoryPerGpu = Annotated[
    float,
    typer.Option(help="GiB of memory a trace job asks per GPU (a trace gives GPUs only).", min=0),
]

PolicySets = Annotated[
    list[str],
    typer.Option(
        "--policy",
        "-p",
        help="One policy set per flag: [NAME=]files or folders joined by commas, or none.",
    ),
]
