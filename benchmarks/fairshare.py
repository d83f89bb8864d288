"""Reclaim within a cohort on a real trace: Philly's virtual clusters as teams sharing the
10,000-GPU example mesh, with and without reclaim (issue 50).

    python benchmarks/fairshare.py [--start-day 27.6] [--days 2] [--replicate 24] [--teams 5]
                                   [--seed 0] [--failures none] [--queue-depth 500]
                                   [--sample-s 300] [--backlogged-after-s 120] [--json]

The workload: the Philly trace (../shared/traces/philly/philly.csv) from ``--start-day`` for
``--days``, each job ``--replicate`` times, on examples/sim/mesh.yaml under the example's
policies (examples/sim/policies: common + onprem-only.yaml, so the teams share the 10,000
on-prem GPUs and nothing bursts). Each job's team is its virtual cluster (the trace's
``cluster`` column, ``ClassRules(teams_from="group")``): the ``--teams`` busiest in the
window (GPU-hours asked, each job's duration cut at the window's end) by name, the others
folded into ``other``. Every team has a quota in one cohort, ``philly``, its nominal GPUs
proportional to its virtual cluster's nodes in philly_vc_nodes.csv (``other``: the sum of
the rest), scaled to the mesh's GPUs (largest remainders, so they add up to them). Two arms,
the same jobs and seed: ``no-reclaim`` (``reclaim: never``: a team borrows what the others
leave idle and gets it back only as their jobs end) and ``reclaim-to-nominal``
(``reclaim: any``, ``spec.reclaim: {grace_s: 2m, min_runtime_s: 5m}``). Reclaim to a fair
share beyond the nominal quota is not built yet.

Each arm's timeline comes from the lifecycle's recorded actions (``SimConfig.record``): a job
waits from its arrival (and from each requeue) to its next start, and holds its GPUs from a
start to its requeue or its end (a job leaving holds them through its grace). Figures:

- ``jain_index``: every ``--sample-s``, Jain's index (sum x)^2 / (n sum x^2) of x = GPUs held /
  nominal quota over the teams backlogged then (a job of theirs has waited longer than
  ``--backlogged-after-s``: the scheduler has seen it and not started it), at instants with
  two such teams or more; the mean over those instants (``jain_samples``; the lowest:
  ``jain_min``). 1: every team that wants more holds the same multiple of its quota.
- ``time_to_fair_share_p99_s``: a team is owed while one of its waiting jobs fits in its
  nominal quota beside what it holds (it holds less than min(its demand, its quota), to
  within one job); an episode lasts from when it becomes owed to when it no longer is; the
  p99 (and p50) over episodes. Episodes still open at the window's end count up to it
  (``episodes_open``).
- ``reclaim_lost_gpu_h``: GPU-hours lost (held, computed, not saved) by jobs reclaimed. The
  simulator keeps lost work per job, not per stop, so a job stopped both by reclaim and for
  another reason (a priority preemption) has its loss shared by how many of each;
  ``mixed_jobs`` counts those (0: the figure is exact).
- ``utilization``: on-prem GPU-seconds held over installed, over the window (the report's
  ``utilisation.onprem``).
- ``wait_by_team``: first start minus arrival of the jobs that started, p50 and p95, and how
  many never started in the window.

Each arm is one deterministic run (the same figures every time; only ``wall_s`` moves).
``--queue-depth``: pending jobs decided per cycle, as ``sim run``'s (0: all). Exits 2 when
the trace folder is missing.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from meshctl.lifecycle.actions import Action, Fail, Leave, Requeue, Start  # noqa: E402
from meshctl.sim.core.engine import Result  # noqa: E402
from meshctl.sim.core.report import percentile  # noqa: E402

EXAMPLE = ROOT / "examples" / "sim"
COHORT = "philly"
OTHER = "other"
ARMS = {"no-reclaim": "never", "reclaim-to-nominal": "any"}
RECLAIM_REASON = "reclaimed for team "  # a reclaim's rule (scheduler.reclaim.Reclaimed.reason)
EPS = 1e-9


# --- the timeline: who waits and who holds GPUs, when -----------------------------------------


@dataclass(frozen=True, slots=True)
class Span:
    """A job of ``team`` waiting, or holding ``gpus``, over [start_s, end_s)."""

    job: str
    team: str
    gpus: float
    start_s: float
    end_s: float


@dataclass(slots=True)
class Timeline:
    held: list[Span] = field(default_factory=list)
    waiting: list[Span] = field(default_factory=list)


def timeline(result: Result, end_s: float) -> Timeline:
    """Each job's waits and holds, from its arrival, its recorded starts and requeues and its
    end; a job rejected at its first decision neither waits nor holds."""
    acts: dict[str, list[tuple[float, Action]]] = defaultdict(list)
    for at_s, action in result.actions:
        if isinstance(action, Start | Requeue | Fail):
            acts[action.job_id].append((at_s, action))
    out = Timeline()
    for r in result.jobs:
        if r.rejected:
            continue
        job, gpus = r.job, r.job.total_gpus
        waits: float | None = job.arrival_s
        holds: float | None = None
        for at_s, action in acts.get(job.id, []):
            if isinstance(action, Start) and waits is not None:
                out.waiting.append(Span(job.id, job.team, gpus, waits, at_s))
                waits, holds = None, at_s
            elif holds is not None and not isinstance(action, Start):
                out.held.append(Span(job.id, job.team, gpus, holds, at_s))
                holds, waits = None, (at_s if isinstance(action, Requeue) else None)
            elif waits is not None and isinstance(action, Fail):
                out.waiting.append(Span(job.id, job.team, gpus, waits, at_s))
                waits = None
        if holds is not None:
            out.held.append(Span(job.id, job.team, gpus, holds, min(r.end_s or end_s, end_s)))
        if waits is not None and waits < end_s:
            out.waiting.append(Span(job.id, job.team, gpus, waits, end_s))
    return out


# --- the figures --------------------------------------------------------------------------------


def jain(shares: Sequence[float]) -> float:
    """Jain's fairness index of ``shares``: 1 when all are equal, 1/n when one has all."""
    total, squares = sum(shares), sum(x * x for x in shares)
    return 1.0 if squares <= 0 else total * total / (len(shares) * squares)


