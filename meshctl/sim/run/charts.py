"""PNG charts of a simulation run (matplotlib, imported here only; the Agg backend, no display).

utilisation.png  on-prem GPU utilisation over time (of the GPUs up), and cloud GPUs
queue.png        jobs waiting and running over time
jct_cdf.png      job completion time CDF per criticality class (log scale)
spend.png        cumulative cloud spend

A sweep's charts (``bars``): charts/<figure>.png, each group's mean with its 95 % interval.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from meshctl.sim.core.engine import Result
from meshctl.sim.core.report import jct_by_class, series
from meshctl.sim.run.sweep import Estimate, Figure

DAY_S = 86_400.0


def draw(result: Result, out: Path, title: str) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder = out / "charts"
    folder.mkdir(parents=True, exist_ok=True)
    cols = series(result)
    days = [t / DAY_S for t in cols["t_s"]]
    written = []

    def save(fig: object, name: str) -> None:
        path = folder / name
        fig.savefig(path, dpi=110, metadata={"Software": None})  # type: ignore[attr-defined]
        plt.close(fig)  # type: ignore[arg-type]
        written.append(path)

    fig, ax = plt.subplots(figsize=(8, 3.5))
    ax.plot(days, [u * 100 for u in cols["utilisation"]], label="on-prem GPUs busy (% of up)")
    ax.set_ylim(0, 105)
    ax.set_xlabel("day")
    ax.set_ylabel("%")
    if any(cols["cloud_gpus"]):
        twin = ax.twinx()
        twin.plot(days, cols["cloud_gpus"], color="tab:orange", label="cloud GPUs")
        twin.set_ylabel("cloud GPUs")
        twin.legend(loc="upper right")
    ax.legend(loc="upper left")
    ax.set_title(f"utilisation: {title}")
    fig.tight_layout()
    save(fig, "utilisation.png")

    fig, ax = plt.subplots(figsize=(8, 3.5))
    ax.plot(days, cols["queued"], label="waiting")
    ax.plot(days, cols["running"], label="running")
    ax.set_xlabel("day")
    ax.set_ylabel("jobs")
    ax.legend()
    ax.set_title(f"queue: {title}")
    fig.tight_layout()
    save(fig, "queue.png")

    fig, ax = plt.subplots(figsize=(6, 4))
    for name, values in jct_by_class(result).items():
        if values:
            n = len(values)
            ax.step([v / 3600 for v in values], [(i + 1) / n for i in range(n)], label=name)
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (hours)")
    ax.set_ylabel("share of jobs")
    ax.legend()
    ax.set_title(f"JCT CDF: {title}")
    fig.tight_layout()
    save(fig, "jct_cdf.png")

    fig, ax = plt.subplots(figsize=(8, 3.5))
    ax.plot(days, cols["spend_usd"])
    ax.set_xlabel("day")
    ax.set_ylabel("USD")
    ax.set_title(f"cloud spend: {title}")
    fig.tight_layout()
    save(fig, "spend.png")
    return written


def bars(
    rows: Sequence[tuple[Figure, dict[str, Estimate]]], groups: Sequence[str], out: Path
) -> list[Path]:
    """Per figure, a bar per group: its mean over the runs, with its 95 % interval as an
    error bar (none for a group of one run); ``charts/<figure key>.png``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder = out / "charts"
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    scale = {"share": 100.0}  # shares are drawn as percentages
    for figure, by_group in rows:
        names = [g for g in groups if g in by_group]
        factor = scale.get(figure.unit, 1.0)
        means = [by_group[g].mean * factor for g in names]
        errors = [(by_group[g].half_width or 0.0) * factor for g in names]
        fig, ax = plt.subplots(figsize=(max(4.0, 1.2 * len(names) + 2), 3.5))
        ax.bar(range(len(names)), means, yerr=errors, capsize=6, color="tab:blue", alpha=0.8)
        ax.set_xticks(range(len(names)), names, rotation=20 if len(names) > 3 else 0)
        ax.set_ylabel("%" if figure.unit == "share" else figure.unit)
        ax.set_title(f"{figure.label} (mean, 95% interval)")
        fig.tight_layout()
        path = folder / f"{figure.key}.png"
        fig.savefig(path, dpi=110, metadata={"Software": None})
        plt.close(fig)
        written.append(path)
    return written
