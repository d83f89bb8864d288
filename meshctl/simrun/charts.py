"""PNG charts of a simulation run (matplotlib, imported here only; the Agg backend, no display).

utilisation.png  on-prem GPU utilisation over time (of the GPUs up), and cloud GPUs
queue.png        jobs waiting and running over time
jct_cdf.png      job completion time CDF per criticality class (log scale)
spend.png        cumulative cloud spend
"""

from __future__ import annotations

from pathlib import Path

from meshctl.sim.engine import Result
from meshctl.sim.report import jct_by_class, series

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