@dataclass(slots=True)
class _Team:
    """A team during the sweep: GPUs held, and its waiting jobs (oldest first) and sizes."""

    held: float = 0.0
    waiting: dict[str, float] = field(default_factory=dict)  # job -> waiting since
    sizes: Counter[float] = field(default_factory=Counter)

    def owed(self, quota: float) -> bool:
        """One of its waiting jobs fits in its quota beside what it holds."""
        return any(n > 0 and self.held + g <= quota + EPS for g, n in self.sizes.items())


@dataclass(frozen=True, slots=True)
class Fairness:
    jain_index: float | None
    jain_samples: list[float]  # the index at each instant with two teams backlogged or more
    episodes: list[float]  # how long each owed episode lasted (s)
    episodes_open: int


def fairness(
    line: Timeline, quotas: Mapping[str, float], end_s: float, sample_s: float, after_s: float
) -> Fairness:
    """Jain's index of held / quota over the backlogged teams every ``sample_s``, and the
    teams' owed episodes (see the module's doc), in one sweep over the timeline's changes."""
    changes: list[tuple[float, int, Span]] = []  # (time, 0 ends first / 1 begins, span)
    for kind, spans in ((0, line.held), (1, line.waiting)):
        for s in spans:  # what changes at the window's end is left open; 0 s is no change
            if s.end_s > s.start_s:
                changes += [
                    (t, k, s) for t, k in ((s.start_s, 2 + kind), (s.end_s, kind)) if t < end_s
                ]
    changes.sort(key=lambda c: (c[0], c[1]))
    teams = {name: _Team() for name in quotas}
    owed_since: dict[str, float] = {}
    episodes: list[float] = []
    samples: list[float] = []
    next_sample, i = 0.0, 0
    while i < len(changes) or next_sample <= end_s:
        at_s = changes[i][0] if i < len(changes) else math.inf
        if next_sample <= end_s and next_sample < at_s:
            samples += _sample(teams, quotas, next_sample, after_s)
            next_sample += sample_s
            continue
        touched: set[str] = set()
        while i < len(changes) and changes[i][0] == at_s:
            _apply(teams[changes[i][2].team], changes[i][1], changes[i][2])
            touched.add(changes[i][2].team)
            i += 1
        for name in touched:
            _episode(name, teams[name].owed(quotas[name]), at_s, owed_since, episodes)
    opened = [end_s - since for since in owed_since.values()]
    mean = sum(samples) / len(samples) if samples else None
    return Fairness(mean, samples, episodes + opened, len(opened))


