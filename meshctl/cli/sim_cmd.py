"""``meshctl sim run`` and ``meshctl sim compare``: the production core over a trace, offline.

Both read a mesh file, policy files and a trace, run the simulator (``meshctl.simrun``) with
a progress bar on stderr, and print a table (or the JSON report with ``-o json``). ``--out``
writes ``report.json`` and PNG charts; ``compare`` writes one folder per policy set and a
``compare.json``. The files are written by ``meshctl.simrun`` (``write``, ``write_compare``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from meshctl.cli.context import app_context
from meshctl.cli.errors import InvalidRequestError
from meshctl.cli.options import OutputOption, duration_flag
from meshctl.cli.render import Column, Output

if TYPE_CHECKING:
    from meshctl.cli.context import AppContext
    from meshctl.simrun import Outcome, RunSpec

app = typer.Typer(
    help="Simulate the mesh: the production scheduler and policies over real traces.",
    no_args_is_help=True,
)

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


def _spec(
    mesh: Path,
    policies: list[Path],
    trace: str,
    days: float,
    start_day: float,
    replicate: int,
    arrival_scale: float,
    failures: str,
    seed: int,
    cycle: str,
    checkpoint_interval: str,
    checkpoint_cost: str,
    restart: str,
    comm_fraction: float,
    jobs_per_hour: float,
    candidates: int,
    queue_depth: int,
) -> RunSpec:
    from meshctl.simrun import FAILURE_PRESETS, RunSpec

    if failures not in FAILURE_PRESETS:
        raise InvalidRequestError(
            f"--failures: expected one of {', '.join(FAILURE_PRESETS)}, got {failures!r}"
        )
    interval: float | None = None
    if checkpoint_interval != "auto":
        interval = duration_flag("--checkpoint-interval", checkpoint_interval)
        if interval <= 0:
            raise InvalidRequestError("--checkpoint-interval: expected a duration > 0 or auto")
    return RunSpec(
        mesh=mesh,
        trace=trace,
        policies=tuple(policies),
        days=days,
        start_day=start_day,
        replicate=replicate,
        arrival_scale=arrival_scale,
        failures=failures,
        seed=seed,
        cycle_s=duration_flag("--cycle", cycle),
        checkpoint_interval_s=interval,
        checkpoint_cost_s=duration_flag("--checkpoint-cost", checkpoint_cost),
        restart_s=duration_flag("--restart", restart),
        comm_fraction=comm_fraction,
        synthetic_jobs_per_hour=jobs_per_hour,
        candidates=candidates,
        queue_depth=queue_depth or None,
    )


def _simulate(context: AppContext, spec: RunSpec, policy_paths: list[Path], label: str) -> Outcome:
    from meshctl.catalog.check import mesh_accelerators
    from meshctl.cli.policy_cmd import read_policies
    from meshctl.cli.render import progress_bar
    from meshctl.files import load_path
    from meshctl.policyfiles import read_mesh
    from meshctl.problems import InvalidFileError
    from meshctl.simrun import run

    mesh = read_mesh(spec.mesh)
    catalogs = context.catalog_map()
    # the accelerators of its nodes, as up checks them: ones the registry knows
    problems = mesh_accelerators(
        load_path(spec.mesh)[0], context.accelerators(), catalogs, launching=False
    )
    if problems:
        raise InvalidFileError(problems)
    policies = read_policies(context, policy_paths)[1] if policy_paths else None
    with progress_bar(f"simulating {label}", (spec.days or 30.0) * 86_400.0) as tick:
        return run(spec, mesh, catalogs, policies, label, tick)


def _charts_possible(out: Path | None, charts: bool) -> None:
    """Before a long run: charts asked for need matplotlib (the `sim` extra)."""
    import importlib.util

    if out is not None and charts and importlib.util.find_spec("matplotlib") is None:
        raise InvalidRequestError(
            "--charts: matplotlib is not installed (pip install 'meshctl[sim]'); "
            "or pass --no-charts"
        )


def _label(paths: list[Path]) -> str:
    return "+".join(p.stem if p.is_file() else p.name for p in paths) or "no policies"


@app.command("run")
def run_cmd(
    ctx: typer.Context,
    mesh: MeshFile = None,
    policy: Annotated[
        list[Path] | None,
        typer.Option("--policy", "-p", help="Policy files or folders (default: none)."),
    ] = None,
    trace: Trace = "philly",
    days: Days = 30.0,
    start_day: StartDay = 0.0,
    replicate: Replicate = 1,
    arrival_scale: ArrivalScale = 1.0,
    failures: Failures = "none",
    seed: Seed = 0,
    cycle: Cycle = "60",
    checkpoint_interval: CheckpointInterval = "auto",
    checkpoint_cost: CheckpointCost = "60",
    restart: Restart = "300",
    comm_fraction: Comm = 0.3,
    jobs_per_hour: JobsPerHour = 60.0,
    candidates: Candidates = 8,
    queue_depth: QueueDepth = 500,
    out: Out = None,
    charts: Charts = True,
    inference: Annotated[
        str,
        typer.Option(
            help="none, or diurnal: a service beside the training on the on-prem GPUs "
            "(diurnal traffic with surges; utilisation against a static split)."
        ),
    ] = "none",
    data: Annotated[
        str,
        typer.Option(
            help="none; cache: each job class reads a dataset through the nodes' caches "
            "(peer fetch, LRU); no-cache: every attempt reads it from central storage."
        ),
    ] = "none",
    data_gib_per_gpu: Annotated[
        float, typer.Option(help="A job class's dataset, GiB per GPU (10 to 2000).", min=0)
    ] = 50.0,
    cache_gib: Annotated[float, typer.Option(help="Each node's data cache, GiB.", min=0)] = 3000.0,
    data_home: Annotated[
        str,
        typer.Option(
            help="Where the datasets live: aws (S3), gcp (GCS) or onprem; a node elsewhere "
            "pays that home's egress."
        ),
    ] = "aws",
    output: OutputOption = Output.table,
) -> None:
    """Replay a trace on the mesh under the policies; print what it measured."""
    import dataclasses

    from meshctl.simrun import write

    if inference not in ("none", "diurnal"):
        raise InvalidRequestError(f"--inference: expected none or diurnal, got {inference!r}")
    if data not in ("none", "cache", "no-cache"):
        raise InvalidRequestError(f"--data: expected none, cache or no-cache, got {data!r}")
    if data_home not in ("aws", "gcp", "onprem"):
        raise InvalidRequestError(f"--data-home: expected aws, gcp or onprem, got {data_home!r}")
    context = app_context(ctx)
    _charts_possible(out, charts)
    paths = list(policy or [])
    spec = _spec(
        mesh or context.mesh_file(), paths, trace, days, start_day, replicate, arrival_scale,
        failures, seed, cycle, checkpoint_interval, checkpoint_cost, restart, comm_fraction,
        jobs_per_hour, candidates, queue_depth,
    )  # fmt: skip
    spec = dataclasses.replace(
        spec, inference=inference, data=data, data_gib_per_gpu=data_gib_per_gpu,
        cache_gib=cache_gib, data_home=data_home,
    )  # fmt: skip
    outcome = _simulate(context, spec, paths, _label(paths))
    if out is not None:
        write(outcome, out, charts)
    _emit([outcome], output, out)


@app.command("compare")
def compare_cmd(
    ctx: typer.Context,
    policy: Annotated[
        list[str],
        typer.Option(
            "--policy",
            "-p",
            help="One policy set per flag: [NAME=]files or folders joined by commas, or none.",
        ),
    ],
    mesh: MeshFile = None,
    trace: Trace = "philly",
    days: Days = 30.0,
    start_day: StartDay = 0.0,
    replicate: Replicate = 1,
    arrival_scale: ArrivalScale = 1.0,
    failures: Failures = "none",
    seed: Seed = 0,
    cycle: Cycle = "60",
    checkpoint_interval: CheckpointInterval = "auto",
    checkpoint_cost: CheckpointCost = "60",
    restart: Restart = "300",
    comm_fraction: Comm = 0.3,
    jobs_per_hour: JobsPerHour = 60.0,
    candidates: Candidates = 8,
    queue_depth: QueueDepth = 500,
    out: Out = None,
    charts: Charts = True,
    output: OutputOption = Output.table,
) -> None:
    """Run several policy sets on the same mesh, trace and seed; print them side by side."""
    from meshctl.simrun import write_compare

    context = app_context(ctx)
    _charts_possible(out, charts)
    named = [p.partition("=") if "=" in p else ("", "", p) for p in policy]
    sets = [[] if p == "none" else [Path(x) for x in p.split(",") if x] for _, _, p in named]
    if len(sets) < 2:
        raise InvalidRequestError("--policy: give at least two policy sets to compare")
    for paths in sets:
        for path in paths:
            if not path.exists():
                raise InvalidRequestError(f"--policy: {path} does not exist")
    labels = [name or auto for (name, _, _), auto in zip(named, _labels(sets), strict=True)]
    if len(set(labels)) < len(labels):
        raise InvalidRequestError(f"--policy: two policy sets are named alike: {labels}")
    outcomes = []
    for paths, label in zip(sets, labels, strict=True):
        spec = _spec(
            mesh or context.mesh_file(), paths, trace, days, start_day, replicate,
            arrival_scale, failures, seed, cycle, checkpoint_interval, checkpoint_cost,
            restart, comm_fraction, jobs_per_hour, candidates, queue_depth,
        )  # fmt: skip
        outcomes.append(_simulate(context, spec, paths, label))
    if out is not None:
        write_compare(outcomes, out, charts)
    _emit(outcomes, output, out)


def _labels(sets: list[list[Path]]) -> list[str]:
    labels = [_label(paths) for paths in sets]
    if len(set(labels)) < len(labels):  # the same stem twice: number them
        labels = [f"{i + 1}-{label}" for i, label in enumerate(labels)]
    return labels


# --- output ---------------------------------------------------------------------------------


def _h(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def _data_rows(d: dict[str, Any] | None) -> list[tuple[str, str]]:
    if d is None:
        return []
    return [
        ("data stall (GPU-h, share)", f"{d['stall_gpu_hours']:,.0f} h, {d['stall_share']:.2%}"),
        ("data read: central / peers", f"{d['central_gib']:,.0f} / {d['peer_gib']:,.0f} GiB"),
        ("data egress", f"{d['egress_gib']:,.0f} GiB, ${d['egress_usd']:,.0f}"),
        ("cache hit rate", f"{d['cache_hit_rate']:.1%}"),
    ]


def rows_of(report: dict[str, Any]) -> list[tuple[str, str]]:
    """(metric, value) pairs in the order the table shows them."""
    u, jobs, g = report["utilisation"], report["jobs"], report["gpu_hours"]
    rows = [
        ("jobs finished / arrived", f"{jobs['finished']:,} / {jobs['arrived']:,}"),
        (
            "jobs rejected, failed, unfinished",
            f"{jobs['rejected']:,}, {jobs['failed']:,}, {jobs['unfinished']:,}",
        ),
        ("jobs that ran on cloud", f"{jobs['ran_on_cloud']:,}"),
        ("on-prem utilisation", f"{u['onprem']:.1%} ({u['onprem_available']:.1%} of up)"),
        ("cloud GPU-hours", f"{u['cloud_gpu_hours']:,.0f}"),
    ]
    for name in ("critical", "standard", "best-effort", "all"):
        c = report["classes"][name]
        q, j = c["queueing_delay"], c["jct"]
        if not q["n"]:
            continue
        rows.append(
            (
                f"wait {name} (mean/p50/p99)",
                f"{_h(q['mean_s'])} / {_h(q['p50_s'])} / {_h(q['p99_s'])}",
            )
        )
        rows.append(
            (
                f"JCT {name} (mean/p50/p99)",
                f"{_h(j['mean_s'])} / {_h(j['p50_s'])} / {_h(j['p99_s'])}",
            )
        )
    f = report["failures"]
    rows += [
        ("cloud spend", f"${report['cloud_spend_usd']['total']:,.0f}"),
        ("preemptions", f"{report['preemptions']:,}"),
        ("backfill starts", f"{report['backfill_starts']:,}"),
        ("node failures / spot reclaims", f"{f['node_failures']:,} / {f['spot_reclaims']:,}"),
        ("jobs interrupted", f"{f['jobs_interrupted']:,}"),
        ("GPU-hours lost to failures", f"{g['lost_to_failures']:,.0f}"),
        ("goodput (useful / held)", f"{report['goodput']:.1%}"),
        *_data_rows(report.get("data")),
        ("ETTR (mean per job)", f"{report['ettr']:.1%}"),
    ]
    served = report.get("inference")
    if served:
        p50, p99 = served["surge_to_serving_p50_s"], served["surge_to_serving_p99_s"]
        rows += [
            (
                "inference: utilisation shared / static split",
                f"{served['utilisation_shared']:.1%} / {served['utilisation_static']:.1%} "
                f"(+{served['gain_pp']:g} points)",
            ),
            (
                "inference: surge to serving (p50/p99)",
                "-" if p50 is None else f"{_h(p50)} / {_h(p99)}",
            ),
            (
                "inference: GPU-hours lent / training lost",
                f"{served['gpu_hours_lent']:,.0f} / {served['training_gpu_hours_lost']:,.0f}",
            ),
        ]
    return rows


def _emit(outcomes: list[Outcome], output: Output, out: Path | None) -> None:
    from meshctl.cli import render
    from meshctl.simrun import compared

    if output is not Output.table:
        data = outcomes[0].report if len(outcomes) == 1 else compared(outcomes)
        render.emit_data(data, output)
        return
    table = [r for r, _ in rows_of(outcomes[0].report)]
    values = [dict(rows_of(o.report)) for o in outcomes]
    rows = [{"metric": m, **{f"c{i}": v[m] for i, v in enumerate(values)}} for m in table]
    columns = [Column("metric", "metric")] + [
        Column(f"c{i}", o.name, "right") for i, o in enumerate(outcomes)
    ]
    meta = outcomes[0].report["meta"]
    caption = (
        f"trace {meta['trace']}, {meta['days']:g} days x{meta['replicate']}, "
        f"failures {meta['failures']}, seed {meta['seed']}"
    )
    render.emit(rows, columns, output, title="simulation", caption=caption)
    if out is not None:
        render.say(f"wrote {out}")
