"""What a simulation run measured, as plain data for the JSON report, the table and the charts.

Definitions (docs/SIMULATOR.md says the same):
- utilisation: GPU-seconds held by jobs on on-prem nodes over installed on-prem GPU-seconds,
  over the trace's window (the whole run when no window is set: the drain after the last
  arrival would dilute it); ``available`` leaves out the time nodes were down.
- queueing delay: first start minus arrival; job completion time (JCT): end minus arrival.
  Both by criticality class and for all jobs that finished: mean, p50, p99 (linear
  interpolation between closest ranks).
- goodput: useful GPU-seconds (each job's work at full speed, counted once) over all
  GPU-seconds jobs held; the rest went to checkpoints, restarts, network slowdown and work
  lost to failures. ETTR (effective training time ratio): for jobs that finished, work time
  over the time from first start to end (Meta's definition for a training run, per job,
  then the mean).
- conservation: held = useful + slowdown + checkpoints + restarts + data stall + lost, per
  job and in all (data stall: with a data model, GPUs held while their nodes fetched data).
Numbers are rounded to fixed digits so that the same seed gives byte-identical reports.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from meshctl.sim.core.data import DataStats
from meshctl.sim.core.engine import JobResult, Result

CLASSES = ("critical", "standard", "best-effort")


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0..100) of sorted ``values``, linear between closest ranks."""
    if not values:
        return 0.0
    k = (len(values) - 1) * q / 100.0
    lo = int(k)
    hi = min(lo + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def _stats(values: Iterable[float]) -> dict[str, float]:
    ordered = sorted(values)
    if not ordered:
        return {"n": 0, "mean_s": 0.0, "p50_s": 0.0, "p99_s": 0.0}
    return {
        "n": len(ordered),
        "mean_s": _r(sum(ordered) / len(ordered)),
        "p50_s": _r(percentile(ordered, 50)),
        "p99_s": _r(percentile(ordered, 99)),
    }


def _r(value: float, digits: int = 3) -> float:
    return round(value, digits) + 0.0  # + 0.0: never "-0.0"


def build_report(result: Result, meta: Mapping[str, Any]) -> dict[str, Any]:
    jobs = sorted(result.jobs, key=lambda r: r.job.id)
    finished = [j for j in jobs if j.end_s is not None]
    t = result.totals
    by_class: dict[str, list[JobResult]] = defaultdict(list)
    for job in finished:
        by_class[job.job.criticality].append(job)
    classes = {}
    for name in (*CLASSES, "all"):
        members = finished if name == "all" else by_class.get(name, [])
        classes[name] = {
            "queueing_delay": _stats((j.first_start_s or 0.0) - j.job.arrival_s for j in members),
            "jct": _stats((j.end_s or 0.0) - j.job.arrival_s for j in members),
        }
    held = sum(j.held_gpu_s for j in jobs)
    useful = sum(j.useful_gpu_s for j in jobs)
    ettr = [
        j.job.duration_s / ((j.end_s or 0.0) - (j.first_start_s or 0.0))
        for j in finished
        if (j.end_s or 0.0) > (j.first_start_s or 0.0)
    ]
    spend = {pool: _r(usd, 2) for pool, usd in sorted(t.spend_usd.items())}
    available = t.onprem_gpu_s - t.onprem_down_gpu_s
    clouds = set(meta.get("cloud_pools", ()))
    on_cloud = [j for j in finished if j.pools & clouds]
    return {
        "meta": dict(meta),
        "jobs": {
            "arrived": len(jobs),
            "finished": len(finished),
            "rejected": sum(1 for j in jobs if j.rejected),
            "failed": sum(1 for j in jobs if j.failed_reason),
            "unfinished": sum(
                1 for j in jobs if j.end_s is None and not j.rejected and not j.failed_reason
            ),
            "ran_on_cloud": len(on_cloud),
            "ran_onprem": sum(1 for j in finished if j.pools - clouds),
            "rejected_by_reason": rejected_by_reason(jobs),
        },
        "end_s": _r(result.end_s),
        "utilisation": {
            "onprem": _r(t.onprem_busy_gpu_s / t.onprem_gpu_s if t.onprem_gpu_s else 0.0, 4),
            "onprem_available": _r(t.onprem_busy_gpu_s / available if available > 0 else 0.0, 4),
            "onprem_gpus": result.onprem_gpus,
            "cloud_gpu_hours": _r(t.cloud_gpu_s / 3600.0, 1),
        },
        "classes": classes,
        "cloud_spend_usd": {"total": _r(sum(t.spend_usd.values()), 2), "by_pool": spend},
        "preemptions": t.preemptions,
        "backfill_starts": t.backfill_starts,
        "budget_crossings": t.budget_crossings,
        "failures": {
            "node_failures": t.node_failures,
            "spot_reclaims": t.spot_reclaims,
            "jobs_interrupted": sum(j.failed for j in jobs),
            "cloud_launches": t.launches,
        },
        "gpu_hours": {
            "held": _r(held / 3600.0, 1),
            "useful": _r(useful / 3600.0, 1),
            "lost_to_failures": _r(sum(j.lost_gpu_s for j in jobs) / 3600.0, 1),
            "checkpoints": _r(sum(j.checkpoint_gpu_s for j in jobs) / 3600.0, 1),
            "restarts": _r(sum(j.restart_gpu_s for j in jobs) / 3600.0, 1),
            "network_slowdown": _r(sum(j.slowdown_gpu_s for j in jobs) / 3600.0, 1),
        },
        "goodput": _r(useful / held if held else 0.0, 4),
        "ettr": _r(sum(ettr) / len(ettr) if ettr else 0.0, 4),
        "engine": {"events": t.events, "cycles": t.cycles},
        **({"data": data_figures(result.data, held)} if result.data is not None else {}),
    }


def rejected_by_reason(jobs: Iterable[JobResult]) -> dict[str, int]:
    """How many jobs were rejected for each reason (the scheduler's), the most common first."""
    counts = Counter(j.rejected for j in jobs if j.rejected)
    return dict(sorted(counts.items(), key=lambda rn: (-rn[1], rn[0])))


def data_figures(d: DataStats, held_gpu_s: float) -> dict[str, Any]:
    """What the data model measured: GPU time stalled for data (and its share of all GPU
    time held), what was read from central storage and from peers, egress, cache hits."""
    return {
        "stall_gpu_hours": _r(d.stall_gpu_s / 3600.0, 1),
        "stall_share": _r(d.stall_gpu_s / held_gpu_s if held_gpu_s else 0.0, 4),
        "central_gib": _r(d.central_gib, 1),
        "peer_gib": _r(d.peer_gib, 1),
        "egress_gib": _r(d.egress_gib, 1),
        "egress_usd": _r(d.egress_usd, 2),
        "cache_hit_rate": _r(d.hit_rate, 4),
        "lookups": d.lookups,
    }


def series(result: Result) -> dict[str, list[float]]:
    """The samples as columns, for the charts."""
    s = result.samples
    return {
        "t_s": [x.t_s for x in s],
        "utilisation": [
            x.onprem_busy_gpus / x.onprem_up_gpus if x.onprem_up_gpus else 0.0 for x in s
        ],
        "queued": [float(x.queued) for x in s],
        "running": [float(x.running) for x in s],
        "cloud_gpus": [float(x.cloud_gpus) for x in s],
        "spend_usd": [x.spend_usd for x in s],
    }


def jct_by_class(result: Result) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {name: [] for name in CLASSES}
    for job in result.jobs:
        if job.end_s is not None:
            out.setdefault(job.job.criticality, []).append(job.end_s - job.job.arrival_s)
    return {name: sorted(values) for name, values in out.items()}
