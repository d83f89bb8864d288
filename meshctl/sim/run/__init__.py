"""The simulator's shell: files and traces in, the pure engine run, report and charts out.

    spec = RunSpec(mesh=Path("mesh.yaml"), policies=[Path("policies")], trace="philly")
    ready = prepare(spec, mesh, catalogs)        # the workload checked against the mesh
    outcome = run(spec, mesh, catalogs, policies, name, progress, ready)  # simulates
    write(outcome, Path("out"))                  # report.json, charts/*.png
    write_sweep(sweep, Path("sweep"))            # sweep.json, charts/<figure>.png (sweep.py)

A sweep's runs are many of these: on Ray (``rayrun``), their statistics pure (``sweep``).

Cloud pools behave as ``PROVIDERS`` says (provisioning delay, spot notice and mean spot
life); their shapes and prices come from the provider catalogs, less the pool's discount.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from meshctl.errors import InvalidRequestError
from meshctl.lifecycle.clusters import head_of
from meshctl.lifecycle.configured import snapshot_from_mesh
from meshctl.lifecycle.replacing import replaceable_pool
from meshctl.lifecycle.snapshot import egress_prices, pool_egress
from meshctl.model.catalog import Catalog
from meshctl.model.mesh import AwsPool, GcpPool, LocalPool, Mesh, RayPool
from meshctl.policy.compiled import PolicySet
from meshctl.policy.facts import mesh_snapshot
from meshctl.problems import InvalidFileError, Problem
from meshctl.scheduler import SchedulerConfig
from meshctl.sim.core import fits, inference
from meshctl.sim.core import workload as wl
from meshctl.sim.core.data import DataModel
from meshctl.sim.core.engine import CloudPool, Progress, Result, SimConfig, SimMesh, simulate
from meshctl.sim.core.failures import LLAMA3, Checkpoints, FailureModel
from meshctl.sim.core.network import Network
from meshctl.sim.core.report import build_report
from meshctl.sim.run.sweep import Sweep

FAILURE_PRESETS = ("none", "stepfun", "llama3")


@dataclass(frozen=True, slots=True)
class ProviderBehaviour:
    provision_s: float  # launch request -> node joined the pool
    notice_s: float  # spot/preemptible warning
    spot_lifetime_s: float  # mean life of a spot node before the provider takes it back


# Provisioning: a GPU instance booting a deep-learning image and joining Ray takes minutes on
# both clouds; 3 minutes is taken for both. Notices are the providers' own (EC2 spot: 2
# minutes; Compute Engine spot: 30 s). Mean spot life: 24 h, an assumption (providers publish
# only interruption-frequency bands, e.g. AWS's "<5%" to ">20%" per month).
PROVIDERS: Mapping[str, ProviderBehaviour] = {
    "aws": ProviderBehaviour(180.0, 120.0, 24 * 3600.0),
    "gcp": ProviderBehaviour(180.0, 30.0, 24 * 3600.0),
}


@dataclass(frozen=True)
class RunSpec:
    mesh: Path
    trace: str  # a trace name or CSV path (meshctl.sim.run.traces), or "synthetic"
    policies: Sequence[Path] = ()
    days: float | None = 30.0
    start_day: float = 0.0
    replicate: int = 1
    arrival_scale: float = 1.0
    failures: str = "none"
    seed: int = 0
    cycle_s: float = 60.0
    checkpoint_interval_s: float | None = None  # None: Young/Daly
    checkpoint_cost_s: float = 60.0
    restart_s: float = 300.0
    comm_fraction: float = 0.3
    synthetic_jobs_per_hour: float = 60.0
    candidates: int = 8  # feasible nodes scored per pool for a single-node job (controller: 32)
    queue_depth: int | None = 500  # pending jobs decided per cycle (controller: all)
    inference: str = "none"  # "diurnal": a service beside the training (sim.inference)
    data: str = "none"  # "cache": datasets through the nodes' caches; "no-cache": from central
    data_gib_per_gpu: float = 50.0  # a job class's dataset, per GPU (sim.workload.with_data)
    cache_gib: float = 3000.0  # each node's cache
    data_home: str = "aws"  # where the datasets live: aws (S3), gcp (GCS) or onprem
    cpus_per_gpu: float = 4.0  # what a trace job asks per GPU (a trace gives GPUs only)
    memory_gib_per_gpu: float = 32.0


def egress_usd_per_gib(mesh: Mesh, catalogs: Mapping[str, Catalog], home: str) -> dict[str, float]:
    """What a node of each pool pays a GiB of data that lives at ``home`` (aws, gcp, onprem):
    the egress price of that home, as the scheduler's cost scorer prices it (the catalogs'
    internet egress, or the on-prem pools' ``cost.egress_usd_per_gib``; from a pool's own home:
    nothing; ``lifecycle.snapshot.egress_prices`` and ``pool_egress``)."""
    prices = egress_prices(mesh.spec.pools, catalogs)
    return {p.name: pool_egress(p, prices).get(home, 0.0) for p in mesh.spec.pools}


@dataclass
class Outcome:
    spec: RunSpec
    name: str  # the policy set's name in reports: the policy paths, or "no policies"
    result: Result
    report: dict[str, Any]


def sim_mesh(mesh: Mesh, catalogs: Mapping[str, Catalog], comm_fraction: float) -> SimMesh:
    base = snapshot_from_mesh(mesh, catalogs, None, (), 0.0)
    networks, clouds = {}, {}
    for pool in mesh.spec.pools:
        if isinstance(pool, LocalPool | RayPool) and pool.network is not None:
            networks[pool.name] = Network(
                pool.network.topology, pool.network.oversubscription, comm_fraction
            )
        if isinstance(pool, AwsPool | GcpPool):
            how = PROVIDERS[pool.provider]
            clouds[pool.name] = CloudPool(
                pool.name,
                provision_s=how.provision_s,
                spot_lifetime_s=how.spot_lifetime_s,
                notice_s=how.notice_s,
                idle_s=pool.idle_minutes * 60.0,
                labels=dict(pool.labels),
                head=head_of(pool, catalogs),
            )
    replacing = frozenset(p.name for p in mesh.spec.pools if replaceable_pool(p))
    return SimMesh(
        base.nodes,
        base.pools,
        base.offers,
        clouds,
        networks,
        mesh_snapshot(mesh, catalogs),
        replacing,
        mesh.grow_graces(),
    )


def failure_model(preset: str) -> FailureModel | None:
    if preset == "none":
        return None
    if preset == "llama3":
        return LLAMA3
    if preset == "stepfun":
        from meshctl.sim.run.traces import stepfun_failures

        return stepfun_failures()
    raise InvalidFileError(
        [
            Problem(
                "--failures",
                None,
                "",
                f"expected one of {', '.join(FAILURE_PRESETS)}, got {preset!r}",
            )
        ]
    )


def jobs_of(spec: RunSpec, gpus_per_node: int) -> list[wl.SimJob]:
    if spec.trace == "synthetic":
        raw = wl.synthetic(
            wl.Synthetic(jobs_per_hour=spec.synthetic_jobs_per_hour), spec.days or 30.0, spec.seed
        )
    else:
        from meshctl.sim.run.traces import load

        raw = wl.window(load(spec.trace), spec.start_day * wl.DAY_S, spec.days)
    raw = wl.replicate(wl.scale_arrivals(raw, spec.arrival_scale), spec.replicate)
    jobs = wl.classify(raw, spec.seed, wl.ClassRules(gpus_per_node=gpus_per_node))
    if spec.data == "none":
        return jobs
    return wl.with_data(jobs, spec.data_gib_per_gpu, home=spec.data_home)


def config_of(spec: RunSpec) -> SimConfig:
    """The engine's settings for a run: what ``meshctl sim`` and the benchmark both use. A run
    of a window (``days``) ends at the window's end: what waits or runs then is unfinished."""
    window_s = None if spec.days is None else spec.days * wl.DAY_S / spec.arrival_scale
    return SimConfig(
        seed=spec.seed,
        cycle_s=spec.cycle_s,
        failures=failure_model(spec.failures),
        checkpoints=Checkpoints(spec.checkpoint_interval_s, spec.checkpoint_cost_s, spec.restart_s),
        scheduler=SchedulerConfig(
            max_candidates=spec.candidates, queue_depth=spec.queue_depth, explain=False
        ),
        cpus_per_gpu=spec.cpus_per_gpu,
        memory_gib_per_gpu=spec.memory_gib_per_gpu,
        window_s=window_s,
        until_s=window_s,
    )


