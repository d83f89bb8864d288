"""The simulator on a user's own mesh (issue 48, point 4): before the run, the workload's
shapes checked against the mesh's nodes (what can never fit, and why, with the assumption per
GPU); the run ends at the window's end; rejections counted by reason in the report and the
table; progress lines on a stderr that is not a terminal. The scaffold's mesh (``meshctl
init``: nodes of 1 CPU and 2 GiB) is the case a new user met."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from sim_helpers import FREE, config, job, mesh, node

from meshctl.cli import render
from meshctl.cli.app import app
from meshctl.cli.sim.view import rows_of
from meshctl.scheduler import Node, Offer, PoolInfo
from meshctl.sim.core import fits
from meshctl.sim.core.engine import CloudPool, SimMesh, simulate
from meshctl.sim.core.jobs import JobResult
from meshctl.sim.core.report import build_report, rejected_by_reason
from meshctl.sim.run import RunSpec, config_of

pytestmark = pytest.mark.unit

DAY_S = 86_400.0


def small(name: str, gpus: int = 4) -> Node:
    """A node as the scaffold has them: GPUs, but 1 CPU and 2 GiB of memory."""
    return dataclasses.replace(
        node(name, gpus), cpus=1.0, cpus_free=1.0, memory_gib=2.0, memory_gib_free=2.0
    )


def with_cloud(*nodes: Node) -> SimMesh:
    """``nodes`` on-prem and a cloud pool of one-GPU node types with 8 CPUs and 32 GiB."""
    offer = Offer("cloud", "g2-standard-8", 1, 24.0, "L4", "nvidia", 8, 32, 16, 0.85, 0.34,
                  True, 4)  # fmt: skip
    pools = (PoolInfo("onprem", cloud=False), PoolInfo("cloud", cloud=True, max_new_nodes=4))
    clouds = {"cloud": CloudPool("cloud", provision_s=180.0, spot_lifetime_s=None)}
    return SimMesh(tuple(nodes), pools, (offer,), clouds)


# --- before the run: what can never fit -----------------------------------------------------

CHECKS = [
    pytest.param(
        mesh(small("a"), small("b")),
        [job("j1", 0, 60), job("j2", 0, 60), job("j4", 0, 60, gpus=4)],
        {},
        [
            "2 jobs of 1 GPU x 1 node (4 CPUs, 32 GiB memory per node): needs 4 CPUs per node; "
            "the largest node has 1",
            "1 job of 4 GPUs x 1 node (16 CPUs, 128 GiB memory per node): needs 16 CPUs per "
            "node; the largest node has 1",
        ],
        [],
        id="scaffold-nodes-hold-no-trace-job",
    ),
    pytest.param(
        mesh(small("a"), small("b")),
        [job("j1", 0, 60), job("j4", 0, 60, gpus=4)],
        {"cpus_per_gpu": 0.25, "memory_gib_per_gpu": 0.5},
        [],
        [],
        id="the-assumption-lowered-to-the-nodes-fits",
    ),
    pytest.param(
        with_cloud(small("a")),
        [job("j1", 0, 60), job("j2", 0, 60, gpus=2)],
        {},
        [
            "1 job of 2 GPUs x 1 node (8 CPUs, 64 GiB memory per node): needs 8 CPUs per node; "
            "the largest node has 1"
        ],
        [
            "1 job of 1 GPU x 1 node (4 CPUs, 32 GiB memory per node): needs 4 CPUs per node; "
            "the largest node has 1"
        ],
        id="a-cloud-type-holds-one-gpu-jobs-only",
    ),
    pytest.param(
        mesh(node("a", 8), node("b", 8)),
        [job("g", 0, 60, gpus=8, nodes=3)],
        {},
        [
            "1 job of 8 GPUs x 3 nodes (32 CPUs, 256 GiB memory per node): needs 3 nodes with "
            "8 GPUs each; the pool onprem has 2 such nodes"
        ],
        [],
        id="a-gang-larger-than-the-pool",
    ),
]


@pytest.mark.parametrize(("simmesh", "jobs", "assumed", "never", "cloud_only"), CHECKS)
def test_the_check_names_each_shape_that_never_fits_and_why(
    simmesh, jobs, assumed, never, cloud_only
) -> None:
    fit = fits.check(simmesh, jobs, config(**assumed))
    assert [f"{m.shape()}: {m.reason}" for m in fit.never] == never
    assert [f"{m.shape()}: {m.reason}" for m in fit.cloud_only] == cloud_only
    assert fit.nothing_fits == (fit.never_jobs == len(jobs))


def test_the_warning_block_says_the_assumption_and_the_flags() -> None:
    fit = fits.check(with_cloud(small("a")), [job("j1", 0, 60), job("j2", 0, 60, gpus=2)],
                     config())  # fmt: skip
    lines = fits.warning_lines(fit)
    assert lines[0] == "1 of the 2 jobs can never fit this mesh and will be rejected:"
    assert lines[2].startswith("1 of the 2 jobs fit no on-prem node, only cloud node types")
    assert lines[-1] == (
        "Assumed per GPU: 4 CPUs and 32 GiB memory (a trace gives GPUs only; --cpus-per-gpu "
        "and --memory-gib-per-gpu change it)"
    )
    everything = fits.check(mesh(node("a", 8)), [job("j1", 0, 60)], config())
    assert fits.warning_lines(everything) == []


def test_nothing_fits_is_one_line_with_the_largest_shape_and_the_others() -> None:
    jobs = [job("a", 0, 60), job("b", 0, 60), job("c", 0, 60, gpus=2)]
    fit = fits.check(mesh(small("a")), jobs, config())
    assert fit.nothing_fits
    assert fits.why_nothing_fits(fit) == (
        "none of the workload's 3 jobs can ever fit this mesh: 2 jobs of 1 GPU x 1 node "
        "(4 CPUs, 32 GiB memory per node): needs 4 CPUs per node; the largest node has 1; "
        "and 1 other shape; assumed per GPU: 4 CPUs and 32 GiB memory (a trace gives GPUs "
        "only; --cpus-per-gpu and --memory-gib-per-gpu change it)"
    )


# --- the run ends at the window's end -------------------------------------------------------


def test_a_window_run_ends_at_the_window_and_a_longer_job_is_unfinished() -> None:
    """A job of ten days in a one-day window: unfinished at the window's end, its GPU time up
    to then counted as held and useful; a handful of cycles, not a year of rechecks."""
    spec = RunSpec(mesh=Path("mesh.yaml"), trace="synthetic", days=1.0)
    window = config_of(spec)
    assert window.until_s == window.window_s == DAY_S
    jobs = [job("long", 0, 10 * DAY_S), job("short", 0, 600), job("waits", 100, 60, gpus=2)]
    result = simulate(mesh(node("a", 2)), jobs, config(until_s=window.until_s))
    by_id = {r.job.id: r for r in result.jobs}
    assert by_id["short"].end_s == 600
    assert by_id["long"].end_s is None
    assert by_id["waits"].first_start_s is None
    assert by_id["long"].held_gpu_s == by_id["long"].useful_gpu_s == DAY_S
    assert result.end_s <= DAY_S
    assert result.totals.cycles <= DAY_S / 300 + 10  # a recheck every 5 min while one waits
    report = build_report(result, {})
    assert report["jobs"]["unfinished"] == 2
    assert report["gpu_hours"]["held"] == report["gpu_hours"]["useful"] == 24.2  # +600 s


# --- rejections by reason -------------------------------------------------------------------


def test_rejections_are_counted_by_reason_in_the_report_and_the_table() -> None:
    simmesh = with_cloud(small("a"))
    jobs = [job("one", 0, 60), job("two", 0, 60, gpus=2), job("two-b", 5, 60, gpus=2)]
    # no policy lets "one" burst: it waits to the end (without one: a year of rechecks)
    result = simulate(simmesh, jobs, config(checkpoints=FREE, until_s=3600.0))
    report = build_report(result, {"cloud_pools": ["cloud"]})
    reason = "needs 8 CPUs per node; the largest node has 1"  # the GPUs: only on-prem
    assert report["jobs"]["rejected_by_reason"] == {reason: 2}
    assert report["jobs"]["rejected"] == 2
    assert report["jobs"]["unfinished"] == 1
    report["fit"] = fits.figures(fits.check(simmesh, jobs, config()))
    rows = dict(rows_of(report))
    assert rows[f"  rejected: {reason}"] == "2"
    assert rows["on-prem utilisation"] == "0.0%: no job fits an on-prem node"


def test_rejected_reasons_go_most_common_first() -> None:
    rejected = ["b", "a", "b", None, "c", "a", "b"]
    results = [JobResult(job(f"j{i}", 0, 1), rejected=r) for i, r in enumerate(rejected)]
    assert list(rejected_by_reason(results).items()) == [("b", 3), ("a", 2), ("c", 1)]


# --- progress on a stderr that is not a terminal --------------------------------------------


def test_progress_is_a_line_every_few_seconds_and_the_last_status_at_the_end(capsys) -> None:
    wall = iter([0.0, 1.0, 6.0, 6.0, 7.0, 13.0, 13.0, 14.0])  # the clock, each time it is read
    with render.progress_status("simulating x", 100.0, every_s=5.0, clock=lambda: next(wall)) as s:
        s(10, "day 0.1")  # 1 s: too soon
        s(20, "day 0.2")  # 6 s: said
        s(30, "day 0.3")  # 7 s: too soon
        s(40, "day 0.4")  # 13 s: said
        s(50, "day 0.5")  # 14 s: too soon, said at the end
    assert capsys.readouterr().err.splitlines() == [
        "simulating x: day 0.2",
        "simulating x: day 0.4",
        "simulating x: day 0.5",
    ]


# --- the scaffold's mesh through the CLI ----------------------------------------------------

TRACE = """\
timestamp,duration,num_gpus
2017-10-09 00:00:00,600,1
2017-10-09 00:10:00,86400,1
2017-10-09 01:00:00,1200,2
2017-10-09 02:00:00,3600,8
"""


@pytest.fixture
def scaffold(cli, tmp_path, monkeypatch) -> Path:
    """``meshctl init``'s mesh, as the current directory, and a small trace in Philly's form."""
    where = tmp_path / "mesh"
    assert cli.invoke(app, ["init", str(where)]).exit_code == 0
    (where / "trace.csv").write_text(TRACE)
    monkeypatch.chdir(where)
    return where


def test_the_scaffold_warns_before_and_ends_at_the_window(cli, scaffold) -> None:
    args = ["sim", "run", "--mesh", "mesh.yaml", "-p", "policies", "--trace", "trace.csv",
            "--days", "0.5", "--out", "out", "--no-charts"]  # fmt: skip
    result = cli.invoke(app, args)
    assert result.exit_code == 0, result.output
    err = result.stderr.splitlines()
    assert err[0] == "warning: 1 of the 4 jobs can never fit this mesh and will be rejected:"
    assert err[1] == (
        "warning:   1 job of 8 GPUs x 1 node (32 CPUs, 256 GiB memory per node): needs 32 CPUs "
        "per node; the largest node has 1"
    )
    assert "--cpus-per-gpu and --memory-gib-per-gpu change it" in err[-2]
    assert err[-1].startswith("simulating policies: day 0.50 of 0.50, ")  # not a terminal
    report = json.loads((scaffold / "out" / "report.json").read_text())
    assert report["end_s"] <= 0.5 * DAY_S
    assert report["engine"]["cycles"] < 500
    by_reason = report["jobs"]["rejected_by_reason"]
    assert by_reason["needs 32 CPUs per node; the largest node has 1"] == 1
    assert sum(by_reason.values()) == report["jobs"]["rejected"]  # critical ones stay on-prem
    assert report["meta"]["per_gpu"] == {"cpus": 4.0, "memory_gib": 32.0}
    assert "rejected: needs 32 CPUs per node; the largest node has 1" in result.stdout


def test_the_scaffold_with_nothing_that_fits_exits_2_with_one_line(cli, scaffold) -> None:
    args = ["sim", "run", "--mesh", "mesh.yaml", "--trace", "trace.csv", "--days", "0.5",
            "--memory-gib-per-gpu", "500"]  # fmt: skip
    result = cli.invoke(app, args)
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1
    assert "Traceback" not in result.output
    assert result.stderr.startswith(
        "error: mesh.yaml: none of the workload's 4 jobs can ever fit this mesh: "
    )
    assert "assumed per GPU: 4 CPUs and 500 GiB memory" in result.stderr


def test_the_assumption_lowered_fits_the_scaffold(cli, scaffold) -> None:
    args = ["sim", "run", "--mesh", "mesh.yaml", "--trace", "trace.csv", "--days", "0.5",
            "--cpus-per-gpu", "0.125", "--memory-gib-per-gpu", "0.25", "-o", "json"]  # fmt: skip
    result = cli.invoke(app, args)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["fit"] == {"never": [], "cloud_only": []}
    assert report["jobs"]["rejected"] == 0
    assert report["utilisation"]["onprem"] > 0


def test_compare_says_what_never_fits_once_for_all_its_policy_sets(cli, scaffold) -> None:
    args = ["sim", "compare", "--mesh", "mesh.yaml", "-p", "policies", "-p", "none",
            "--trace", "trace.csv", "--days", "0.5", "--no-charts"]  # fmt: skip
    result = cli.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert result.stderr.count("can never fit this mesh") == 1
    assert result.stderr.count("simulating ") == 2  # a progress line at each run's end


def test_sweep_checks_the_shapes_before_it_looks_for_a_cluster(cli, scaffold) -> None:
    args = ["sim", "sweep", "--mesh", "mesh.yaml", "-p", "none", "--seeds", "0..1",
            "--trace", "trace.csv", "--days", "0.5", "--memory-gib-per-gpu", "500"]  # fmt: skip
    result = cli.invoke(app, args)
    assert result.exit_code == 2
    assert result.stderr.startswith(
        "error: mesh.yaml: none of the workload's 4 jobs can ever fit this mesh: "
    )
    assert result.stderr.count("\n") == 1
