"""A sweep's statistics: many runs' reports in, per policy set and figure a mean and its 95 %
confidence interval out. Pure: the standard library only, no Ray, no files, no clock (a unit
test holds it to that); ``meshctl.sim.run.rayrun`` runs the sweep, ``meshctl sim`` renders it.

    runs = [Finished(RunKey("burst", "philly", seed), report, attempts=1), ...]
    sweep = Sweep(("onprem-only", "burst"), ("philly",), seeds, finished, unfinished, setting)
    for figure, by_group in summary(sweep): ...   # Estimate(n, mean, half_width)
    document(sweep)                               # sweep.json, and `sim sweep -o json`

The interval is Student's t: ``mean +- t(0.975, n - 1) * s / sqrt(n)``, with ``s`` the
sample standard deviation (n - 1 in the denominator). Runs with different seeds are
independent draws of the same experiment (the seed drives every random stream of a run), so
the interval says where the figure's mean over seeds lies; one run gives no interval.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

CLASSES = ("critical", "standard", "best-effort", "all")
Z_975 = 1.959963984540054  # the standard normal's 0.975 quantile
# Student's t, 0.975 quantile, for 1 to 30 degrees of freedom (any statistics table).
T_975 = (
    12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646, 2.3060, 2.2622, 2.2281,
    2.2010, 2.1788, 2.1604, 2.1448, 2.1314, 2.1199, 2.1098, 2.1009, 2.0930, 2.0860,
    2.0796, 2.0739, 2.0687, 2.0639, 2.0595, 2.0555, 2.0518, 2.0484, 2.0452, 2.0423,
)  # fmt: skip
MAX_SEEDS = 100_000


@dataclass(frozen=True, slots=True)
class Figure:
    """One number of a run's report: ``key`` is its dotted path (``utilisation.onprem``);
    ``unit`` says how to show it: share (0..1), s, usd, hours, count or points."""

    key: str
    label: str
    unit: str


def _class_figures() -> list[Figure]:
    found = []
    for name in CLASSES:
        for stat, what in (("queueing_delay", "wait"), ("jct", "JCT")):
            for tail, label in (("mean_s", "mean"), ("p99_s", "p99")):
                key = f"classes.{name}.{stat}.{tail}"
                found.append(Figure(key, f"{what} {name} ({label})", "s"))
    return found


# In the order the table shows them (as ``sim run``'s rows); a figure no run reports (data,
# inference without their flags) is left out of the summary.
FIGURES: tuple[Figure, ...] = (
    Figure("jobs.arrived", "jobs arrived", "count"),
    Figure("jobs.finished", "jobs finished", "count"),
    Figure("jobs.rejected", "jobs rejected", "count"),
    Figure("jobs.failed", "jobs failed", "count"),
    Figure("jobs.unfinished", "jobs unfinished", "count"),
    Figure("jobs.ran_on_cloud", "jobs that ran on cloud", "count"),
    Figure("utilisation.onprem", "on-prem utilisation", "share"),
    Figure("utilisation.onprem_available", "on-prem utilisation of up", "share"),
    Figure("utilisation.cloud_gpu_hours", "cloud GPU-hours", "hours"),
    *_class_figures(),
    Figure("cloud_spend_usd.total", "cloud spend", "usd"),
    Figure("preemptions", "preemptions", "count"),
    Figure("backfill_starts", "backfill starts", "count"),
    Figure("failures.node_failures", "node failures", "count"),
    Figure("failures.spot_reclaims", "spot reclaims", "count"),
    Figure("failures.jobs_interrupted", "jobs interrupted", "count"),
    Figure("gpu_hours.lost_to_failures", "GPU-hours lost to failures", "hours"),
    Figure("goodput", "goodput (useful / held)", "share"),
    Figure("ettr", "ETTR (mean per job)", "share"),
    Figure("data.stall_share", "data stall (share of GPU time)", "share"),
    Figure("data.egress_usd", "data egress", "usd"),
    Figure("data.cache_hit_rate", "cache hit rate", "share"),
    Figure("inference.utilisation_shared", "inference: utilisation shared", "share"),
    Figure("inference.gain_pp", "inference: gain over a static split", "points"),
)


@dataclass(frozen=True, slots=True, order=True)
class RunKey:
    """One run of a sweep: a policy set (by name), a trace and a seed."""

    policies: str
    trace: str
    seed: int


@dataclass(frozen=True, slots=True)
class Finished:
    key: RunKey
    report: Mapping[str, Any]
    attempts: int | None = 1  # None: the executor could not tell


@dataclass(frozen=True, slots=True)
class Unfinished:
    key: RunKey
    reason: str  # one line: why the executor gave up on it
    attempts: int | None = None


@dataclass(frozen=True, slots=True)
class Estimate:
    """n values' mean and the half-width of its 95 % interval (None for n < 2)."""

    n: int
    mean: float
    half_width: float | None

    @property
    def low(self) -> float | None:
        return None if self.half_width is None else self.mean - self.half_width

    @property
    def high(self) -> float | None:
        return None if self.half_width is None else self.mean + self.half_width


@dataclass(frozen=True)
class Sweep:
    """What a sweep asked for and what came back. ``setting``: what every run shared (mesh,
    days, failures ..., where it ran), copied into the document as is."""

    policies: tuple[str, ...]
    traces: tuple[str, ...]
    seeds: tuple[int, ...]
    finished: tuple[Finished, ...]
    unfinished: tuple[Unfinished, ...] = ()
    setting: Mapping[str, Any] = field(default_factory=dict)

    @property
    def runs(self) -> int:
        return len(self.policies) * len(self.traces) * len(self.seeds)