def _apply(team: _Team, kind: int, span: Span) -> None:
    """One change: 0/2 a hold ends/begins, 1/3 a wait ends/begins."""
    if kind in (0, 2):
        team.held += span.gpus if kind == 2 else -span.gpus
    elif kind == 3:
        team.waiting[span.job] = span.start_s
        team.sizes[span.gpus] += 1
    else:
        team.waiting.pop(span.job, None)
        team.sizes[span.gpus] -= 1


def _episode(
    name: str, owed: bool, at_s: float, since: dict[str, float], episodes: list[float]
) -> None:
    if owed and name not in since:
        since[name] = at_s
    elif not owed and name in since:
        episodes.append(at_s - since.pop(name))


def _sample(
    teams: Mapping[str, _Team], quotas: Mapping[str, float], at_s: float, after_s: float
) -> list[float]:
    """Jain's index at ``at_s`` over the teams backlogged then; none with fewer than two."""
    shares = [
        t.held / quotas[name]
        for name, t in teams.items()
        if t.waiting and next(iter(t.waiting.values())) <= at_s - after_s and quotas[name] > 0
    ]
    return [jain(shares)] if len(shares) >= 2 else []


def reclaim_losses(result: Result) -> tuple[float, int, int]:
    """(GPU-hours lost by reclaimed jobs, reclaims, jobs also stopped for another reason):
    each job's lost work shared among its stops by how many were reclaims."""
    stops: dict[str, list[bool]] = defaultdict(list)
    for _, action in result.actions:
        if isinstance(action, Leave):
            stops[action.job_id].append(RECLAIM_REASON in action.reason)
    lost_s, reclaims, mixed = 0.0, 0, 0
    for r in result.jobs:
        kinds = stops.get(r.job.id)
        if not kinds or not any(kinds):
            continue
        reclaims += sum(kinds)
        mixed += not all(kinds)
        lost_s += r.lost_gpu_s * sum(kinds) / len(kinds)
    return lost_s / 3600.0, reclaims, mixed


def waits_by_team(result: Result, teams: Iterable[str]) -> dict[str, dict[str, float | int]]:
    waits: dict[str, list[float]] = {name: [] for name in teams}
    unstarted: Counter[str] = Counter()
    for r in result.jobs:
        if r.rejected:
            continue
        if r.first_start_s is None:
            unstarted[r.job.team] += 1
        else:
            waits[r.job.team].append(r.first_start_s - r.job.arrival_s)
    out: dict[str, dict[str, float | int]] = {}
    for name, values in waits.items():
        values.sort()
        out[name] = {
            "started": len(values),
            "unstarted": unstarted[name],
            "p50_s": round(percentile(values, 50), 1),
            "p95_s": round(percentile(values, 95), 1),
        }
    return out


