"""What ``meshctl sim`` shows: a run's figures as rows (``rows_of``), and a sweep's table,
one row per figure and a column per policy set with ``mean ± half-width`` (``emit_sweep``).
Rendering only: the figures and their statistics come from ``meshctl.sim.run.sweep``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from meshctl.cli.render import Column, Output

if TYPE_CHECKING:
    from meshctl.sim.run import Outcome
    from meshctl.sim.run.sweep import Estimate, Sweep


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


def _rejected_rows(by_reason: dict[str, int]) -> list[tuple[str, str]]:
    """A row per reason jobs were rejected for, the most common first."""
    ordered = sorted(by_reason.items(), key=lambda rn: (-rn[1], rn[0]))
    return [(f"  rejected: {reason}", f"{n:,}") for reason, n in ordered]


def _utilisation(report: dict[str, Any]) -> str:
    """On-prem utilisation; at zero with no job run on-prem, why: none could fit there, or
    none ran there."""
    u, jobs = report["utilisation"], report["jobs"]
    shown = f"{u['onprem']:.1%} ({u['onprem_available']:.1%} of up)"
    if u["onprem"] > 0 or jobs.get("ran_onprem", 1) > 0:
        return shown
    fit = report.get("fit", {})
    misfits = sum(m["jobs"] for m in (*fit.get("never", ()), *fit.get("cloud_only", ())))
    if jobs["arrived"] and misfits == jobs["arrived"]:
        return f"{u['onprem']:.1%}: no job fits an on-prem node"
    return f"{u['onprem']:.1%}: no job ran on-prem"


def rows_of(report: dict[str, Any]) -> list[tuple[str, str]]:
    """(metric, value) pairs in the order the table shows them."""
    u, jobs, g = report["utilisation"], report["jobs"], report["gpu_hours"]
    rows = [
        ("jobs finished / arrived", f"{jobs['finished']:,} / {jobs['arrived']:,}"),
        (
            "jobs rejected, failed, unfinished",
            f"{jobs['rejected']:,}, {jobs['failed']:,}, {jobs['unfinished']:,}",
        ),
        *_rejected_rows(jobs.get("rejected_by_reason", {})),
        ("jobs that ran on cloud", f"{jobs['ran_on_cloud']:,}"),
        ("on-prem utilisation", _utilisation(report)),
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


def emit_run(outcome: Outcome, output: Output, out: Path | None) -> None:
    """``sim run``: the report's rows as a table, or the report (``-o json``)."""
    from meshctl.cli import render

    if output is not Output.table:
        render.emit_data(outcome.report, output)
        return
    rows = [{"metric": m, "value": v} for m, v in rows_of(outcome.report)]
    columns = [Column("metric", "metric"), Column("value", outcome.name, "right")]
    render.emit(rows, columns, output, title="simulation", caption=_caption(outcome.report))
    if out is not None:
        render.say(f"wrote {out}")


def _caption(report: dict[str, Any]) -> str:
    meta = report["meta"]
    return (
        f"trace {meta['trace']}, {meta['days']:g} days x{meta['replicate']}, "
        f"failures {meta['failures']}, seed {meta['seed']}"
    )


def shown(e: Estimate, unit: str) -> str:
    """``mean ± half-width`` in the figure's unit; the mean alone for one run."""
    if unit == "share":
        mean = f"{e.mean:.1%}"
        spread = None if e.half_width is None else f"{e.half_width * 100:.1f} pts"
    elif unit == "s":
        mean, spread = _h(e.mean), None if e.half_width is None else _h(e.half_width)
    elif unit == "usd":
        mean = f"${e.mean:,.0f}"
        spread = None if e.half_width is None else f"${e.half_width:,.0f}"
    else:
        whole = e.n == 1 or float(e.mean).is_integer()
        mean = f"{e.mean:,.0f}" if whole and unit == "count" else f"{e.mean:,.1f}"
        spread = None if e.half_width is None else f"{e.half_width:,.1f}".removesuffix(".0")
        if unit == "hours":
            mean, spread = f"{mean} h", None if spread is None else f"{spread} h"
    return mean if spread is None else f"{mean} ± {spread}"


def emit_sweep(sweep: Sweep, output: Output, out: Path | None) -> None:
    """A sweep's table (a row per figure, a column per group) or its document (``-o json``)."""
    from meshctl.cli import render
    from meshctl.sim.run.sweep import document, groups, summary

    if output is not Output.table:
        render.emit_data(document(sweep), output)
        return
    names = groups(sweep)
    rows = [
        {"figure": f.label, **{f"c{i}": shown(by[g], f.unit) if g in by else None
                               for i, g in enumerate(names)}}
        for f, by in summary(sweep)
    ]  # fmt: skip
    columns = [Column("figure", "figure")] + [
        Column(f"c{i}", g, "right") for i, g in enumerate(names)
    ]
    render.emit(rows, columns, output, title="simulation sweep", caption=_sweep_caption(sweep))
    if out is not None:
        render.say(f"wrote {out}")


def _sweep_caption(sweep: Sweep) -> str:
    s = sweep.setting
    seeds = sweep.seeds
    seed_text = f"seed {seeds[0]}" if len(seeds) == 1 else f"{len(seeds)} seeds"
    retried = sum(1 for r in sweep.finished if (r.attempts or 1) > 1)
    parts = [
        f"{', '.join(sweep.traces)}, {s.get('days', 0):g} days x{s.get('replicate', 1)}",
        f"failures {s.get('failures', 'none')}, {seed_text}",
        f"{len(sweep.finished)} of {sweep.runs} runs finished"
        + (f" ({retried} retried)" if retried else ""),
        "mean ± 95% interval (Student t)" if len(seeds) > 1 else "one run each",
    ]
    if s.get("cluster"):
        parts.append(f"on {s['cluster']}")
    return "; ".join(parts)
