"""``meshctl sim run|compare|sweep``: the production core over a trace, offline.

All read a mesh file, policy files and a trace, run the simulator (``meshctl.sim.run``) with
a progress bar on stderr, and print a table (``meshctl.cli.sim.view``; the JSON with ``-o
json``). ``run`` runs once and ``--out`` writes ``report.json`` and PNG charts. ``sweep`` runs
every policy set x trace x seed as Ray tasks (``simrun.rayrun``) on the embedded mesh or
``--ray ADDRESS`` and shows each figure's mean and 95 % interval (``simrun.sweep``);
``compare`` is a sweep of one seed, run here one after another (no Ray: a few runs, and each
keeps its time series for its charts). ``--out``: ``sweep.json`` and a chart per figure, and
for ``compare`` a folder per policy set with its report and charts (``simrun.write``,
``simrun.write_sweep``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from meshctl.cli.context import app_context
from meshctl.cli.options import OutputOption, duration_flag
from meshctl.cli.render import Output
from meshctl.cli.sim.options import (
    ArrivalScale,
    Candidates,
    Charts,
    CheckpointCost,
    CheckpointInterval,
    Comm,
    CpusPerGpu,
    Cycle,
    Days,
    Failures,
    JobsPerHour,
    MemoryPerGpu,
    MeshFile,
    Out,
    PolicySets,
    QueueDepth,
    Replicate,
    Restart,
    Seed,
    StartDay,
    Trace,
)
from meshctl.errors import InvalidRequestError

if TYPE_CHECKING:
    from meshctl.app.context import AppContext
    from meshctl.sim.run import Outcome, RunSpec

app = typer.Typer(
    help="Simulate the mesh: the production scheduler over real traces.",
    no_args_is_help=True,
)


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
    from meshctl.sim.run import FAILURE_PRESETS, RunSpec

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


def _simulate(
    context: AppContext, spec: RunSpec, policy_paths: list[Path], label: str, warn: bool = True
) -> Outcome:
    """One run with its progress on stderr; first, what the mesh can never hold (``warn``:
    said; the same for every policy set of a comparison, so said once)."""
    from meshctl.catalog.check import mesh_accelerators
    from meshctl.cli.policy_cmd import read_policies
    from meshctl.cli.render import progress_status, warnings
    from meshctl.files import load_path
    from meshctl.files.policies import read_mesh
    from meshctl.problems import InvalidFileError
    from meshctl.sim.core import fits
    from meshctl.sim.run import prepare, run

    mesh = read_mesh(spec.mesh)
    catalogs = context.catalog_map()
    # the accelerators of its nodes, as up checks them: ones the registry knows
    problems = mesh_accelerators(
        load_path(spec.mesh)[0], context.accelerators(), catalogs, launching=False
    )
    if problems:
        raise InvalidFileError(problems)
    policies = read_policies(context, policy_paths)[1] if policy_paths else None
    ready = prepare(spec, mesh, catalogs)  # none of its jobs could ever run: exit 2 here
    if warn:
        warnings(fits.warning_lines(ready.fit))
    end_s = ready.config.until_s or (spec.days or 30.0) * 86_400.0
    jobs = len(ready.jobs)
    with progress_status(f"simulating {label}", end_s) as status:

        def tick(t_s: float, ended: int) -> None:
            status(t_s, f"day {t_s / 86_400:.2f} of {end_s / 86_400:.2f}, "
                        f"{ended:,} of {jobs:,} jobs ended")  # fmt: skip

        outcome = run(spec, mesh, catalogs, policies, label, tick, ready)
        tick(outcome.result.end_s, len(ready.jobs) - outcome.report["jobs"]["unfinished"])
    return outcome


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
    cpus_per_gpu: CpusPerGpu = 4.0,
    memory_gib_per_gpu: MemoryPerGpu = 32.0,
    output: OutputOption = Output.table,
) -> None:
    """Replay a trace on the mesh under the policies; print what it measured.

    Replays a trace (Philly, ITP, openb, synthetic, or a CSV file) on the mesh
    with the production scheduler and policies: utilisation, waiting and
    completion times by class, cloud spend, preemptions, failures, goodput.
    --out writes report.json and PNG charts (docs/SIMULATOR.md). The run ends
    at the window's end (--start-day, --days): what still waits or runs then is
    unfinished. Before it starts, the trace's job shapes are checked against
    the mesh's nodes (with --cpus-per-gpu and --memory-gib-per-gpu).

    Examples:
      meshctl sim run --mesh examples/sim/mesh.yaml --trace philly --days 1
      meshctl sim run --trace synthetic --days 0.1 --failures stepfun --seed 1
      meshctl sim run --mesh examples/sim/mesh.yaml -p policies/ --out sim-out
    """
    import dataclasses

    from meshctl.sim.run import write

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
        cache_gib=cache_gib, data_home=data_home, cpus_per_gpu=cpus_per_gpu,
        memory_gib_per_gpu=memory_gib_per_gpu,
    )  # fmt: skip
    outcome = _simulate(context, spec, paths, _label(paths))
    if out is not None:
        write(outcome, out, charts)
    from meshctl.cli.sim.view import emit_run

    emit_run(outcome, output, out)


@app.command("compare")
def compare_cmd(
    ctx: typer.Context,
    policy: PolicySets,
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
    cpus_per_gpu: CpusPerGpu = 4.0,
    memory_gib_per_gpu: MemoryPerGpu = 32.0,
    output: OutputOption = Output.table,
) -> None:
    """Run several policy sets on one mesh, trace and seed, side by side.

    A sweep of one seed, run here (no Ray); each --policy is one set:
    NAME=files or folders joined by commas. The 10,000-GPU example (make sim)
    is in examples/sim/README.md.

    Examples:
      meshctl sim compare --policy shipped=policies/ --policy none --days 1
      meshctl sim compare -p a=a.yaml -p b=b.yaml --trace synthetic --days 0.5
    """
    import dataclasses

    from meshctl.cli.sim.view import emit_sweep
    from meshctl.sim.run import write, write_sweep
    from meshctl.sim.run.sweep import Finished, RunKey, Sweep

    context = app_context(ctx)
    _charts_possible(out, charts)
    sets = _policy_sets(policy, least=2)
    mesh_file = mesh or context.mesh_file()
    outcomes: list[Outcome] = []
    for label, paths in sets.items():
        spec = _spec(
            mesh_file, paths, trace, days, start_day, replicate, arrival_scale, failures,
            seed, cycle, checkpoint_interval, checkpoint_cost, restart, comm_fraction,
            jobs_per_hour, candidates, queue_depth,
        )  # fmt: skip
        spec = dataclasses.replace(
            spec, cpus_per_gpu=cpus_per_gpu, memory_gib_per_gpu=memory_gib_per_gpu
        )
        outcomes.append(_simulate(context, spec, paths, label, warn=not outcomes))
    finished = tuple(Finished(RunKey(o.name, trace, seed), o.report) for o in outcomes)
    setting = _setting(outcomes[0].spec, "this machine, in process (no Ray)", None)
    sweep = Sweep(tuple(sets), (trace,), (seed,), finished, (), setting)
    if out is not None:
        for outcome in outcomes:  # one seed: each run's own report and time-series charts
            write(outcome, out / outcome.name, charts)
        write_sweep(sweep, out, charts)
    emit_sweep(sweep, output, out)


@app.command("sweep")
def sweep_cmd(
    ctx: typer.Context,
    policy: PolicySets,
    seeds: Annotated[
        str, typer.Option(help="Seeds: a range 0..31 (both ends) or a comma list 1,2,5.")
    ] = "0..9",
    mesh: MeshFile = None,
    trace: Annotated[
        list[str] | None,
        typer.Option(
            help="A trace per flag (default philly): philly, itp, itp:clusterNN, openb, "
            "openb:NAME, synthetic, or a trace CSV file."
        ),
    ] = None,
    days: Days = 30.0,
    start_day: StartDay = 0.0,
    replicate: Replicate = 1,
    arrival_scale: ArrivalScale = 1.0,
    failures: Failures = "none",
    cycle: Cycle = "60",
    checkpoint_interval: CheckpointInterval = "auto",
    checkpoint_cost: CheckpointCost = "60",
    restart: Restart = "300",
    comm_fraction: Comm = 0.3,
    jobs_per_hour: JobsPerHour = 60.0,
    candidates: Candidates = 8,
    queue_depth: QueueDepth = 500,
    ray_address: Annotated[
        str | None,
        typer.Option(
            "--ray",
            help="Run on this Ray cluster (host:port or ray://host:10001); default: the "
            "embedded mesh that meshctl up started.",
        ),
    ] = None,
    retries: Annotated[
        int, typer.Option(help="Times a run whose worker died is tried again.", min=0, max=100)
    ] = 3,
    out: Annotated[
        Path | None, typer.Option("--out", help="Write sweep.json and charts here.")
    ] = None,
    charts: Charts = True,
    cpus_per_gpu: CpusPerGpu = 4.0,
    memory_gib_per_gpu: MemoryPerGpu = 32.0,
    output: OutputOption = Output.table,
) -> None:
    """Run policy sets x traces x seeds as Ray tasks; print means and CIs.

    Every run is a Ray task, on the embedded mesh that up started or on --ray;
    prints each figure's mean and 95% interval per policy set. A run whose
    worker died is tried again (--retries).

    Exit codes:
      0  every run finished
      1  a run did not finish (the rest is still shown)

    Examples:
      meshctl sim sweep --policy a=policies/ --policy none --seeds 0..9 --days 1
      meshctl sim sweep -p policies/ --trace philly --trace itp --seeds 1,2,5
    """
    import dataclasses
    import os

    from meshctl.cli.sim import sweep as simsweep
    from meshctl.cli.sim.view import emit_sweep
    from meshctl.sim.run import write_sweep
    from meshctl.sim.run.rayrun import HOLD_ENV, Task
    from meshctl.sim.run.sweep import RunKey, Sweep, parse_seeds

    context = app_context(ctx)
    _charts_possible(out, charts)
    try:
        seed_list = parse_seeds(seeds)
    except ValueError as err:
        raise InvalidRequestError(f"--seeds: {err}") from None
    sets = _policy_sets(policy, least=1)
    traces = list(dict.fromkeys(trace or ["philly"]))
    mesh_file = mesh or context.mesh_file()
    tasks: list[Task] = []
    for label, paths in sets.items():
        for name in traces:
            for seed in seed_list:
                spec = _spec(
                    mesh_file, paths, name, days, start_day, replicate, arrival_scale,
                    failures, seed, cycle, checkpoint_interval, checkpoint_cost, restart,
                    comm_fraction, jobs_per_hour, candidates, queue_depth,
                )  # fmt: skip
                spec = dataclasses.replace(
                    spec, cpus_per_gpu=cpus_per_gpu, memory_gib_per_gpu=memory_gib_per_gpu
                )
                key = RunKey(label, name, seed)
                tasks.append(Task(key, spec, len(tasks), os.environ.get(HOLD_ENV) or None))
    shared = simsweep.inputs(context, mesh_file, sets)  # bad files: exit 2 before any run
    simsweep.fits(shared, tasks)  # a window none of whose jobs fits: exit 2, likewise
    where = simsweep.cluster(context, ray_address)
    finished, unfinished = simsweep.gather(where, tasks, shared, retries)
    setting = _setting(tasks[0].spec, where.name, retries)
    sweep = Sweep(tuple(sets), tuple(traces), tuple(seed_list), tuple(finished),
                  tuple(unfinished), setting)  # fmt: skip
    if out is not None:
        write_sweep(sweep, out, charts)
    emit_sweep(sweep, output, out)
    simsweep.unfinished(sweep)


def _policy_sets(policy: list[str], least: int) -> dict[str, list[Path]]:
    """``--policy [NAME=]a,b`` flags: each set's name (given, or from its files) and paths."""
    named = [p.partition("=") if "=" in p else ("", "", p) for p in policy]
    sets = [[] if p == "none" else [Path(x) for x in p.split(",") if x] for _, _, p in named]
    if len(sets) < least:
        raise InvalidRequestError(
            "--policy: give at least two policy sets to compare" if least > 1
            else "--policy: give at least one policy set"
        )  # fmt: skip
    for paths in sets:
        for path in paths:
            if not path.exists():
                raise InvalidRequestError(f"--policy: {path} does not exist")
    labels = [name or auto for (name, _, _), auto in zip(named, _labels(sets), strict=True)]
    if len(set(labels)) < len(labels):
        raise InvalidRequestError(f"--policy: two policy sets are named alike: {labels}")
    return dict(zip(labels, sets, strict=True))


def _labels(sets: list[list[Path]]) -> list[str]:
    labels = [_label(paths) for paths in sets]
    if len(set(labels)) < len(labels):  # the same stem twice: number them
        labels = [f"{i + 1}-{label}" for i, label in enumerate(labels)]
    return labels


def _setting(spec: RunSpec, cluster: str, retries: int | None) -> dict[str, Any]:
    """What every run of a sweep shares, for its document and caption."""
    return {
        "mesh": str(spec.mesh), "days": spec.days, "start_day": spec.start_day,
        "replicate": spec.replicate, "arrival_scale": spec.arrival_scale,
        "failures": spec.failures, "cycle_s": spec.cycle_s, "cluster": cluster,
        "retries": retries,
    }  # fmt: skip