@dataclass(frozen=True)
class Prepared:
    """A run ready to simulate: the mesh as the engine sees it, the workload, the engine's
    settings, and which of the workload's shapes could never run on the mesh (``fit``)."""

    mesh: SimMesh
    jobs: list[wl.SimJob]
    config: SimConfig
    fit: fits.Fit


def prepare(spec: RunSpec, mesh: Mesh, catalogs: Mapping[str, Catalog]) -> Prepared:
    """The run's inputs, with its workload's shapes checked against the mesh's nodes and node
    types (``fits.check``). None of its jobs could ever run: ``InvalidRequestError`` (exit
    2), one line that says why, instead of a run that rejects them all."""
    simmesh = sim_mesh(mesh, catalogs, spec.comm_fraction)
    most = max((n.gpus for n in simmesh.nodes), default=8) or 8
    jobs = jobs_of(spec, most)
    config = config_of(spec)
    fit = fits.check(simmesh, jobs, config)
    if fit.nothing_fits:
        raise InvalidRequestError(f"{spec.mesh}: {fits.why_nothing_fits(fit)}")
    if spec.data != "none":
        egress = egress_usd_per_gib(mesh, catalogs, spec.data_home)
        model = DataModel(cache_gib=spec.cache_gib, cache=spec.data == "cache",
                          egress_usd_per_gib=egress)  # fmt: skip
        config = dataclasses.replace(config, data=model)
    return Prepared(simmesh, jobs, config, fit)


