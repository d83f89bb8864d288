"""``meshctl sim run``, ``compare`` and ``sweep``'s flags through the CLI: a small mesh and a
synthetic trace end to end (report, charts), and bad flags as one line with exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from meshctl.cli.app import app

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[3]
POLICIES = ROOT / "examples" / "sim" / "policies"

MESH = """\
apiVersion: meshctl/v1
kind: Mesh
metadata: {name: small}
spec:
  pools:
    - name: onprem
      provider: ray
      address: http://head:8265
      labels: {tier: strategic}
      network: {topology: fat-tree, oversubscription: 2}
      nodes:
        - {name: a, count: 4, gpus: 8, cpus: 96, memory_gib: 1TiB,
           accelerator: {model: H100, memory_gib: 80GiB}, labels: {rack: r1, switch: s1}}
        - {name: b, count: 4, gpus: 8, cpus: 96, memory_gib: 1TiB,
           accelerator: {model: H100, memory_gib: 80GiB}, labels: {rack: r2, switch: s1}}
    - name: gcp-burst
      provider: gcp
      project: meshctl-sim
      region: us-central1
      labels: {tier: burst}
      node_types:
        - {name: a3-highgpu-1g, max_nodes: 20, spot: true}
        - {name: a3-highgpu-8g, max_nodes: 4}
      max_nodes: 20
"""

SMALL = ["--trace", "synthetic", "--days", "0.5", "--jobs-per-hour", "40", "--seed", "3"]


@pytest.fixture
def mesh_file(tmp_path: Path) -> Path:
    path = tmp_path / "mesh.yaml"
    path.write_text(MESH)
    return path


def test_run_prints_a_table_and_writes_the_report_and_charts(cli, mesh_file, tmp_path) -> None:
    out = tmp_path / "out"
    args = ["sim", "run", "--mesh", str(mesh_file), *SMALL, "--failures", "llama3"]
    result = cli.invoke(app, [*args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "on-prem utilisation" in result.output
    report = json.loads((out / "report.json").read_text())
    jobs = report["jobs"]
    assert jobs["finished"] > 0
    assert jobs["rejected"] == 0
    # the run ends at the window's end (half a day): what still runs then is unfinished
    assert jobs["finished"] + jobs["failed"] + jobs["unfinished"] == jobs["arrived"]
    assert report["end_s"] <= 0.5 * 86_400
    assert report["meta"]["failures"] == "llama3"
    charts = sorted(p.name for p in (out / "charts").iterdir())
    assert charts == ["jct_cdf.png", "queue.png", "spend.png", "utilisation.png"]
    assert all((out / "charts" / c).read_bytes()[:4] == b"\x89PNG" for c in charts)
    again = tmp_path / "again"
    assert cli.invoke(app, [*args, "--out", str(again), "--no-charts"]).exit_code == 0
    assert (again / "report.json").read_bytes() == (out / "report.json").read_bytes()


def test_run_with_data_reports_stalls_reads_and_hits(cli, mesh_file) -> None:
    """The same jobs with their datasets through the nodes' caches and without: the cache
    reads central storage less and stalls less."""
    figures = {}
    for model in ("cache", "no-cache"):
        args = ["sim", "run", "--mesh", str(mesh_file), *SMALL, "--data", model, "-o", "json"]
        result = cli.invoke(app, args)
        assert result.exit_code == 0, result.output
        report = json.loads(result.output)
        assert report["meta"]["data"]["model"] == model
        figures[model] = report["data"]
    cached, direct = figures["cache"], figures["no-cache"]
    assert direct["lookups"] == cached["lookups"] > 0
    assert direct["cache_hit_rate"] == 0.0
    assert direct["peer_gib"] == 0.0
    assert cached["cache_hit_rate"] > 0.0
    assert cached["central_gib"] < direct["central_gib"]
    assert cached["stall_gpu_hours"] < direct["stall_gpu_hours"]


def test_compare_is_a_sweep_of_one_seed(cli, mesh_file, tmp_path) -> None:
    """Each policy set once on the same trace and seed, gathered as a sweep: one run per set
    (n 1, no interval), each set's own report, and sweep.json."""
    out = tmp_path / "cmp"
    args = [
        "sim", "compare", "--mesh", str(mesh_file), *SMALL, "--arrival-scale", "3",
        "--policy", f"onprem-only={POLICIES / 'common'},{POLICIES / 'onprem-only.yaml'}",
        "--policy", f"burst={POLICIES / 'common'},{POLICIES / 'burst.yaml'}",
    ]  # fmt: skip
    result = cli.invoke(app, [*args, "--out", str(out), "--no-charts"])
    assert result.exit_code == 0, result.output
    assert "cloud spend" in result.stdout
    assert "one run each" in result.stdout
    both = json.loads((out / "sweep.json").read_text())
    assert both["sweep"]["policy_sets"] == ["onprem-only", "burst"]
    assert both["sweep"]["seeds"] == [3]
    assert both["unfinished"] == []
    reports = {run["policies"]: run["report"] for run in both["runs"]}
    assert reports["onprem-only"]["cloud_spend_usd"]["total"] == 0
    assert reports["onprem-only"]["jobs"]["arrived"] == reports["burst"]["jobs"]["arrived"]
    spend = both["figures"]["cloud_spend_usd.total"]["groups"]
    assert spend["burst"] == {"n": 1, "mean": reports["burst"]["cloud_spend_usd"]["total"],
                              "half_width": None, "low": None, "high": None}  # fmt: skip
    assert json.loads((out / "burst" / "report.json").read_text()) == reports["burst"]
    assert "±" not in result.stdout  # one seed: no interval


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(
            ["--failures", "often"], "--failures: expected one of none, stepfun", id="preset"
        ),
        pytest.param(["--checkpoint-interval", "soon"], "--checkpoint-interval:", id="interval"),
        pytest.param(["--trace", "nope.csv"], "nope.csv: expected a trace name", id="trace"),
        pytest.param(["--replicate", "0"], "--replicate", id="replicate"),
        pytest.param(["--days", "-1"], "--days", id="days"),
        pytest.param(["--inference", "hourly"], "--inference: expected none or diurnal",
                     id="inference"),
        pytest.param(["--data", "lots"], "--data: expected none, cache or no-cache", id="data"),
    ],
)  # fmt: skip
def test_bad_flags_are_one_line_and_exit_2(cli, mesh_file, args, message) -> None:
    result = cli.invoke(app, ["sim", "run", "--mesh", str(mesh_file), *SMALL, *args])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output