def figures(
    result: Result, quotas: Mapping[str, float], end_s: float, sample_s: float, after_s: float
) -> dict[str, Any]:
    fair = fairness(timeline(result, end_s), quotas, end_s, sample_s, after_s)
    lost_h, reclaims, mixed = reclaim_losses(result)
    ordered = sorted(fair.episodes)
    t = result.totals
    return {
        "jain_index": None if fair.jain_index is None else round(fair.jain_index, 4),
        "jain_samples": len(fair.jain_samples),
        "jain_min": round(min(fair.jain_samples), 4) if fair.jain_samples else None,
        "time_to_fair_share_p99_s": round(percentile(ordered, 99), 1),
        "time_to_fair_share_p50_s": round(percentile(ordered, 50), 1),
        "episodes": len(ordered),
        "episodes_open": fair.episodes_open,
        "reclaim_lost_gpu_h": round(lost_h, 1),
        "reclaims": reclaims,
        "mixed_jobs": mixed,
        "preemptions": t.preemptions,
        "utilization": round(t.onprem_busy_gpu_s / t.onprem_gpu_s if t.onprem_gpu_s else 0.0, 4),
        "wait_by_team": waits_by_team(result, quotas),
    }


# --- the teams and their quotas ---------------------------------------------------------------


def busiest(jobs: Iterable[Any], end_s: float, n: int) -> list[str]:
    """The ``n`` groups whose jobs ask most GPU-hours, each job's duration cut at ``end_s``."""
    asked: Counter[str] = Counter()
    for job in jobs:
        if job.group is not None:
            asked[job.group] += job.gpus * min(job.duration_s, max(0.0, end_s - job.arrival_s))
    return [g for g, _ in sorted(asked.items(), key=lambda ga: (-ga[1], ga[0]))[:n]]


def quotas_of(nodes: Mapping[str, int], teams: Sequence[str], gpus: int) -> dict[str, int]:
    """Each team's nominal GPUs, in proportion to its virtual cluster's nodes (``other``: the
    rest's), ``gpus`` in all, split by largest remainders."""
    weight = {t: float(nodes.get(t, 0)) for t in teams}
    weight[OTHER] = float(sum(n for vc, n in nodes.items() if vc not in teams))
    total = sum(weight.values())
    exact = {t: gpus * w / total for t, w in weight.items()}
    out = {t: math.floor(x) for t, x in exact.items()}
    for t in sorted(exact, key=lambda t: (out[t] - exact[t], t))[: gpus - sum(out.values())]:
        out[t] += 1
    return out


def vc_nodes(path: Path) -> dict[str, int]:
    with path.open(newline="") as handle:
        return {row["vc"]: int(row["node num"]) for row in csv.DictReader(handle)}


def quota_policy(quotas: Mapping[str, int], reclaim: str) -> dict[str, Any]:
    return {
        "apiVersion": "meshctl/v1",
        "kind": "Policy",
        "metadata": {"name": "fairshare-quotas"},
        "spec": {
            "quotas": [
                {"team": t, "cohort": COHORT, "gpus": g, "reclaim": reclaim}
                for t, g in sorted(quotas.items())
            ],
            "reclaim": {"grace_s": "2m", "min_runtime_s": "5m"},
        },
    }