def t_975(df: int) -> float:
    """Student's t 0.975 quantile with ``df`` degrees of freedom: the table to 30, beyond it
    the Cornish-Fisher expansion around the normal quantile (Abramowitz and Stegun 26.7.5;
    within 1e-4 of the exact value from 30 on)."""
    if df < 1:
        raise ValueError(f"degrees of freedom: expected 1 or more, got {df}")
    if df <= len(T_975):
        return T_975[df - 1]
    z = Z_975
    g1 = (z**3 + z) / 4
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
    g4 = (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / 92160
    return float(z + g1 / df + g2 / df**2 + g3 / df**3 + g4 / df**4)


def estimate(values: Sequence[float]) -> Estimate:
    """The mean of ``values`` (at least one) and its 95 % Student t interval's half-width."""
    if not values:
        raise ValueError("estimate: expected at least one value")
    n = len(values)
    mean = math.fsum(values) / n
    if n < 2:
        return Estimate(n, mean, None)
    if max(values) == min(values):  # exactly: no rounding noise in a zero spread
        return Estimate(n, mean, 0.0)
    spread = statistics.stdev(values, mean)
    return Estimate(n, mean, t_975(n - 1) * spread / math.sqrt(n))


def value_of(report: Mapping[str, Any], key: str) -> float | None:
    """The figure at dotted ``key`` of a report, or None where the report has none: missing,
    not a number, or a statistic of no jobs (its dict says ``n: 0``)."""
    node: Any = report
    parent: Mapping[str, Any] = report
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        parent, node = node, node[part]
    if isinstance(node, bool) or not isinstance(node, int | float):
        return None
    if parent.get("n") == 0 and not key.endswith(".n"):
        return None
    return float(node)


def group_of(key: RunKey, traces: Sequence[str]) -> str:
    """The column a run counts in: its policy set, with the trace when a sweep has several."""
    return key.policies if len(traces) < 2 else f"{key.policies} @ {key.trace}"


def groups(sweep: Sweep) -> list[str]:
    return list(dict.fromkeys(
        group_of(RunKey(p, t, 0), sweep.traces) for p in sweep.policies for t in sweep.traces
    ))  # fmt: skip


def summary(sweep: Sweep) -> list[tuple[Figure, dict[str, Estimate]]]:
    """Per figure some run reports, per group with values for it: the estimate."""
    rows = []
    for figure in FIGURES:
        values: dict[str, list[float]] = {}
        for run in sweep.finished:
            value = value_of(run.report, figure.key)
            if value is not None:
                values.setdefault(group_of(run.key, sweep.traces), []).append(value)
        if values:
            rows.append((figure, {g: estimate(values[g]) for g in groups(sweep) if g in values}))
    return rows


def _number(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


def estimate_doc(e: Estimate) -> dict[str, Any]:
    return {"n": e.n, "mean": _number(e.mean), "half_width": _number(e.half_width),
            "low": _number(e.low), "high": _number(e.high)}  # fmt: skip


def document(sweep: Sweep) -> dict[str, Any]:
    """The sweep as JSON data: what was asked, the estimates by figure and group, every
    finished run's report and every run that did not finish, with why."""
    order = {name: i for i, name in enumerate(sweep.policies)}
    traces = {name: i for i, name in enumerate(sweep.traces)}

    def rank(key: RunKey) -> tuple[int, int, int]:
        return order.get(key.policies, len(order)), traces.get(key.trace, len(traces)), key.seed

    figures = {
        f.key: {"label": f.label, "unit": f.unit,
                "groups": {g: estimate_doc(e) for g, e in by.items()}}
        for f, by in summary(sweep)
    }  # fmt: skip
    finished = sorted(sweep.finished, key=lambda r: rank(r.key))
    unfinished = sorted(sweep.unfinished, key=lambda r: rank(r.key))
    return {
        "sweep": {
            **sweep.setting,
            "policy_sets": list(sweep.policies),
            "traces": list(sweep.traces),
            "seeds": list(sweep.seeds),
            "groups": groups(sweep),
            "runs": sweep.runs,
            "finished": len(sweep.finished),
        },
        "figures": figures,
        "runs": [{**_key_doc(r.key), "attempts": r.attempts, "report": dict(r.report)}
                 for r in finished],
        "unfinished": [{**_key_doc(r.key), "attempts": r.attempts, "reason": r.reason}
                       for r in unfinished],
    }  # fmt: skip


def _key_doc(key: RunKey) -> dict[str, Any]:
    return {"policies": key.policies, "trace": key.trace, "seed": key.seed}


def parse_seeds(text: str) -> list[int]:
    """``0..31`` (both ends included), ``1,2,5``, or both mixed (``0..3,10``); ValueError
    saying what was expected otherwise, or when a seed comes twice."""
    expected = "a range A..B or a comma list of seeds (integers >= 0)"
    seeds: list[int] = []
    for item in (part.strip() for part in text.split(",")):
        first, dots, last = item.partition("..")
        try:
            low, high = int(first), int(last if dots else first)
        except ValueError:
            raise ValueError(f"expected {expected}, got {text!r}") from None
        if low < 0 or high < low:
            raise ValueError(f"expected {expected} with A <= B, got {item!r}")
        if len(seeds) + high - low + 1 > MAX_SEEDS:
            raise ValueError(f"expected at most {MAX_SEEDS:,} seeds, got more in {text!r}")
        seeds += range(low, high + 1)
    twice = sorted(seed for seed, times in Counter(seeds).items() if times > 1)
    if twice:
        raise ValueError(f"expected each seed once, got {', '.join(map(str, twice))} twice")
    return seeds