def test_inference_diurnal_reports_the_gain_over_a_static_split(cli, mesh_file) -> None:
    args = ["sim", "run", "--mesh", str(mesh_file), *SMALL, "--inference", "diurnal"]
    result = cli.invoke(app, [*args, "-o", "json"])
    assert result.exit_code == 0, result.output
    served = json.loads(result.stdout)["inference"]
    assert 0 < served["utilisation_static"] < served["utilisation_shared"] <= 1
    assert served["gain_pp"] == pytest.approx(
        100 * (served["utilisation_shared"] - served["utilisation_static"]), abs=0.01
    )
    table = cli.invoke(app, args)
    assert "inference: utilisation shared / static split" in table.stdout


def test_a_bad_mesh_file_names_the_line(cli, tmp_path) -> None:
    bad = tmp_path / "mesh.yaml"
    bad.write_text(MESH.replace("oversubscription: 2", "oversubscription: 0.5"))
    result = cli.invoke(app, ["sim", "run", "--mesh", str(bad), *SMALL])
    assert result.exit_code == 2
    assert "mesh.yaml:10: spec.pools[0].network.oversubscription" in result.output


def test_compare_needs_two_policy_sets(cli, mesh_file) -> None:
    result = cli.invoke(app, ["sim", "compare", "--mesh", str(mesh_file), "-p", "none", *SMALL])
    assert result.exit_code == 2
    assert "at least two policy sets" in result.output


@pytest.mark.parametrize(
    ("seeds", "message"),
    [
        pytest.param("0..x", "--seeds: expected a range A..B or a comma list", id="word"),
        pytest.param("5..2", "with A <= B, got '5..2'", id="backwards"),
        pytest.param("1,2,1", "expected each seed once, got 1 twice", id="twice"),
        pytest.param("-1", "with A <= B", id="negative"),
    ],
)
def test_sweep_bad_seeds_are_one_line_and_exit_2(cli, mesh_file, seeds, message) -> None:
    result = cli.invoke(app, ["sim", "sweep", "--mesh", str(mesh_file), "-p", "none",
                              "--seeds", seeds, *SMALL[:-2]])  # fmt: skip
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output


def test_sweep_with_no_mesh_up_and_no_ray_says_what_to_do(cli, mesh_file) -> None:
    """The runner's home is empty: no embedded mesh is up."""
    args = ["sim", "sweep", "--mesh", str(mesh_file), "-p", "none", "--seeds", "0..1"]
    result = cli.invoke(app, [*args, *SMALL[:-2]])
    assert result.exit_code == 2, result.output
    assert "run meshctl up, or pass --ray ADDRESS" in result.output
    assert len(result.output.strip().splitlines()) == 1