# --- the runs -------------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> dict[str, Any]:
    from meshctl.catalog import load_catalog
    from meshctl.files.policies import read_mesh, read_policy_files
    from meshctl.policy.compiled import compile_policies
    from meshctl.sim.core import workload as wl
    from meshctl.sim.core.engine import simulate
    from meshctl.sim.run import RunSpec, config_of, sim_mesh
    from meshctl.sim.run.traces import load, traces_dir

    philly = traces_dir() / "philly"
    if not (philly / "philly.csv").is_file():
        print(f"error: the Philly trace is not at {philly}", file=sys.stderr)
        raise SystemExit(2)
    spec = RunSpec(mesh=EXAMPLE / "mesh.yaml", trace="philly", days=args.days,
                   start_day=args.start_day, replicate=args.replicate, failures=args.failures,
                   seed=args.seed, queue_depth=args.queue_depth or None)  # fmt: skip
    mesh = read_mesh(spec.mesh)
    the_mesh = sim_mesh(mesh, {p: load_catalog(p).catalog for p in ("aws", "gcp")}, 0.3)
    raw = wl.window(load("philly"), args.start_day * wl.DAY_S, args.days)
    end_s = args.days * wl.DAY_S
    teams = busiest(raw, end_s, args.teams)
    raw = [replace(j, group=j.group if j.group in teams else OTHER) for j in raw]
    rules = wl.ClassRules(gpus_per_node=8, teams_from="group")
    jobs = wl.classify(wl.replicate(raw, args.replicate), args.seed, rules)
    gpus = int(sum(n.gpus for n in the_mesh.nodes))
    quotas = quotas_of(vc_nodes(philly / "philly_vc_nodes.csv"), teams, gpus)
    config = replace(config_of(spec), record=True)
    setup = {
        "window": {"start_day": args.start_day, "days": args.days, "replicate": args.replicate},
        "jobs": len(jobs),
        "onprem_gpus": gpus,
        "quotas": quotas,
        "jobs_by_team": dict(sorted(Counter(j.team for j in jobs).items())),
        "seed": args.seed,
        "failures": args.failures,
        "queue_depth": args.queue_depth,
        "sample_s": args.sample_s,
        "backlogged_after_s": args.backlogged_after_s,
    }
    arms: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for arm, mode in ARMS.items():
            path = Path(tmp) / f"{arm}.yaml"
            path.write_text(json.dumps(quota_policy(quotas, mode)))  # JSON is YAML: names quoted
            files = read_policy_files(
                [EXAMPLE / "policies" / "common", EXAMPLE / "policies" / "onprem-only.yaml", path]
            )
            began = time.perf_counter()
            result = simulate(the_mesh, jobs, config, compile_policies(files.policies))
            wall_s = time.perf_counter() - began
            arms[arm] = figures(result, quotas, end_s, args.sample_s, args.backlogged_after_s)
            arms[arm]["wall_s"] = round(wall_s, 1)
            print(f"{arm}: simulated in {wall_s:.1f} s", file=sys.stderr)
    return {"setup": setup, "arms": arms}


def table(doc: Mapping[str, Any]) -> str:
    arms = doc["arms"]
    names = list(arms)
    rows = [
        ("jain_index", "jain_index"),
        ("  samples (>= 2 teams backlogged)", "jain_samples"),
        ("  lowest", "jain_min"),
        ("time_to_fair_share_p99_s", "time_to_fair_share_p99_s"),
        ("time_to_fair_share_p50_s", "time_to_fair_share_p50_s"),
        ("  episodes (open at the end)", "episodes"),
        ("reclaim_lost_gpu_h", "reclaim_lost_gpu_h"),
        ("  reclaims (jobs also preempted)", "reclaims"),
        ("preemptions (all)", "preemptions"),
        ("utilization", "utilization"),
    ]
    out = [f"{'':36}" + "".join(f"{n:>22}" for n in names)]
    for label, key in rows:
        cells = []
        for n in names:
            value = arms[n][key]
            if key == "episodes":
                value = f"{value} ({arms[n]['episodes_open']})"
            elif key == "reclaims":
                value = f"{value} ({arms[n]['mixed_jobs']})"
            cells.append(f"{value!s:>22}")
        out.append(f"{label:36}" + "".join(cells))
    quotas = doc["setup"]["quotas"]
    out.append(f"{'wait p50 / p95 (s), by team':36}")
    for team in sorted(quotas):
        waits = [arms[n]["wait_by_team"][team] for n in names]
        cells = [f"{w['p50_s']:>10} / {w['p95_s']:<9}" for w in waits]
        out.append(
            f"  {team} (quota {quotas[team]})".ljust(36) + "".join(f"{c:>22}" for c in cells)
        )
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--start-day", type=float, default=27.6)
    parser.add_argument("--days", type=float, default=2.0)
    parser.add_argument("--replicate", type=int, default=24)
    parser.add_argument("--teams", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--failures", default="none")
    parser.add_argument("--queue-depth", type=int, default=500, help="0: all (sim run: 500)")
    parser.add_argument("--sample-s", type=float, default=300.0)
    parser.add_argument("--backlogged-after-s", type=float, default=120.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    doc = run(args)
    print(json.dumps(doc, indent=2, sort_keys=True) if args.json else table(doc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