def run(
    spec: RunSpec,
    mesh: Mesh,
    catalogs: Mapping[str, Catalog],
    policies: PolicySet | None,
    name: str,
    progress: Progress | None = None,
    prepared: Prepared | None = None,
) -> Outcome:
    """Simulate ``spec`` (``prepared``: as ``prepare`` made it, else made here);
    ``progress(t, ended)`` as ``Engine.run`` calls it."""
    ready = prepared or prepare(spec, mesh, catalogs)
    result = simulate(ready.mesh, ready.jobs, ready.config, policies, progress)
    clouds = tuple(p.name for p in ready.mesh.pools if p.cloud)
    meta = _meta(spec, mesh, name, clouds)
    if spec.data != "none":
        egress = egress_usd_per_gib(mesh, catalogs, spec.data_home)
        meta["data"] = {
            "model": spec.data,
            "gib_per_gpu": spec.data_gib_per_gpu,
            "cache_gib": spec.cache_gib,
            "home": spec.data_home,
            "egress_usd_per_gib": {pool: usd for pool, usd in egress.items() if usd},
            "assigned": "one dataset per team and job class (meshctl.sim.core.workload.with_data)",
        }
    report = build_report(result, meta)
    report["fit"] = fits.figures(ready.fit)
    if spec.inference == "diurnal":
        gpus = float(result.onprem_gpus)
        days = spec.days if spec.days is not None else max(1.0, result.end_s / wl.DAY_S)
        service, traffic = inference.diurnal(gpus, days, spec.seed)
        report["inference"] = inference.figures(service, traffic, gpus, days * wl.DAY_S)
    return Outcome(spec, name, result, report)


def _meta(spec: RunSpec, mesh: Mesh, name: str, clouds: tuple[str, ...]) -> dict[str, Any]:
    """What the run was: its inputs and settings, as its report's ``meta``."""
    return {
        "mesh": mesh.metadata.name,
        "policies": name,
        "trace": spec.trace,
        "days": spec.days,
        "start_day": spec.start_day,
        "replicate": spec.replicate,
        "arrival_scale": spec.arrival_scale,
        "failures": spec.failures,
        "seed": spec.seed,
        "cycle_s": spec.cycle_s,
        "checkpoint": {
            "interval_s": spec.checkpoint_interval_s or "young-daly",
            "cost_s": spec.checkpoint_cost_s,
            "restart_s": spec.restart_s,
        },
        "comm_fraction": spec.comm_fraction,
        "candidates": spec.candidates,
        "queue_depth": spec.queue_depth,
        "cloud_pools": list(clouds),
        "assigned": "kind, criticality, team: seeded rules (meshctl.sim.core.workload)",
        "per_gpu": {"cpus": spec.cpus_per_gpu, "memory_gib": spec.memory_gib_per_gpu},
    }


def write(outcome: Outcome, out: Path, charts: bool = True) -> list[Path]:
    """``report.json`` (sorted keys, fixed rounding: byte-identical for the same seed) and,
    with ``charts``, the PNG charts. Returns the paths written."""
    out.mkdir(parents=True, exist_ok=True)
    report = out / "report.json"
    report.write_text(json.dumps(outcome.report, indent=2, sort_keys=True) + "\n")
    written = [report]
    if charts:
        from meshctl.sim.run.charts import draw

        written += draw(outcome.result, out, outcome.name)
    return written


def write_sweep(sweep: Sweep, out: Path, charts: bool = True) -> list[Path]:
    """``sweep.json`` (``sweep.document``, sorted keys: the estimates, every run's report,
    the runs that did not finish) and, with ``charts``, a bar chart per figure: each group's
    mean with its 95 % interval (``charts.bars``). Returns the paths written."""
    from meshctl.sim.run.sweep import document, groups, summary

    out.mkdir(parents=True, exist_ok=True)
    path = out / "sweep.json"
    path.write_text(json.dumps(document(sweep), indent=2, sort_keys=True) + "\n")
    written = [path]
    if charts:
        from meshctl.sim.run.charts import bars

        written += bars(summary(sweep), groups(sweep), out)
    return written
